"""The score experiment against its definitions (theory.md §2): exact mixture score, forward
process, NTK regression, sampler, batching; and a tiny end-to-end sweep through Ray and MLflow."""

import json
import math

import numpy as np
import pytest
import torch

from sdyn.analysis.load import load_sweep, load_table
from sdyn.experiments.common import Run
from sdyn.experiments.ntk import SphereData, forward, ntk_gram, symmetric_init
from sdyn.experiments.score import (
    GMMData,
    SamplesGrid,
    ScoreConfig,
    alpha,
    draw,
    embed,
    g_schedule,
    gd_filter,
    log_density,
    make_data,
    mmd,
    ntk_cross_gram,
    posterior_mean,
    reverse_sde,
    score_from_output,
    train,
    true_score,
)
from sdyn.sweep import main

torch.set_default_dtype(torch.float64)

# A lopsided mixture in R^3: unequal weights, explicit means and diagonal covariances.
SKEWED = GMMData(
    d=3,
    components=3,
    means=[[0.5, 0.0, -0.2], [-0.4, 0.3, 0.1], [0.0, -0.6, 0.4]],
    variances=[[0.02, 0.05, 0.01], [0.04, 0.01, 0.03], [0.01, 0.02, 0.06]],
    weights=[0.5, 0.3, 0.2],
)
SCHEDULES = [ScoreConfig(), ScoreConfig(schedule="constant", beta=2.0, T=2.0)]


@pytest.mark.parametrize("cfg", SCHEDULES, ids=["linear", "constant"])
@pytest.mark.parametrize("data", [GMMData(), SKEWED], ids=["circle", "skewed"])
def test_mixture_score_equals_autograd_of_log_density(cfg, data):
    g = torch.Generator().manual_seed(0)
    t = torch.rand(64, generator=g) * cfg.T
    t[0] = 0.0  # p0 itself
    x = torch.randn(64, data.d, generator=g).requires_grad_(True)
    (grad,) = torch.autograd.grad(log_density(t, x, cfg, data).sum(), x)
    torch.testing.assert_close(true_score(t, x.detach(), cfg, data), grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("cfg", SCHEDULES, ids=["linear", "constant"])
def test_tweedie_posterior_mean_gives_the_exact_score(cfg):
    # s = (alpha E[x0|x] - x) / (1 - alpha^2): the network's target F_* turns into the true score.
    g = torch.Generator().manual_seed(1)
    t = cfg.T0 + torch.rand(100, generator=g) * (cfg.T - cfg.T0)
    x = torch.randn(100, SKEWED.d, generator=g)
    F_star = posterior_mean(t, x, cfg, SKEWED)
    torch.testing.assert_close(
        score_from_output(F_star, t, x, cfg), true_score(t, x, cfg, SKEWED), rtol=1e-10, atol=1e-10
    )


@pytest.mark.parametrize("cfg", SCHEDULES, ids=["linear", "constant"])
def test_alpha_is_exp_of_minus_half_the_integrated_rate(cfg):
    t = torch.tensor([0.0, 0.1, 0.5, cfg.T])
    grid = torch.linspace(0, 1, 20001)
    for tk, a in zip(t, alpha(t, cfg), strict=True):
        s = grid * tk
        integral = torch.trapezoid(g_schedule(s, cfg), s)
        assert math.isclose(float(a), math.exp(-0.5 * float(integral)), rel_tol=1e-8)


@pytest.mark.parametrize("cfg", SCHEDULES, ids=["linear", "constant"])
def test_forward_process_marginal_matches_simulation(cfg):
    # Euler-Maruyama of dx = -g x/2 dt + sqrt(g) dB from x0 ~ p0 against the closed form p_t.
    data, t_end, steps, paths = SKEWED, 0.3 * cfg.T, 600, 20000
    rng = np.random.default_rng(3)
    _, x0, _ = draw(cfg, data, paths, rng)
    x = torch.from_numpy(x0)
    h = t_end / steps
    noise = torch.from_numpy(rng.standard_normal((steps, paths, data.d)))
    for k in range(steps):
        g = float(g_schedule(torch.tensor((k + 0.5) * h), cfg))
        x = x - 0.5 * g * x * h + math.sqrt(g * h) * noise[k]
    t = torch.full((paths,), t_end)
    _, _, exact = draw(cfg, data, paths, np.random.default_rng(4), t=t.numpy())
    exact = torch.from_numpy(exact)
    # Moments: mean and covariance within a few standard errors.
    w, mu, v = (torch.from_numpy(a) for a in data.mixture())
    a = float(alpha(t[:1], cfg))
    mean = a * (w[:, None] * mu).sum(0)
    second = (w[:, None, None] * (torch.diag_embed(v) + mu[:, :, None] * mu[:, None, :])).sum(0)
    cov = a**2 * (second - (w[:, None] * mu).sum(0).outer((w[:, None] * mu).sum(0)))
    cov += (1 - a**2) * torch.eye(data.d)
    for sample in (x, exact):
        assert (sample.mean(0) - mean).abs().max() < 4 * math.sqrt(float(cov.diag().max()) / paths)
        assert (sample.T.cov() - cov).abs().max() < 0.03
    # The exact log density scores both samples alike (a likelihood check on the whole law).
    ll_sim, ll_exact = log_density(t, x, cfg, data), log_density(t, exact, cfg, data)
    se = math.sqrt((ll_sim.var() + ll_exact.var()) / paths)
    assert abs(float(ll_sim.mean() - ll_exact.mean())) < 4 * se


def test_embedding_is_on_the_unit_sphere_and_injective():
    cfg = ScoreConfig(input_scale=1.5, input_bias=0.7)
    t, x = torch.rand(50) * cfg.T, torch.randn(50, 2) * 3
    u = embed(t, x, cfg)
    torch.testing.assert_close(u.norm(dim=-1), torch.ones(50))
    z = u / u[:, -1:] * cfg.input_bias  # invert: z = (t/T, x/s, bias)
    torch.testing.assert_close(z[:, 0] * cfg.T, t)
    torch.testing.assert_close(z[:, 1:3] * cfg.input_scale, x)


def test_training_data_follow_section_6_1():
    cfg = ScoreConfig(n=2000)
    X, Y = make_data(cfg, GMMData(), seed=5)
    assert X.shape == (2000, 4) and Y.shape == (2000, 2)
    torch.testing.assert_close(X.norm(dim=-1), torch.ones(2000))
    t = X[:, 0] / X[:, -1] * cfg.input_bias * cfg.T
    assert float(t.min()) >= cfg.T0 and float(t.max()) <= cfg.T
    assert (Y.norm(dim=-1) <= 1).float().mean() > 0.99  # Assumption 6.1 for the labels
    assert torch.equal(make_data(cfg, GMMData(), seed=5)[0], X)
    with pytest.raises(ValueError, match="gmm"):
        make_data(cfg, SphereData(), seed=0)


def _net(batch=2, n=5, p=4, d=3, m=16, d_out=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    W, a = symmetric_init(batch, d, m, d_out, 1.0, g)
    W = W + 0.3 * torch.randn(W.shape, generator=g)  # off the symmetric point
    X, X_te = (torch.randn(batch, k, d, generator=g) for k in (n, p))
    return W, a, X / X.norm(dim=-1, keepdim=True), X_te / X_te.norm(dim=-1, keepdim=True)


def test_cross_gram_equals_jacobian_kernel_and_ntk_gram():
    W, a, X, X_te = _net()
    K = ntk_cross_gram(W, a, X_te, X)
    m = W.shape[-1]
    for b in range(W.shape[0]):

        def vecF(w, Z, b=b):
            return forward(w, a[b], Z).transpose(0, 1).reshape(-1)  # output-major

        J = torch.func.jacrev(vecF)(W[b], X[b]).reshape(K.shape[-1], -1)
        J_te = torch.func.jacrev(vecF)(W[b], X_te[b]).reshape(K.shape[-2], -1)
        torch.testing.assert_close(K[b], J_te @ J.T / m, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ntk_cross_gram(W, a, X, X), ntk_gram(W, a, X))


def test_gd_filter_is_kernel_gd_and_tends_to_kernel_regression():
    # On the training points, H V diag(filter_t) V^T Y is t steps of F <- F - eta m H (F - Y).
    W, a, X, _ = _net(batch=1, n=6, m=64)
    H = ntk_gram(W, a, X)[0]
    mu, V = torch.linalg.eigh(H)
    Y = torch.randn(H.shape[0])
    rate = torch.tensor([1.0 / float(mu[-1])])  # eta m with lr_scale 1
    F = torch.zeros_like(Y)
    for t in range(1, 41):
        F = F - rate * H @ (F - Y)
        if t in (1, 7, 40):
            pred = H @ V @ (gd_filter(mu[None], rate, t)[0] * (V.T @ Y))
            torch.testing.assert_close(pred, F, rtol=1e-9, atol=1e-11)
    # The limit t -> inf: (H*)^-1 vec(Y), the NTK regression predictor's coefficients.
    limit = V @ (gd_filter(mu[None], rate, 10**9)[0] * (V.T @ Y))
    torch.testing.assert_close(limit, torch.linalg.solve(H, Y), rtol=1e-6, atol=1e-9)
    assert gd_filter(torch.tensor([[0.0, 1e-30]]), rate, 50)[0].tolist() == pytest.approx(
        [50 * float(rate)] * 2
    )


def _tiny(**kw):
    base = dict(n=16, m=64, steps=60, n_eval=200, n_coupling=50, n_samples=100, sampler_steps=40)
    return ScoreConfig(**{**base, **kw})


def test_batched_training_equals_one_run_at_a_time():
    runs = [Run(_tiny(lr_scale=s), GMMData(), seed) for seed, s in [(0, 1.0), (1, 0.5), (2, 1.5)]]
    together = train(runs, "cpu")
    for k, run in enumerate(runs):
        alone = train([run], "cpu")
        for key, value in alone.summaries[0].items():
            got = together.summaries[k][key]
            if isinstance(value, float):
                assert math.isclose(got, value, rel_tol=1e-9, abs_tol=1e-12), key
            else:
                assert got == value, key
        mine = together.curves[together.curves["run"] == k].drop(columns="run")
        np.testing.assert_allclose(mine.to_numpy(), alone.curves.drop(columns="run").to_numpy())
        samples = together.tables["samples"]
        mine = samples[samples["run"] == k].drop(columns="run").reset_index(drop=True)
        theirs = alone.tables["samples"].drop(columns="run")
        np.testing.assert_allclose(mine[["x1", "x2"]], theirs[["x1", "x2"]], rtol=1e-9)
        assert (mine["source"] == theirs["source"]).all()


def test_training_lowers_the_score_error_and_width_shrinks_the_coupling_gap():
    out = {m: train([Run(_tiny(m=m, steps=120), GMMData(), 0)], "cpu") for m in (32, 1024)}
    for result in out.values():
        curve = result.curves["score_error"]
        assert curve.iloc[-1] < 0.8 * curve.iloc[0]  # better than the zero output's score
        assert result.summaries[0]["status"] == "budget_exhausted"
    gap = {m: r.summaries[0]["coupling_gap"] for m, r in out.items()}
    assert gap[1024] < gap[32] / 30  # Thm F.2: ~1/m
    assert out[32].curves["coupling_gap"].iloc[0] == 0  # F_nn(0) = F_ntk(0) = 0


def test_reverse_sde_with_the_exact_score_samples_p0():
    cfg, data = ScoreConfig(), GMMData()
    rng = np.random.default_rng(0)
    y0 = torch.from_numpy(rng.standard_normal((2000, 2)))
    noise = torch.from_numpy(rng.standard_normal((cfg.sampler_steps, 2000, 2)))

    def exact(t, y):
        return true_score(torch.full(y.shape[:-1], t), y, cfg, data)

    samples = reverse_sde(exact, y0, noise, cfg)
    _, reference, _ = draw(cfg, data, 2000, rng)
    reference = torch.from_numpy(reference)
    h = torch.cdist(reference, reference).median()
    assert float(mmd(samples, reference, h)) < 0.05
    assert float(mmd(y0, reference, h)) > 0.3  # the start, N(0, I), is far from p0
    zero = torch.zeros(2000)
    ll = float(log_density(zero, samples, cfg, data).mean())
    assert abs(ll - float(log_density(zero, reference, cfg, data).mean())) < 0.15


def test_samples_grid_ties_width_and_budget_to_n():
    grid = SamplesGrid(n=[16, 32, 64], width_factor=0.0625, width_max=2048, steps_factor=0.125)
    assert grid.points() == [
        {"n": 16, "m": 256, "steps": 32},
        {"n": 32, "m": 2048, "steps": 128},
        {"n": 64, "m": 2048, "steps": 512},
    ]


def test_config_and_data_reject_out_of_range_values():
    with pytest.raises(ValueError, match="experiment.m"):
        ScoreConfig(m=7)
    with pytest.raises(ValueError, match="experiment.T0"):
        ScoreConfig(T0=0.0)
    with pytest.raises(ValueError, match="experiment.weighting"):
        ScoreConfig(weighting="uniform")
    with pytest.raises(ValueError, match="data.means"):
        GMMData(components=2, means=[[0.0, 0.0]])
    with pytest.raises(ValueError, match="data.weights"):
        GMMData(components=2, weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="grid.width_max"):
        SamplesGrid(width_max=7)


@pytest.mark.slow
def test_tiny_score_sweeps_record_report_and_samples(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    common = [
        "experiment=score",
        "experiment.n_eval=300",
        "experiment.n_coupling=60",
        "experiment.n_samples=100",
        "experiment.sampler_steps=40",
        "grid.seeds=2",
        f"tracking.uri={uri}",
        f"sweep.out_dir={tmp_path}/out",
        "sweep.progress=false",
    ]
    samples = ["+grid=samples", "grid.n=[8,16,32]", "grid.width_max=256", "sweep.name=n"]
    assert main([*common, *samples]) == 0
    assert "6 to train" in capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "n" / "report.json").read_text())
    claims = {c["claim"]: c for c in report["claims"]}
    assert {"score_error", "regression_error", "lambda", "sample_quality"} <= set(claims)
    assert claims["score_error"]["points"] == 6 and math.isfinite(claims["score_error"]["value"])
    for name in ("report.md", "score_error.png", "curves.png", "samples.png"):
        assert (tmp_path / "out" / "n" / name).stat().st_size > 0
    assert "![samples](samples.png)" in (tmp_path / "out" / "n" / "report.md").read_text()
    runs = load_sweep("n", uri)
    assert set(runs["data.name"]) == {"gmm"}  # the experiment's own default data
    assert set(runs["experiment.m"]) == {32, 256}  # m = n^3/16, capped at 256
    table = load_table(runs, "samples", uri)
    assert set(table["config_hash"]) == set(runs["config_hash"])
    assert table.groupby(["config_hash", "source"]).size().eq(100).all()

    width = ["+grid=width", "grid.n=[16]", "grid.widths=[32,128,512]", "sweep.name=m"]
    assert main([*common, *width, "experiment.steps=40"]) == 0
    report = json.loads((tmp_path / "out" / "m" / "report.json").read_text())
    gap = next(c for c in report["claims"] if c["claim"] == "coupling_gap")
    assert gap["points"] == 6 and gap["value"] < 0  # the gap shrinks with the width


def test_score_rejects_other_data_before_running(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["experiment=score", "+grid=samples", "data=sphere"]) == 2
    assert "data=gmm" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
