"""Rates only where a rate exists (sdyn.analysis.kinds.curves): a flat curve or one that ends before
its window is not measured, a rate still changing across its window is inconclusive, and a
clean law keeps its verdict."""

import math

import numpy as np
import pandas as pd
import pytest

from sdyn.analysis.claims import evaluate
from sdyn.analysis.kinds import CurveGeometricRate, CurvePowerLaw

STEPS = np.unique(np.geomspace(1, 1000, 60).round()).astype(int)


def _curves(log_y, runs=5, noise=0.01, ends_at=None, seed=0):
    """``runs`` runs (seeds) whose curve ``q`` at each of :data:`STEPS` is
    ``exp(log_y(t) + noise N(0, 1))``; NaN after ``ends_at`` (the run stopped)."""
    rng = np.random.default_rng(seed)
    table = [{"seed": s, "config_hash": f"r{s}", "run_id": f"r{s}", "status": "converged"}
             for s in range(runs)]  # fmt: skip
    curves = []
    for s in range(runs):
        for t in STEPS:
            value = math.exp(log_y(t) + noise * rng.standard_normal())
            if ends_at is not None and t > ends_at:
                value = math.nan
            curves.append({"config_hash": f"r{s}", "step": float(t), "q": value})
    return pd.DataFrame(table), pd.DataFrame(curves)


POWER = CurvePowerLaw(
    id="decay",
    statement="q = O(t^-1/2)",
    source="Thm X",
    quantity="q",
    axis="step",
    theory=-0.5,
    direction="<=",
    window=(0.1, 1.0),
    relative_floor=1e-8,
)
RATE = CurveGeometricRate(
    id="contraction",
    statement="q contracts geometrically",
    source="Thm Y",
    quantity="q",
    axis="step",
    theory=1.0,
    direction="<=",
)


def test_a_clean_power_law_keeps_its_verdict_and_reports_its_window_and_halves():
    runs, curves = _curves(lambda t: -0.7 * math.log(t))
    (result,) = evaluate(POWER, runs, curves)
    assert result.verdict == "consistent" and result.fit.value == pytest.approx(-0.7, abs=0.02)
    assert f"window t = {STEPS[STEPS >= 100][0]}-1000" in result.notes
    assert any(note.startswith("halves of the window:") for note in result.notes)
    assert result.slack.value == pytest.approx(0.2, abs=0.02)


def test_a_slope_drifting_across_the_window_towards_the_bound_is_inconclusive():
    # log q = -0.035 (ln t)^2: the local slope -0.07 ln t drifts from -0.32 at t = 100 to
    # -0.48 at t = 1000; the whole window (-0.40) lies above the bound -1/2, but at the pace
    # from the first half to the second the rate crosses it within another half-window.
    runs, curves = _curves(lambda t: -0.035 * math.log(t) ** 2, noise=0.002)
    (result,) = evaluate(POWER, runs, curves)
    assert result.verdict == "inconclusive", result.reason
    assert result.reason.startswith("the rate is still changing: -0.3")
    assert ", -0.44" in result.reason and "lies above the bound -0.5" in result.reason
    # A drift away from the bound leaves the verdict: log q = -0.2 (ln t)^2 decays ever faster.
    runs, curves = _curves(lambda t: -0.2 * math.log(t) ** 2, noise=0.002)
    assert evaluate(POWER, runs, curves)[0].verdict == "consistent"


def test_a_curve_that_ends_before_its_window_has_no_rate():
    # The runs stop at t = 40 (float64 saturated): nothing is left in t = 100-1000.
    runs, curves = _curves(lambda t: -0.7 * math.log(t), ends_at=40)
    (result,) = evaluate(POWER, runs, curves)
    assert result.verdict == "not measured" and not result.measured
    assert result.reason.startswith("no rate: its runs stopped (no value from t = 4")
    assert "window t = 100-1000" in result.reason
    # Below float64's resolution (1e-8 of its start) from t = 30 on: the same.
    runs, curves = _curves(lambda t: -0.7 * math.log(t) - (40.0 if t >= 30 else 0.0))
    (result,) = evaluate(POWER, runs, curves)
    assert result.verdict == "not measured"
    assert "at or below float64 resolution from t = 30 (median over 5 runs)" in result.reason


def test_a_flat_curve_has_no_contraction_to_measure():
    runs, curves = _curves(lambda t: 0.0, noise=0.05)
    (result,) = evaluate(RATE, runs, curves)
    assert result.verdict == "not measured"
    assert result.reason.startswith("no contraction to measure: flat from t = 1")
    runs, curves = _curves(lambda t: t * math.log(0.99), noise=0.01)
    (result,) = evaluate(RATE, runs, curves)
    assert result.verdict == "consistent" and result.fit.value == pytest.approx(0.99, abs=1e-3)
