"""The NTK's fused GPU iteration (fused.py's Triton kernels) against gd_iteration; without a
GPU, run by Triton's interpreter: the same kernels, each program executed with numpy."""

import dataclasses
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sdyn.api import Run
from sdyn.experiments.ntk import NTKConfig, SphereData, fused, train
from sdyn.experiments.ntk.descent import DIVERGENCE_FACTOR, gd_iteration
from sdyn.experiments.ntk.fused import Blocks, iteration
from sdyn.experiments.ntk.network import Pack, loss, symmetric_init

# On a GPU the kernels run compiled; elsewhere under Triton's interpreter (tests/conftest.py).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# Per run: width m, sample size n, step size eta, target eps. A packed bundle (widths 130 > two
# 64-neuron blocks, 40 and 64; n 70 > one 64-point block, or 16, 5 and 9) whose runs end
# differently within 12 iterations: a softmax network's loss is bounded, so its run diverges by
# an infinite step (to NaN).
SOFTMAX_RUNS = [(130, 70, 1e-4, 1e-9), (40, 5, math.inf, 1e-9), (64, 9, 2e-3, 0.9)]
RELU_RUNS = [(130, 16, 0.2, 0.5), (40, 5, 1e3, 1e-9), (64, 9, 0.05, 1e-9)]
EXP_RUNS = [(130, 16, 0.01, 1e-9), (40, 5, 2.0, 1e-9), (64, 9, 0.01, 0.9)]


# Small blocks, so that every loop and merge runs more than once: 5 segments of 32 neurons in
# _partials at width 130 (in chunks of 16), 5 blocks of 16 points at n 70.
SMALL = Blocks(points=16, chunk=16, segment=32, neurons=16, point_chunk=16, warps=1)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the diverging run
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize(
    ("activation", "d", "d_out", "runs", "dtype", "blocks"),
    [
        ("softmax", 8, 1, SOFTMAX_RUNS, torch.float64, fused.BLOCKS),
        ("softmax", 5, 3, SOFTMAX_RUNS, torch.float64, fused.BLOCKS),
        ("softmax", 5, 3, SOFTMAX_RUNS, torch.float64, SMALL),
        ("softmax", 8, 1, SOFTMAX_RUNS, torch.float32, fused.BLOCKS),
        ("relu", 8, 2, RELU_RUNS, torch.float64, fused.BLOCKS),
        ("exp", 8, 1, EXP_RUNS, torch.float64, fused.BLOCKS),
        ("exp", 8, 1, EXP_RUNS, torch.float64, SMALL),
    ],
)
def test_the_fused_iteration_steps_as_gd_iteration(
    activation, d, d_out, runs, dtype, blocks, monkeypatch
):
    monkeypatch.setattr(fused, "BLOCKS", blocks)
    mine = _steps_as_gd_iteration(activation, d, d_out, runs, dtype)
    # Each run ended differently, so every branch of the status was exercised.
    ended = {"diverged" if bad else ("converged" if h >= 0 else "active") for bad, h in
             zip(mine[3].tolist(), mine[4].tolist(), strict=True)}  # fmt: skip
    assert ended == {"active", "converged", "diverged"}


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_logits_beyond_the_exponentials_range_step_as_gd_iteration():
    """Inputs of norm 600: logits of several hundred, moving by more than 710 in a step, where
    an exponential shifted by anything but the current maximum overflows float64. Rounding
    grows with the logits (exp's relative error is |z| times float64's), so W to 600x the
    usual 1e-12."""
    _steps_as_gd_iteration("softmax", 8, 1, SOFTMAX_RUNS, torch.float64, x_norm=600.0)


def _steps_as_gd_iteration(activation, d, d_out, runs, dtype, x_norm=1.0) -> list:
    """12 fused iterations of a packed bundle of ``runs`` against gd_iteration's, compared after
    each (W and L to 1e-12 relative, 1e-5 in float32, times ``x_norm``, the inputs' norm;
    statuses exactly). Returns the fused path's ``[W, L, active, diverged, hit]``."""
    widths, sizes, etas, epss = (list(x) for x in zip(*runs, strict=True))
    B, M, N = len(runs), max(widths), max(sizes)
    W, a = symmetric_init(B, d, M, d_out, 1.0, torch.Generator().manual_seed(1), dtype=dtype)
    g = torch.Generator().manual_seed(2)
    X = torch.randn(B, N, d, generator=g, dtype=dtype)
    X = x_norm * X / X.norm(dim=-1, keepdim=True)
    Y = 0.3 * torch.randn(B, N, d_out, generator=g, dtype=dtype)
    W, a, X, Y = (x.to(DEVICE) for x in (W, a, X, Y))
    pack = Pack.of(widths, sizes, M, N, dtype, DEVICE)
    neurons = (pack.logit_bias == 0).to(dtype)  # (B, 1, M): padding is zero
    W, a, X, Y = W * neurons, a * neurons, X * pack.point_weight, Y * pack.point_weight
    eta, eps = (torch.tensor(x, dtype=dtype, device=DEVICE) for x in (etas, epss))
    L0 = loss(torch.zeros_like(Y), Y)
    active = torch.ones(B, dtype=torch.bool, device=DEVICE)
    diverged, hit = torch.zeros_like(active), torch.full((B,), -1, device=DEVICE)
    L = torch.full((B,), torch.nan, dtype=dtype, device=DEVICE)
    mine = [W.clone(), L, active.clone(), diverged.clone(), hit.clone()]
    t = torch.zeros((), dtype=torch.long, device=DEVICE)
    counts = (torch.tensor(x, dtype=torch.int32, device=DEVICE) for x in (sizes, widths))
    flags = (*mine[1:], t, activation, *counts, DIVERGENCE_FACTOR)
    step = iteration(mine[0], a, X, Y, eta, eps, L0, *flags)
    theirs = (W, None, active, diverged, hit)
    tol = (1e-12 if dtype == torch.float64 else 1e-5) * x_norm
    for k in range(12):
        W, L, active, diverged, hit = theirs
        flags = (active, diverged, hit, torch.tensor(k, device=DEVICE))
        theirs = gd_iteration(W, a, X, Y, eta, eps, L0, *flags, activation, pack)
        step()
        assert int(t) == k + 1
        for field, expected in zip(mine[2:], theirs[2:], strict=True):
            assert field.tolist() == expected.tolist()
        # On the runs' own neurons: an infinite step gives padding NaN (0 grad) in theirs alone.
        own = neurons.bool().expand_as(W)
        torch.testing.assert_close(mine[0][own], theirs[0][own], rtol=tol, atol=tol / 10,
                                   equal_nan=True)  # fmt: skip
        torch.testing.assert_close(mine[1], theirs[1], rtol=tol, atol=0, equal_nan=True)
    return mine


def test_blocks_are_written_and_read_back_and_bad_ones_are_refused():
    assert Blocks.parse(str(SMALL)) == SMALL and str(Blocks()) == "64x64x512x64x32x4"
    for bad in ("64x64x512x64x32", "64x64x512x64x32x3", "64x8x512x64x32x4", "64x64x32x64x32x4"):
        with pytest.raises(ValueError, match=bad):
            Blocks.parse(bad)


def test_a_packed_bundle_trains_with_the_fused_step_as_without(monkeypatch):
    """gd's fused path: sizes and widths from the Pack, records, statuses."""
    cfg = NTKConfig(steps=40, record_points=5)
    spec = [(8, 4, 1e-2), (16, 32, 0.3), (12, 80, 1e-9)]
    runs = [Run(dataclasses.replace(cfg, n=n, m=m, eps=e), SphereData(), 1) for n, m, e in spec]
    plain = train(runs, DEVICE)  # packed: gd_iteration (on a CPU, not the C++ kernel)
    monkeypatch.setenv("SDYN_FUSED", "1")
    mine = train(runs, DEVICE)
    statuses = [s["status"] for s in plain.summaries]
    assert statuses == ["converged", "converged", "budget_exhausted"]
    assert [s["status"] for s in mine.summaries] == statuses
    for one, other in zip(mine.summaries, plain.summaries, strict=True):
        assert one.keys() == other.keys()
        for key, value in other.items():
            if isinstance(value, float):
                assert math.isclose(one[key], value, rel_tol=1e-9, abs_tol=1e-12) or (
                    math.isnan(one[key]) and math.isnan(value)
                ), key
            else:
                assert one[key] == value, key
    np.testing.assert_allclose(mine.curves.to_numpy(), plain.curves.to_numpy(), rtol=1e-9)


def test_the_kernels_compile_for_an_h100_without_spilling(tmp_path):
    """Triton's ahead-of-time compile for sm_90 (benchmarks/fused_compile.py), no GPU needed:
    what the interpreter cannot see (types, lowering, registers) fails here first."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(tmp_path)  # compiled now, not found in a cache
    script = Path(__file__).parent.parent / "benchmarks" / "fused_compile.py"
    for dtype in ("float64", "float32"):
        command = [sys.executable, str(script), "--activations", "softmax,relu,exp"]
        done = subprocess.run([*command, "--dtype", dtype], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr  # 1: a kernel spills
        # Three kernels per activation, and _status.
        assert len(re.findall(r"'registers': [1-9]", done.stdout)) == 3 * 3 + 1, done.stdout
