"""Claims on runs tables: thresholds, normalisation, and degenerate tables that must not crash."""

import numpy as np
import pandas as pd

from sdyn.analysis.claims import evaluate
from sdyn.analysis.report import plot_overlay
from sdyn.experiments import ntk

CLAIMS = {c.id: c for c in ntk.CLAIMS}


def _runs(alpha=1.5, seeds=4, noise=0.05, seed=0):
    """A width sweep whose NTK-regime threshold is m*(n) = 2 n^alpha (per seed, with noise)."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in (8, 16, 32, 64, 128):
        for s in range(seeds):
            m_star = 2 * n**alpha * np.exp(noise * rng.standard_normal())
            for m in 2 ** np.arange(1, 16):
                margin = (m_star / m) ** 1.0  # <= 1 from m* on
                rows.append(
                    {
                        "experiment.n": n,
                        "experiment.m": m,
                        "seed": s,
                        "ntk_margin": margin,
                        "max_weight_movement": 1.0 / m,
                        "ntk_regime": int(margin <= 1),
                        "lambda_min": 0.5,
                        "status": "converged",
                        "run_id": f"{n}-{m}-{s}",
                        "config_hash": f"{n}-{m}-{s}",
                    }
                )
    return pd.DataFrame(rows)


def test_width_threshold_recovers_a_known_exponent():
    (result,) = evaluate(CLAIMS["width_threshold"], _runs(alpha=1.5))
    assert abs(result.fit.value - 1.5) < 0.05
    assert result.fit.ci_low <= 1.5 <= result.fit.ci_high
    assert result.verdict == "consistent"  # the bound is <= 2
    (violated,) = evaluate(CLAIMS["width_threshold"], _runs(alpha=2.6))
    assert violated.verdict == "violated" and "2" in violated.reason


def test_lambda_normalised_threshold_multiplies_by_lambda_squared():
    runs = _runs(alpha=1.5)
    (plain,) = evaluate(CLAIMS["width_threshold"], runs)
    (scaled,) = evaluate(CLAIMS["width_threshold_lambda"], runs)
    assert np.allclose(scaled.points["y"], plain.points["y"] * 0.25)


def test_failed_runs_are_excluded_and_counted_and_empty_claims_plot(tmp_path):
    runs = _runs().iloc[:3].assign(status="failed")
    for result in evaluate(CLAIMS["width_threshold"], runs) + evaluate(
        CLAIMS["weight_movement"], runs
    ):
        assert result.n_failed == 3 and result.verdict == "inconclusive"
        assert result.points.dtypes.eq(float).all()
        plot_overlay([(None, result)], tmp_path / "empty.png")
        assert (tmp_path / "empty.png").stat().st_size > 0
