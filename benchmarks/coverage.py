"""Coverage of sdyn's 95% intervals on synthetic data with a known truth, at the replicate
counts sdyn's sweeps have, beside the interval sdyn does not take there.

    python benchmarks/coverage.py                 # 1,000 trials a setting (~40 min, 2 cores)
    python benchmarks/coverage.py --trials 200    # quicker, coarser
    python benchmarks/coverage.py --only power_law geometric_mean

Each setting draws ``--trials`` seeded data sets (trial k from ``default_rng([case, replicates,
noise, k])``, by their indices: a rerun draws the same) and fits them as a claim would:

* ``power_law``: ``y = 3 x^1.7`` at 4 values of x over 1.5 decades, ``replicates`` seeds each,
  log-noise normal (SD 0.2), Student t with 3 degrees of freedom (scale 0.2) or
  heteroscedastic: normal with an SD growing 7-fold over x (0.05 to 0.35). sdyn:
  :func:`~sdyn.analysis.fits.fit_power_law` (the slope's HC3 t interval); beside it the classic
  OLS t interval (statsmodels).
* ``geometric_mean``: a ratio of paired runs whose log is 0 plus noise, normal (SD 0.1),
  exponential (centred, scale 0.1) or t3 (scale 0.1), over ``replicates`` pairs. sdyn:
  :func:`~sdyn.analysis.fits.fit_ratio` (the t interval of the mean log); beside it the
  corrected bootstrap of the mean log (:func:`bootstrap`), which sdyn took from 20 pairs
  before 2026-12-07.
* ``curves``: ``replicates`` curves ``y = e^(a_g) x^(b_g)`` at 40 log-spaced steps, point
  noise 0.01, where the curves' slopes differ (``b_g = -0.5`` plus noise of scale 0.05:
  normal, t3 or exponential; ``a_g = 0``) or their offsets (``b_g = -0.5``,
  ``a_g ~ N(0, 0.3^2)``). sdyn: ``fit_power_law(clustered=True)`` (the cluster-robust t
  interval); beside it the bootstrap of whole curves (the pooled slope refitted on each
  resample, :func:`bootstrap`), which sdyn took from 20 curves before 2026-12-07.
* ``threshold``: the width threshold ``m* = 2 n^1.5 e^(sigma eps)`` at n = 8 ... 128,
  ``replicates`` seeds each, read on widths 64 ... 2048 (ratio 2; about 35% censored). sdyn:
  :func:`~sdyn.analysis.fits.fit_threshold` (the profile-likelihood interval), at sigma 0.05,
  0.3 and 0.6; no interval beside it.
* ``rates``: ``replicates`` runs' curves ``y = e^(a_g) 0.95^t`` at t = 0 ... 59, each run's rate
  its own (``log rate ~ N(log 0.95, 0.005^2)``), offsets ``a_g ~ N(0, 0.3^2)``, point noise
  0.02. sdyn: :func:`~sdyn.analysis.fits.fit_geometric_rate` pooled (the cluster-robust t
  interval); beside it the per-run fit
  (``per_group=True``: the geometric mean of each run's rate, its t interval).

Printed per case: the share of trials whose interval holds the truth with its Clopper-Pearson
95% interval (statsmodels), and the mean width over the width that the estimates' spread
across trials implies (2 x 1.96 x their SD): below 1 an interval too narrow, above it one that
covers by being wide. The figures go to ``benchmarks/results/coverage/`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import record
import statsmodels.api as sm
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from sdyn.analysis.fits import (
    fit_geometric_rate,
    fit_power_law,
    fit_ratio,
    fit_threshold,
    threshold_intervals,
)

CONFIDENCE = 0.95
RESAMPLES = 2000
X = np.geomspace(10.0, 10.0**2.5, 4)
WIDTHS = 2.0 ** np.arange(6, 12)


def _log_noise(rng: np.random.Generator, kind: str, size: int, scale) -> np.ndarray:
    """``size`` draws of a log-noise ``kind`` (normal, t3, exponential: centred), times
    ``scale`` (a number or an array of shape ``(size,)``)."""
    if kind == "t3":
        return scale * rng.standard_t(3, size)
    if kind == "exponential":
        return scale * (rng.exponential(1.0, size) - 1.0)
    return scale * rng.normal(size=size)


def bootstrap(data: list[np.ndarray], statistic: Callable, seed: int, df: int) -> tuple:
    """The bootstrap interval with Hesterberg's small-sample corrections ("expanded
    percentile", Am. Stat. 2015), as sdyn took it before its t intervals: BCa (else the
    percentile interval on the same resamples; NaN bounds if both are degenerate) of the
    vectorised ``statistic`` over ``data`` (samples already spread by ``sqrt(n / (n - 1))``,
    :func:`_adjusted`), read at the level whose normal quantile is the Student t quantile of
    95% with ``df`` degrees of freedom. Returns ``(low, high)``."""
    expanded = 2.0 * stats.norm.cdf(stats.t.ppf(0.5 + CONFIDENCE / 2.0, df)) - 1.0
    options = dict(vectorized=True, paired=False, confidence_level=expanded)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = stats.bootstrap(
            data, statistic, n_resamples=RESAMPLES, method="BCa",
            rng=np.random.default_rng(seed), **options,
        )  # fmt: skip
        degenerate = any(issubclass(w.category, stats.DegenerateDataWarning) for w in caught)
        if degenerate or not np.all(np.isfinite(result.confidence_interval)):
            result = stats.bootstrap(
                data, statistic, n_resamples=0, method="percentile", bootstrap_result=result,
                **options,
            )  # fmt: skip
    low, high = (float(b) for b in result.confidence_interval)
    return (low, high) if low < high else (math.nan, math.nan)


def _adjusted(replicates: np.ndarray) -> np.ndarray:
    """Replicates spread about their mean so that resampling them has unbiased variance."""
    mean = replicates.mean()
    return mean + math.sqrt(replicates.size / (replicates.size - 1)) * (replicates - mean)


def power_law(rng, replicates: int, noise: str) -> tuple[float, tuple, tuple]:
    """One sweep's exponent, sdyn's interval and the classic OLS t interval (truth 1.7)."""
    x = np.repeat(X, replicates)
    groups = np.tile(np.arange(replicates), X.size)
    if noise == "heteroscedastic":
        sd = np.repeat(np.linspace(0.05, 0.35, X.size), replicates)
        log_noise = sd * rng.normal(size=x.size)
    else:
        log_noise = _log_noise(rng, noise, x.size, 0.2)
    y = 3.0 * x**1.7 * np.exp(log_noise)
    fit = fit_power_law(x, y, groups)
    classic = sm.OLS(np.log(y), sm.add_constant(np.log(x))).fit().conf_int(1 - CONFIDENCE)[1]
    return fit.exponent, (fit.ci_low, fit.ci_high), tuple(classic)


def geometric_mean(rng, replicates: int, noise: str, seed: int) -> tuple[float, tuple, tuple]:
    """One sweep's typical ratio, sdyn's interval and the corrected bootstrap of the mean log
    beside it (truth 1)."""
    logs = _log_noise(rng, noise, replicates, 0.1)
    fit = fit_ratio(np.exp(logs), np.ones(replicates))
    low, high = bootstrap([_adjusted(logs)], np.mean, seed, replicates - 1)
    return fit.value, (fit.ci_low, fit.ci_high), (math.exp(low), math.exp(high))


def curves(rng, replicates: int, noise: str, seed: int) -> tuple[float, tuple, tuple]:
    """One sweep's pooled slope over whole curves, sdyn's interval and the bootstrap of whole
    curves (truth -0.5); ``noise``: "offsets normal", or "slopes" and the slopes' noise."""
    steps = np.unique(np.round(np.geomspace(100, 10_000, 40)))
    x, curve = np.tile(steps, replicates), np.repeat(np.arange(replicates), steps.size)
    spread, kind = noise.split()
    slope_sd, offset_sd = (0.05, 0.0) if spread == "slopes" else (0.0, 0.3)
    slopes = -0.5 + _log_noise(rng, kind, replicates, slope_sd)
    log_y = rng.normal(0, offset_sd, replicates)[curve] + slopes[curve] * np.log(x)
    y = np.exp(log_y + 0.01 * rng.normal(size=x.size))
    fit = fit_power_law(x, y, curve, clustered=True)
    statistic = _pooled_curve_slope(np.log(x), np.log(y), curve)
    low, high = bootstrap([np.arange(replicates)], statistic, seed, replicates - 1)
    return fit.exponent, (fit.ci_low, fit.ci_high), (low, high)


def _pooled_curve_slope(x: np.ndarray, y: np.ndarray, codes: np.ndarray) -> Callable:
    """The pooled OLS slope of ``y`` on ``x`` over a resample of whole curves (``codes``: curve
    indices 0..G-1), vectorised; resampled slopes are spread about the full data's by
    ``sqrt(G / (G - 1))`` (:func:`_adjusted`'s correction, for a statistic that is not a mean)."""
    x = x - x.mean()  # conditioning only: the slope is shift-invariant
    n_groups = codes.max() + 1
    # Per-curve sufficient statistics: count, sum x, sum x^2, sum y, sum x*y.
    weights = (None, x, x * x, y, x * y)
    sums = np.stack([np.bincount(codes, w, n_groups) for w in weights], axis=-1)

    def slope(totals: np.ndarray) -> np.ndarray:
        n, s_x, s_xx, s_y, s_xy = np.moveaxis(totals, -1, 0)
        return (n * s_xy - s_x * s_y) / (n * s_xx - s_x * s_x)

    full = slope(sums.sum(axis=0))
    spread = math.sqrt(n_groups / (n_groups - 1))

    def statistic(indices: np.ndarray, axis: int = -1) -> np.ndarray:
        return full + spread * (slope(sums[indices.astype(int)].sum(axis=-2)) - full)

    return statistic


def rates(rng, replicates: int, noise: str, seed: int) -> tuple[float, tuple, tuple]:
    """One sweep's geometric rate pooled over its runs' curves, sdyn's interval, and the
    interval of the per-run fit (``per_group=True``: the geometric mean of each run's rate)
    (truth 0.95)."""
    steps = np.arange(60.0)
    t, group = np.tile(steps, replicates), np.repeat(np.arange(replicates), steps.size)
    slopes = math.log(0.95) + 0.005 * rng.normal(size=replicates)  # each run's own rate
    log_y = rng.normal(0, 0.3, replicates)[group] + slopes[group] * t
    y = np.exp(log_y + 0.02 * rng.normal(size=t.size))
    pooled = fit_geometric_rate(t, y, group)
    per_run = fit_geometric_rate(t, y, group, per_group=True)
    return pooled.rate, (pooled.ci_low, pooled.ci_high), (per_run.ci_low, per_run.ci_high)


def threshold(rng, replicates: int, noise: str) -> tuple[float, tuple, None]:
    """One width sweep's threshold exponent and sdyn's interval (truth 1.5); ``noise`` is the
    log-threshold SD sigma."""
    frames = []
    for n in 2.0 ** np.arange(3, 8):
        for _ in range(replicates):
            m_star = 2.0 * n**1.5 * math.exp(float(noise) * rng.standard_normal())
            frames.append(threshold_intervals(WIDTHS, m_star / WIDTHS, 1.0).assign(n=n))
    cells = pd.concat(frames, ignore_index=True)
    fit = fit_threshold(cells["low"], cells["high"], cells["n"])
    return fit.value, (fit.ci_low, fit.ci_high), None


@dataclass(frozen=True)
class Case:
    """A fit's coverage study: ``trial(rng, replicates, noise, k)`` returns one synthetic
    sweep's estimate, sdyn's interval and the one beside it (or None); ``method`` and
    ``beside`` name them."""

    truth: float
    trial: Callable
    counts: tuple[int, ...]
    noises: tuple[str, ...]
    method: str
    beside: str | None


CASES = {
    "power_law": Case(
        1.7, lambda rng, r, noise, k: power_law(rng, r, noise), (2, 5, 10, 20),
        ("normal", "t3", "heteroscedastic"), "HC3 t", "classic t",
    ),
    "geometric_mean": Case(
        1.0, geometric_mean, (3, 5, 10, 20, 40), ("normal", "exponential", "t3"), "t", "bootstrap",
    ),
    "curves": Case(
        -0.5, curves, (5, 10, 20, 40),
        ("slopes normal", "slopes t3", "slopes exponential", "offsets normal"), "clustered t",
        "bootstrap of curves",
    ),
    "threshold": Case(
        1.5, lambda rng, r, noise, k: threshold(rng, r, noise), (5,), ("0.05", "0.3", "0.6"),
        "profile likelihood", None,
    ),
    "rates": Case(0.95, rates, (2, 3, 5, 10, 20), ("rates differ",), "clustered t", "per run: t"),
}  # fmt: skip


def _summary(intervals: np.ndarray, truth: float, spread: float) -> dict:
    """Coverage of ``truth`` by ``intervals`` (shape ``(trials, 2)``) with its Clopper-Pearson
    interval, and their mean width over ``2 x 1.96 x spread`` (the estimates' SD)."""
    hits = int(np.sum((intervals[:, 0] <= truth) & (truth <= intervals[:, 1])))
    low, high = proportion_confint(hits, len(intervals), 1 - CONFIDENCE, method="beta")
    return {
        "coverage": hits / len(intervals),
        "coverage_ci": [float(low), float(high)],
        "width_ratio": float(np.mean(intervals[:, 1] - intervals[:, 0]) / (2 * 1.96 * spread)),
    }


def run_case(name: str, trials: int) -> Iterator[dict]:
    """Each (replicates, noise) setting of case ``name``: its coverage over ``trials``."""
    case = CASES[name]
    case_index = list(CASES).index(name)
    for replicates in case.counts:
        for n_noise, noise in enumerate(case.noises):
            started = time.perf_counter()
            estimates, ours, theirs = [], [], []
            for k in range(trials):
                rng = np.random.default_rng([case_index, replicates, n_noise, k])
                estimate, interval, other = case.trial(rng, replicates, noise, k)
                estimates.append(estimate)
                ours.append(interval)
                theirs.append(other)
            spread = float(np.std(estimates))
            row = {
                "case": name,
                "replicates": replicates,
                "noise": noise,
                "truth": case.truth,
                "method": case.method,
                **_summary(np.array(ours), case.truth, spread),
                "beside": None,
                "seconds": round(time.perf_counter() - started, 2),
            }
            if case.beside:
                row["beside"] = {
                    "method": case.beside,
                    **_summary(np.array(theirs), case.truth, spread),
                }
            yield row


def _line(row: dict) -> str:
    low, high = row["coverage_ci"]
    text = (
        f"{row['case']:<15} {row['replicates']:>3} {row['noise']:<18} {row['method']:<19} "
        f"{100 * row['coverage']:5.1f}% [{100 * low:.1f}, {100 * high:.1f}] "
        f"width {row['width_ratio']:.2f}"
    )
    if row["beside"]:
        b = row["beside"]
        text += f"   {b['method']}: {100 * b['coverage']:5.1f}% width {b['width_ratio']:.2f}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1000, help="data sets per setting")
    parser.add_argument("--only", nargs="+", choices=list(CASES), help="these cases only")
    parser.add_argument("--out", help="the results file (default: benchmarks/results/coverage/)")
    args = parser.parse_args(argv)
    if args.trials < 20:
        parser.error(f"--trials must be >= 20, got {args.trials}")
    print(f"{args.trials} trials a setting: case, replicates, noise, sdyn's interval, coverage")
    rows: list[dict] = []
    started = time.perf_counter()
    for name in args.only or list(CASES):
        for row in run_case(name, args.trials):
            rows.append(row)
            print(_line(row), flush=True)
    figures = {
        "trials": args.trials,
        "confidence": CONFIDENCE,
        "resamples": RESAMPLES,
        "cases": rows,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    print(f"results: {record.write('coverage', figures, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
