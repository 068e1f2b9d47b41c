"""The per-run geometric rate (fits.fit_geometric_rate with per_group, claim kind
per_run_geometric_rate) and the report's tolerance of claims with no usable points."""

import math

import numpy as np
import pandas as pd
import pytest

from sdyn.analysis.claim_plots import plot_overlay
from sdyn.analysis.claims import ClaimResult, evaluate
from sdyn.analysis.fits import fit_geometric_rate
from sdyn.analysis.fits.window import RATE_DRIFT
from sdyn.analysis.kinds import PerRunGeometricRate, PowerLaw

RATE = 0.9


def _curves(rng, groups=6, steps=120):
    """Per group: a flat start of random length, then geometric decay at a rate scattered about
    RATE (log sd 0.01), lognormal noise (sd 0.05), and a floor at 1e-4 times the start."""
    rows = []
    for g in range(groups):
        start = rng.integers(10, 50)
        rate = RATE * math.exp(0.01 * rng.normal())
        t = np.arange(steps)
        y = np.where(t < start, 1.0, rate ** (t - start)) + 1e-4
        y = y * np.exp(0.05 * rng.normal(size=steps))
        rows.append(pd.DataFrame({"t": t, "y": y, "g": g}))
    return pd.concat(rows, ignore_index=True)


def test_per_group_rate_recovers_the_rate_and_its_ci_covers():
    hits, estimates = 0, []
    trials = 40
    for trial in range(trials):
        d = _curves(np.random.default_rng(trial))
        fit = fit_geometric_rate(d["t"], d["y"], d["g"], per_group=True, floor=5e-4)
        assert fit.kind == "geometric_rate" and fit.n_groups == 6 and fit.converged
        estimates.append(fit.rate)
        hits += fit.ci_low <= RATE <= fit.ci_high
    print(f"per-group: mean rate {np.mean(estimates):.5f}, coverage {hits / trials:.3f}")
    assert abs(np.mean(estimates) - RATE) < 2e-3
    assert 0.85 <= hits / trials <= 1.0


def test_pooled_fit_is_thrown_off_by_saddles_at_run_dependent_times():
    # Decay at RATE, a 30-step pause (a saddle) starting at a random step, decay again: no
    # window suits every curve, so the pooled fit mixes pauses in; each curve alone has
    # stretches of pure decay.
    rng = np.random.default_rng(0)
    rows = []
    for g in range(6):
        pause = rng.integers(10, 60)
        t = np.arange(200)
        active = np.minimum(t, pause) + np.maximum(t - pause - 30, 0)
        y = (RATE**active + 1e-4) * np.exp(0.05 * rng.normal(size=t.size))
        rows.append(pd.DataFrame({"t": t, "y": y, "g": g}))
    d = pd.concat(rows, ignore_index=True)
    pooled = fit_geometric_rate(d["t"], d["y"], d["g"], floor=5e-4)
    per_group = fit_geometric_rate(d["t"], d["y"], d["g"], per_group=True, floor=5e-4)
    assert abs(per_group.rate - RATE) < 3e-3
    assert not pooled.ci_low <= RATE <= pooled.ci_high
    assert abs(pooled.rate - RATE) > 2 * abs(per_group.rate - RATE)
    assert "per-group rates" in per_group.message


@pytest.mark.parametrize("drift", [1e-4, 1e-3])
def test_a_noise_free_curve_is_fitted_where_its_rate_drifts_by_at_most_rate_drift(drift):
    # Full-batch GD gives curves without noise, whose contraction changes a little per step:
    # log y = -a t (1 + drift t), its slope -a (1 + 2 drift t). Such a curve resolves any
    # drift, so only RATE_DRIFT keeps its window from shrinking to its last few steps.
    t = np.arange(201.0)
    rows = [
        pd.DataFrame({"t": t, "y": 3 * np.exp(-a * t * (1 + drift * t)), "g": g})
        for g, a in enumerate((0.05, 0.0525, 0.055))
    ]
    d = pd.concat(rows, ignore_index=True)
    fit = fit_geometric_rate(d["t"], d["y"], d["g"], per_group=True, floor=1e-12, min_fall=2)
    assert fit.converged
    for group in fit.details["groups"]:
        start, end = group["window"]
        slopes = 1 + 2 * drift * np.array([start, (start + end) / 2, end])
        assert end == 200 and end - start >= 60  # not the last few steps
        assert (slopes[2] - slopes[0]) / slopes[1] <= RATE_DRIFT * 1.01
    if drift * 2 * 200 <= RATE_DRIFT:  # the whole curve drifts less: all of it is the window
        assert all(group["window"] == (0.0, 200.0) for group in fit.details["groups"])
    assert "theirs let the rate drift by 10%" in fit.message
    strict = fit_geometric_rate(d["t"], d["y"], d["g"], per_group=True, floor=1e-12)
    assert all(g["window"][1] - g["window"][0] <= 10 for g in strict.details["groups"])


def test_per_group_fit_needs_two_fitted_groups():
    d = _curves(np.random.default_rng(2), groups=1)
    fit = fit_geometric_rate(d["t"], d["y"], d["g"], per_group=True, floor=5e-4)
    assert not fit.converged and math.isnan(fit.rate) and "need 2" in fit.message


def test_claim_kind_per_run_geometric_rate_side_by_side():
    frames, runs = [], []
    for k, (opt, rate) in enumerate([("fast", 0.8), ("slow", 0.95)] * 3):
        t = np.arange(80)
        # Seeds -1, 0, +1 per optimiser: log rates spread symmetrically about log(rate), so
        # the geometric mean is exact and the interval not degenerate.
        run_rate = rate * math.exp(1e-3 * (k // 2 - 1))
        gap = run_rate**t * (1 + 0.01 * k)
        frames.append(pd.DataFrame({"config_hash": f"h{k}", "step": t, "gap": gap}))
        runs.append({"config_hash": f"h{k}", "seed": k // 2, "status": "budget_exhausted",
                     "experiment.optimizer": opt, "run_id": f"r{k}"})  # fmt: skip
    claim = PerRunGeometricRate(
        id="rate", statement="", source="", quantity="gap",
        axis="step", theory=1.0, direction="<=", by="experiment.optimizer", floor=1e-9,
    )  # fmt: skip
    results = evaluate(claim, pd.DataFrame(runs), pd.concat(frames, ignore_index=True))
    got = {r.label: r.fit.rate for r in results}
    assert math.isclose(got["rate[fast]"], 0.8, rel_tol=1e-9)
    assert math.isclose(got["rate[slow]"], 0.95, rel_tol=1e-9)
    assert all(r.verdict == "consistent" for r in results)


def test_report_plot_survives_a_claim_without_usable_points(tmp_path):
    claim = PowerLaw(
        id="bias", statement="", source="", quantity="q", axis="x",
        theory=-0.5, direction="<=",
    )  # fmt: skip
    empty = fit_geometric_rate([1, 2, 3], [1, 2, 3], [0, 0, 0], per_group=True)  # a NaN fit
    points = pd.DataFrame({"x": [10.0, 20.0, 40.0], "y": [np.nan] * 3, "seed": [0, 1, 2]})
    result = ClaimResult(claim, "bias", empty, "inconclusive", "no data", points, 3, 0, -0.5)
    plot_overlay([(None, result)], tmp_path / "bias.png")
    assert (tmp_path / "bias.png").stat().st_size > 0
