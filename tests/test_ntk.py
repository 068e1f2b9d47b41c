"""The NTK experiment's math against autograd and against its own definitions
(docs/theory/softmax-ntk.md#setting)."""

import dataclasses
import math
import shutil

import numpy as np
import pytest
import torch

from sdyn.api import Run
from sdyn.experiments.common import seeded_generator
from sdyn.experiments.ntk import (
    ACTIVATIONS,
    EXPERIMENT,
    STREAM_INIT,
    NTKConfig,
    SphereData,
    forward,
    loss,
    loss_and_gradient,
    make_data,
    ntk_gram,
    squared_movement,
    symmetric_init,
    train,
)
from sdyn.grid import config_hash

torch.set_default_dtype(torch.float64)


def _problem(batch=3, n=6, d=4, m=10, d_out=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    W = torch.randn(batch, d, m, generator=g)
    a = torch.randint(0, 2, (batch, d_out, m), generator=g).double() * 2 - 1
    X = torch.randn(batch, n, d, generator=g)
    X = X / X.norm(dim=-1, keepdim=True)
    Y = torch.rand(batch, n, d_out, generator=g) * 2 - 1
    return W, a, X, Y


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_closed_form_gradient_equals_autograd(activation):
    W, a, X, Y = _problem()
    W.requires_grad_(True)
    L_auto = loss(forward(W, a, X, activation), Y)
    (g_auto,) = torch.autograd.grad(L_auto.sum(), W)
    L, g = loss_and_gradient(W.detach(), a, X, Y, activation)
    torch.testing.assert_close(L, L_auto.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(g, g_auto, rtol=1e-10, atol=1e-12)


def test_softmax_gradient_matches_claim_3_4_elementwise():
    # dL/dw_r = m sum_{i,l} (F_li - y_li)(a_lr - <a_l, S_i>) S_ir x_i, written out with loops.
    W, a, X, Y = (t[0] for t in _problem(batch=1, n=3, d=2, m=4, d_out=2))
    S = torch.softmax(X @ W, dim=-1)
    F = forward(W, a, X)
    m = W.shape[-1]
    expected = torch.zeros_like(W)
    for r in range(m):
        for i in range(X.shape[0]):
            for l_ in range(a.shape[0]):
                coef = (F[i, l_] - Y[i, l_]) * (a[l_, r] - a[l_] @ S[i]) * S[i, r]
                expected[:, r] += m * coef * X[i]
    _, g = loss_and_gradient(W, a, X, Y)
    torch.testing.assert_close(g, expected, rtol=1e-10, atol=1e-12)


def test_squared_movement_is_per_neuron_distance_and_leaves_weights_alone():
    W, _, _, _ = _problem(batch=2, d=3, m=5)
    W0 = torch.randn_like(W)
    before = W.clone()
    moved = squared_movement(W, W0)
    assert moved.shape == (2, 5)
    for b in range(2):
        for r in range(5):
            assert math.isclose(moved[b, r], ((W[b, :, r] - W0[b, :, r]) ** 2).sum(), rel_tol=1e-12)
    assert torch.equal(W, before)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_symmetric_init_gives_zero_output(activation):
    g = torch.Generator().manual_seed(1)
    W, a = symmetric_init(5, 4, 12, 3, 1.0, g)
    assert W.shape == (5, 4, 12) and a.shape == (5, 3, 12)
    X = torch.randn(5, 7, 4, generator=g, dtype=W.dtype)
    # The pairs cancel up to rounding: relative to the sum of the terms' magnitudes (|a|).
    scale = forward(W, a.abs(), X, activation).abs().max()
    assert forward(W, a, X, activation).abs().max() < 1e-13 * scale
    torch.testing.assert_close(W[..., 0::2], W[..., 1::2])
    torch.testing.assert_close(a[..., 0::2], -a[..., 1::2])


def test_symmetric_init_rejects_odd_width():
    with pytest.raises(ValueError, match="even"):
        symmetric_init(1, 2, 7, 1, 1.0, torch.Generator())


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_ntk_gram_equals_jacobian_kernel(activation):
    W, a, X, _ = _problem(batch=2, n=5, d=3, m=8, d_out=2)
    H = ntk_gram(W, a, X, activation)
    m = W.shape[-1]
    c_m = m if activation == "softmax" else 1
    for b in range(W.shape[0]):
        # vec(F) output-major: index l*n + i, as in Def. 3.6.
        def vecF(w, b=b):
            return forward(w, a[b], X[b], activation).transpose(0, 1).reshape(-1)

        J = torch.func.jacrev(vecF)(W[b]).reshape(H.shape[-1], -1)
        torch.testing.assert_close(H[b], J @ J.T / c_m, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(H, H.transpose(-1, -2))
    assert torch.linalg.eigvalsh(H).min() > -1e-10


def test_ntk_gram_matches_definition_3_6_loops():
    W, a, X, _ = (t[0] for t in _problem(batch=1, n=3, d=2, m=4, d_out=2))
    n, m, d_out = X.shape[0], W.shape[1], a.shape[0]
    S = torch.softmax(X @ W, dim=-1)
    H = ntk_gram(W, a, X)
    for l1 in range(d_out):
        for l2 in range(d_out):
            for i in range(n):
                for j in range(n):
                    total = 0.0
                    for r in range(m):
                        v1 = a[l1, r] - a[l1]  # v_{l1,r} = a_{l1,r} 1_m - a_{l1}
                        v2 = a[l2, r] - a[l2]
                        total += (v1 @ S[i]) * m * S[i, r] * (v2 @ S[j]) * m * S[j, r]
                    expected = X[i] @ X[j] * total / m
                    assert math.isclose(H[l1 * n + i, l2 * n + j], expected, rel_tol=1e-10)


def test_batched_training_equals_one_run_at_a_time():
    data = SphereData(d=5)
    runs = [
        Run(NTKConfig(n=10, m=32, steps=150, lr_scale=s, eps=1e-4), data, seed)
        for seed, s in [(0, 1.0), (1, 0.5), (2, 1.5)]
    ]
    together = train(runs, "cpu")
    for k, run in enumerate(runs):
        alone = train([run], "cpu")
        for key, value in alone.summaries[0].items():
            got = together.summaries[k][key]
            if isinstance(value, float):
                assert math.isclose(got, value, rel_tol=1e-14, abs_tol=1e-300), key
            else:
                assert got == value, key
        mine = together.curves[together.curves["run"] == k].drop(columns="run").to_numpy()
        theirs = alone.curves.drop(columns="run").to_numpy()
        n_common = min(len(mine), len(theirs))
        np.testing.assert_allclose(mine[:n_common], theirs[:n_common], rtol=1e-14, atol=1e-300)


def test_loss_decreases_geometrically_on_an_easy_case():
    # Wide network, few points: the NTK regime; loss contracts at least like (1 - eta m lambda/4)^t.
    run = Run(NTKConfig(n=8, m=512, steps=400, eps=1e-8), SphereData(d=8), 0)
    result = train([run], "cpu")
    s = result.summaries[0]
    assert s["status"] == "converged" and s["ntk_regime"] == 1
    curve = result.curves.set_index("step")["rel_loss"]
    bound_rate = 1 - s["eta"] * 512 * s["lambda_min"] / 4  # Lemma 5.3
    for step, rel in curve.items():
        assert rel <= bound_rate**step * (1 + 1e-9), step
    assert curve.is_monotonic_decreasing


def test_per_run_theorem_checks_follow_the_papers_definitions():
    # Recomputed from the run's own data, init, summaries and curve, formula by formula.
    cfg = NTKConfig(n=8, m=512, steps=400, eps=1e-8)
    run = Run(cfg, SphereData(d=8), 0)
    result = train([run], "cpu")
    s = result.summaries[0]
    X, Y = make_data(cfg, run.data, 0)
    W0, _ = symmetric_init(1, 8, 512, 1, 1.0, seeded_generator(0, STREAM_INIT, 8, 512))
    b_eff = float((X @ W0[0]).abs().max())
    B = max(cfg.theorem_C * cfg.sigma * math.sqrt(math.log(cfg.n / cfg.theorem_delta)), 1.0)
    assert s["theorem_B"] == pytest.approx(B) and s["B_eff"] == pytest.approx(b_eff)

    def D(b):  # Def. A.2, with n d = n outputs (Cor. 4.3) and ||F(0) - Y|| = ||Y||
        return 4 / (512 * s["lambda_min"]) * math.exp(3 * b) * math.sqrt(8) * float(Y.norm())

    move, drift = s["max_weight_movement"], s["max_kernel_drift"]
    assert s["weight_movement_bound_ratio"] == pytest.approx(move / D(B), rel=1e-9)
    assert s["weight_movement_bound_ratio_eff"] == pytest.approx(move / D(b_eff), rel=1e-9)
    assert s["kernel_drift_bound_ratio_eff"] == pytest.approx(
        drift / (move * 8 * math.exp(10 * b_eff)), rel=1e-9
    )
    rate = 1 - s["eta"] * 512 * s["lambda_min"] / 4  # Lemma 5.3
    curve = result.curves.set_index("step")["rel_loss"]
    live = curve[(curve.index >= 1) & (curve.index <= s["steps_to_eps"])]
    assert s["linear_rate_ratio"] == pytest.approx(max(live / rate**live.index), rel=1e-9)
    assert s["linear_rate_ratio"] <= 1 and s["kernel_regime"] == 1
    assert s["theorem_steps"] == pytest.approx(math.log(1e-8) / math.log(rate))
    assert s["budget_covers_theorem"] == int(s["theorem_steps"] <= 400)
    short = train([Run(NTKConfig(n=8, m=512, steps=5, eps=1e-8), SphereData(d=8), 0)], "cpu")
    assert short.summaries[0]["budget_covers_theorem"] == 0


def test_kernel_drift_and_movement_shrink_with_width():
    out = {
        m: train([Run(NTKConfig(n=8, m=m, steps=300), SphereData(), 0)], "cpu").summaries[0]
        for m in (64, 1024)
    }
    assert out[1024]["max_weight_movement"] < out[64]["max_weight_movement"] / 4
    assert out[1024]["max_kernel_drift"] < out[64]["max_kernel_drift"] / 16


def test_make_data_respects_the_unit_ball():
    X, Y = make_data(NTKConfig(n=50, d_out=3), SphereData(), seed=4)
    assert X.shape == (50, 8) and Y.shape == (50, 3)
    assert torch.allclose(X.norm(dim=1), torch.ones(50))
    assert (Y.norm(dim=1) <= 1).all()
    X2, _ = make_data(NTKConfig(n=50, d_out=3), SphereData(), seed=4)
    assert torch.equal(X, X2)


def test_runs_pooled_by_a_claim_share_no_random_draw_but_their_data_set():
    # The per-run bounds count runs as independent trials over the initialisation, and the
    # threshold fits count (n, seed) cells as independent: a seed's stream shared across n or m
    # (as one manual_seed(seed) per run did) would make their intervals too narrow.
    from sdyn.experiments.ntk.setup import initial

    data = SphereData()

    def draws(n, m, seed):
        X, _, W0, _, _ = initial([Run(NTKConfig(n=n, m=m), data, seed)], torch.device("cpu"))
        return X[0], W0[0, :, ::2]  # the distinct neurons of the symmetric pairs

    X, W = draws(16, 64, 0)
    X_again, W_again = draws(16, 64, 0)
    assert torch.equal(X, X_again) and torch.equal(W, W_again)  # reproducible
    assert torch.equal(draws(16, 128, 0)[0], X)  # the widths of an (n, seed) share its data
    values = set(W.flatten().tolist())
    for n, m, seed in ((16, 128, 0), (32, 64, 0), (16, 64, 1)):
        X_other, W_other = draws(n, m, seed)
        assert values.isdisjoint(W_other.flatten().tolist()), (n, m, seed)
        if (n, seed) != (16, 0):
            assert set(X.flatten().tolist()).isdisjoint(X_other.flatten().tolist()), (n, seed)


def test_config_rejects_out_of_range_values():
    with pytest.raises(ValueError, match="even"):
        NTKConfig(m=7)
    with pytest.raises(ValueError, match="n must be >= 2"):
        NTKConfig(n=1)
    with pytest.raises(ValueError, match="eps"):
        NTKConfig(eps=0)


def _summaries(runs):
    return train(runs, "cpu").summaries


def _gd_paths(monkeypatch, path, *args, **kw):
    """``gd`` on one path: kernel (the C++ loop), compiled or eager (gd_iteration per step)."""
    from sdyn import native
    from sdyn.experiments import ntk
    from sdyn.experiments.ntk import descent
    from sdyn.experiments.ntk import kernel as ntk_kernel

    monkeypatch.setitem(descent._COMPILED, "failed", path == "eager")
    with monkeypatch.context() as patch:
        if path != "kernel":
            patch.setattr(native, "load", lambda source: None)
        else:
            assert ntk_kernel.cpp_function(args[0]) is not None, "the C++ kernel did not build"
        return ntk.gd(*args, **kw)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("d_out", [1, 2])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("m", [3, 70])
def test_cpu_kernel_equals_the_eager_gd_iteration(monkeypatch, activation, d_out, dtype, m):
    # m = 3 takes the kernel's small-width path (vectors over points), m = 70 the other; n is not a
    # multiple of either's block of points (8, or a vector's lanes).
    W, a, X, Y = (t.to(dtype) for t in _problem(batch=4, n=13, d=5, m=m, d_out=d_out))
    c_m = W.shape[-1] if activation == "softmax" else 1
    eta = 0.8 / (c_m * torch.linalg.eigvalsh(ntk_gram(W, a, X, activation).double())[:, -1])
    eta = eta.to(dtype)
    Y[3] *= 1e-4
    eta[3] *= 1e4  # run 3 diverges: L/L(0) > DIVERGENCE_FACTOR, or NaN/Inf
    # Run 1 (and perhaps 2) stops early; at m = 3 the loss starts far above L0 = |Y|^2 / 2.
    eps = torch.tensor([0.0, 5.0 if m > 3 else 50.0, 0.05, 0.0], dtype=dtype)

    def observe(W, L):
        return torch.cat([L[:, None], W.flatten(1)], dim=1)

    args = (W, a, X, Y, eta, eps, 60, [0, 1, 5, 20, 60], activation, observe)
    eager = _gd_paths(monkeypatch, "eager", *args)
    kernel = _gd_paths(monkeypatch, "kernel", *args)
    assert kernel[2] == eager[2]
    assert kernel[2][3] == "diverged" and kernel[2][1] == "converged"
    assert torch.equal(kernel[1], eager[1])
    tol = {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}
    ok = torch.tensor([0, 1, 2])  # the diverged run's weights are NaN/Inf on both paths
    torch.testing.assert_close(kernel[0][ok], eager[0][ok], **tol)
    torch.testing.assert_close(kernel[3][ok], eager[3][ok], **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("d_out", [1, 2])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("name, function", [("jacobian", ntk_gram), ("forward", forward)])
def test_cpu_kernel_gram_and_outputs_equal_the_torch_path(
    monkeypatch, name, function, activation, d_out, dtype
):
    from sdyn import native
    from sdyn.experiments.ntk import kernel as ntk_kernel

    # n and m not multiples of the kernel's point block (8) nor of a vector's lanes.
    W, a, X, _ = (t.to(dtype) for t in _problem(batch=3, n=13, d=5, m=70, d_out=d_out))
    assert ntk_kernel.cpp_function(W, name) is not None, "the C++ kernel did not build"
    kernel = function(W, a, X, activation)
    monkeypatch.setattr(native, "load", lambda source: None)
    torch_path = function(W, a, X, activation)
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-6}
    torch.testing.assert_close(kernel, torch_path, **tol)
    assert kernel.abs().max() > 1e-3  # real outputs, not two zeros


def test_cpu_kernel_threads_share_runs_without_changing_them(monkeypatch):
    W, a, X, Y = _problem(batch=7, n=10, d=4, m=40, d_out=1)
    eta = 0.5 / (40 * torch.linalg.eigvalsh(ntk_gram(W, a, X))[:, -1])
    eps = torch.tensor([0.0, 0.3, 0.0, 0.1, 0.0, 0.0, 0.5])  # runs stop at different steps
    args = (W, a, X, Y, eta, eps, 50, [0, 7, 50])
    threads = torch.get_num_threads()
    try:
        outs = []
        for n_threads in (1, 3):
            torch.set_num_threads(n_threads)
            outs.append(_gd_paths(monkeypatch, "kernel", *args))
    finally:
        torch.set_num_threads(threads)
    (one, three) = outs
    assert one[2] == three[2] and torch.equal(one[1], three[1])
    assert torch.equal(one[0], three[0]) and torch.equal(one[3], three[3])


def test_compiled_step_equals_eager_and_falls_back_cleanly(monkeypatch):
    from sdyn.experiments.ntk import descent

    W, a, X, Y = _problem(batch=3, n=12, d=5, m=64, d_out=1)
    eta = 0.5 / (64 * torch.linalg.eigvalsh(ntk_gram(W, a, X))[:, -1])
    eps = torch.tensor([0.0, 0.2, 0.0])
    args = (W, a, X, Y, eta, eps, 80, [0, 10, 80])
    eager = _gd_paths(monkeypatch, "eager", *args)
    compiled = _gd_paths(monkeypatch, "compiled", *args)

    def broken(fn, **kw):
        def fails(*args):
            raise RuntimeError("no C++ compiler")

        return fails

    monkeypatch.setattr(torch, "compile", broken)
    monkeypatch.setitem(descent._COMPILED, "fn", None)
    with pytest.warns(UserWarning, match="torch.compile unavailable"):
        fallback = _gd_paths(monkeypatch, "compiled", *args)
    assert descent._COMPILED["failed"]
    for got in (compiled, fallback):
        assert got[2] == eager[2]
        assert torch.equal(got[1], eager[1])
        torch.testing.assert_close(got[0], eager[0], rtol=1e-10, atol=1e-12)
    assert torch.equal(fallback[0], eager[0])


def test_native_build_is_cached_and_a_missing_compiler_only_warns(monkeypatch, tmp_path):
    from sdyn import native
    from sdyn.experiments.ntk import kernel as ntk_kernel

    monkeypatch.setenv("SDYN_CACHE", str(tmp_path))
    native.load.cache_clear()
    try:
        assert native.load(ntk_kernel._KERNEL_SOURCE) is not None
        (built,) = tmp_path.glob("ntk_step-*.so")
        stamp = built.stat().st_mtime_ns
        native.load.cache_clear()
        assert native.load(ntk_kernel._KERNEL_SOURCE) is not None
        assert built.stat().st_mtime_ns == stamp  # loaded, not rebuilt
        # An edited header next to the source is a new build (it is in the cache key).
        sources = tmp_path / "src"
        sources.mkdir()
        for path in (ntk_kernel._KERNEL_SOURCE, ntk_kernel._KERNEL_SOURCE.with_name("kernel.h")):
            (sources / path.name).write_text(path.read_text())
        assert native.load(sources / "ntk_step.cpp") is not None
        (sources / "kernel.h").write_text((sources / "kernel.h").read_text() + "\n// edited\n")
        native.load.cache_clear()
        assert native.load(sources / "ntk_step.cpp") is not None
        assert len(list(tmp_path.glob("ntk_step-*.so"))) == 2
        # A compiler without OpenMP still builds the kernel (single-threaded).
        no_openmp = tmp_path / "cxx-without-openmp"
        compiler = shutil.which("c++") or shutil.which("g++")
        no_openmp.write_text(
            '#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && exit 1; done\n'
            f'exec {compiler} "$@"\n'
        )
        no_openmp.chmod(0o755)
        monkeypatch.setenv("CXX", str(no_openmp))
        monkeypatch.setenv("SDYN_CACHE", str(tmp_path / "without-openmp"))
        native.load.cache_clear()
        assert native.load(ntk_kernel._KERNEL_SOURCE) is not None
        assert len(list((tmp_path / "without-openmp").glob("ntk_step-*.so"))) == 1
        monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
        native.load.cache_clear()
        with pytest.warns(RuntimeWarning, match="could not build ntk_step.cpp"):
            assert native.load(ntk_kernel._KERNEL_SOURCE) is None
    finally:
        native.load.cache_clear()


def test_float32_batched_outputs_equal_one_at_a_time_to_1e_5():
    from sdyn.experiments.ntk import gd

    W, a, X, Y = (t.float() for t in _problem(batch=4, n=10, d=5, m=32, d_out=1))
    # A stable step for each run, as lr=auto picks it: 0.5 / (m lambda_max(H(0))).
    eta = 0.5 / (W.shape[-1] * torch.linalg.eigvalsh(ntk_gram(W, a, X))[:, -1])
    eps = torch.zeros(4, dtype=torch.float32)
    together = forward(gd(W, a, X, Y, eta, eps, 100, [0, 100])[0], a, X)
    for k in range(4):
        one = slice(k, k + 1)
        alone = forward(
            gd(W[one], a[one], X[one], Y[one], eta[one], eps[one], 100, [0, 100])[0], a[one], X[one]
        )
        torch.testing.assert_close(together[one], alone, rtol=1e-5, atol=1e-5 * alone.abs().max())


def test_float32_steps_keep_the_spectrum_and_observations_float64():
    def runs(dtype):
        cfg = NTKConfig(n=16, m=64, steps=400, record_points=10, dtype=dtype)
        return [Run(cfg, SphereData(), seed) for seed in range(3)]

    f64, f32 = (train(runs(dt), "cpu").summaries for dt in ("float64", "float32"))
    version = EXPERIMENT.version
    assert config_hash(runs("float64")[0], version) != config_hash(runs("float32")[0], version)
    for a, b in zip(f64, f32, strict=True):
        for key in ("lambda_min", "lambda_max", "eta", "B_eff"):  # from the init, in float64
            assert a[key] == b[key], key
        for key in ("final_rel_loss", "max_weight_movement", "max_kernel_drift"):
            assert math.isclose(a[key], b[key], rel_tol=1e-3), key


@pytest.mark.parametrize(
    ("activation", "dtype", "rtol"),
    [("softmax", "float64", 1e-10), ("relu", "float64", 1e-10), ("softmax", "float32", 1e-5)],
)
def test_packed_widths_and_sample_sizes_train_as_each_run_alone(
    monkeypatch, activation, dtype, rtol
):
    from sdyn import native
    from sdyn.experiments import ntk
    from sdyn.experiments.ntk import bundling, descent

    # Both sides on the eager PyTorch step, so only the packing differs.
    monkeypatch.setattr(native, "load", lambda source: None)
    monkeypatch.setitem(descent._COMPILED, "failed", True)
    cfg = NTKConfig(steps=120, record_points=12, d_out=2, eps=1e-2, activation=activation)
    shapes = [(8, 4), (16, 64), (32, 16)]
    runs = [
        Run(dataclasses.replace(cfg, n=n, m=m, dtype=dtype), SphereData(), seed)
        for n, m in shapes
        for seed in range(2)
    ]
    runs = runs[1::2] + runs[::2]  # shapes interleaved: the result keeps the caller's order
    assert (
        len({bundling.step_key(r) for r in runs}) == 1
        and len({ntk.shape_key(r) for r in runs}) == 3
    )
    packed = train(runs, "cpu")
    for k, run in enumerate(runs):
        alone = train([run], "cpu")
        for key, value in alone.summaries[0].items():
            got = packed.summaries[k][key]
            if isinstance(value, float) and math.isfinite(value):
                assert math.isclose(got, value, rel_tol=rtol, abs_tol=1e-12), (key, got, value)
            else:
                assert got == value or (math.isnan(got) and math.isnan(value)), key
        # A packed run that stopped early is frozen while the others train: its curve goes on.
        mine = packed.curves[packed.curves["run"] == k].drop(columns="run").to_numpy()
        theirs = alone.curves.drop(columns="run").to_numpy()
        np.testing.assert_allclose(mine[: len(theirs)], theirs, rtol=rtol, atol=1e-12)


def _train_on_the_gpu(monkeypatch, graphs: bool, fused: bool):
    """A packed bundle (widths 4-256, n 8-32) trained on cuda: record steps 0, 2, 6, 16, 44, 115,
    300, so that both graphs replay (32 iterations, then one at a time); on a CPU the runs reach
    eps at steps 19 and 119, and two exhaust the budget."""
    from sdyn.experiments.ntk import descent

    cfg = NTKConfig(steps=300, record_points=7)
    spec = [(8, 4, 1e-2), (16, 32, 1e-5), (32, 64, 1e-9), (32, 256, 1e-14)]
    runs = [Run(dataclasses.replace(cfg, n=n, m=m, eps=e), SphereData(), 1) for n, m, e in spec]
    monkeypatch.setattr(descent, "CUDA_GRAPHS", graphs)
    monkeypatch.setenv("SDYN_FUSED", "1" if fused else "0")
    return train(runs, "cuda")


def _assert_same_training(mine, theirs):
    statuses = [s["status"] for s in theirs.summaries]
    assert [s["status"] for s in mine.summaries] == statuses
    assert statuses.count("converged") == 2, statuses
    for one, other in zip(mine.summaries, theirs.summaries, strict=True):
        for key, value in other.items():
            if isinstance(value, float) and math.isfinite(value):
                assert math.isclose(one[key], value, rel_tol=1e-9, abs_tol=1e-12), key
            else:
                assert one[key] == value or (math.isnan(one[key]) and math.isnan(value)), key
    np.testing.assert_allclose(mine.curves.to_numpy(), theirs.curves.to_numpy(), rtol=1e-9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_cuda_graph_step_trains_as_the_compiled_step(monkeypatch):
    compiled = _train_on_the_gpu(monkeypatch, graphs=False, fused=False)
    _assert_same_training(_train_on_the_gpu(monkeypatch, graphs=True, fused=False), compiled)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_fused_step_trains_as_the_compiled_step(monkeypatch):
    compiled = _train_on_the_gpu(monkeypatch, graphs=False, fused=False)
    _assert_same_training(_train_on_the_gpu(monkeypatch, graphs=True, fused=True), compiled)


def test_the_cuda_graph_option_is_ignored_on_a_cpu(monkeypatch):
    from sdyn.experiments.ntk import descent

    cfg = NTKConfig(steps=60, record_points=6, eps=1e-2)
    runs = [Run(dataclasses.replace(cfg, n=n, m=m), SphereData(), 0) for n, m in [(8, 4), (16, 32)]]
    monkeypatch.setattr(descent, "CUDA_GRAPHS", False)
    plain = train(runs, "cpu")  # packed: the PyTorch step, as on a GPU
    monkeypatch.setattr(descent, "CUDA_GRAPHS", True)  # the default
    graphed = train(runs, "cpu")  # capturing on a CPU would raise: no CUDA stream
    assert graphed.summaries == plain.summaries
    assert graphed.curves.equals(plain.curves)
