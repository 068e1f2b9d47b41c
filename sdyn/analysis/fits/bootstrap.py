"""Bootstrap confidence intervals with small-sample corrections, and their fallbacks.

Intervals come from ``scipy.stats.bootstrap``: BCa first, then the percentile method on the same
resamples when BCa is degenerate (NaN/inf bounds, or scipy's ``DegenerateDataWarning``), then
the Wald interval statsmodels reports for the fitted parameter (Student t for OLS, normal for
RLM), used when there is nothing to resample or the bootstrap distribution is degenerate too.

Small-sample corrections: bootstrap intervals are too narrow when built from few replicates
(3-10 seeds), for two reasons, each corrected as in Hesterberg's "expanded percentile"
interval (Hesterberg, *What teachers should know about the bootstrap*, Am. Stat. 2015):

* the bootstrap variance of a mean of ``n`` replicates is ``(n - 1) / n`` times the unbiased
  one: replicates are resampled after spreading them about their mean by ``sqrt(n / (n - 1))``
  (:func:`adjusted`; means, and so the point estimates, are unchanged); a pooled slope, which
  is not a mean, is spread about its point estimate by the same factor instead;
* the bootstrap ignores that the spread itself is estimated (Student t versus normal): the
  interval is read at the level whose normal quantile is the Student t quantile of
  ``confidence`` with the replicates' degrees of freedom (e.g. 95% -> 96.1% for 24 degrees
  of freedom, 97.6% for 9).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
from scipy import stats
from statsmodels.regression.linear_model import OLS

from sdyn.analysis.fits.result import Fit


def bootstrap_ci(
    data: list[np.ndarray],
    statistic: Callable,
    vectorized: bool,
    confidence: float,
    n_resamples: int,
    seed: int,
    df: int,
    notes: list[str],
) -> tuple[float, float, str] | None:
    """BCa interval, else percentile on the same resamples; None if both are degenerate.

    ``df`` are the degrees of freedom of the replicates' spread, for the expanded level of the
    module doc. Appends a note to ``notes`` for each fallback taken.
    """
    expanded = 2.0 * stats.norm.cdf(stats.t.ppf(0.5 + confidence / 2.0, df)) - 1.0
    options = dict(vectorized=vectorized, paired=False, confidence_level=expanded)
    # Degenerate data (a constant bootstrap distribution, a 0/0 acceleration) is expected and
    # handled below, so its warnings are silenced here only.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = stats.bootstrap(
            data, statistic, n_resamples=n_resamples, method="BCa",
            rng=np.random.default_rng(seed), **options,
        )  # fmt: skip
        interval = _finite_interval(result.confidence_interval)
        degenerate = any(issubclass(w.category, stats.DegenerateDataWarning) for w in caught)
        if interval is not None and not degenerate:
            return (*interval, "BCa")
        result = stats.bootstrap(
            data, statistic, n_resamples=0, method="percentile", bootstrap_result=result,
            **options,
        )  # fmt: skip
    interval = _finite_interval(result.confidence_interval)
    if interval is not None:
        notes.append("BCa degenerate, used percentile")
        return (*interval, "percentile")
    notes.append("bootstrap degenerate")
    return None


def _finite_interval(interval) -> tuple[float, float] | None:
    low, high = float(interval.low), float(interval.high)
    if np.isfinite(low) and np.isfinite(high) and low < high:
        return low, high
    return None


def wald_ci(result, index: int, confidence: float, notes: list[str]) -> tuple[float, float, str]:
    """statsmodels' interval for parameter ``index``, or NaN bounds with method "none"."""
    low, high = (float(b) for b in result.conf_int(alpha=1.0 - confidence)[index])
    if np.isfinite(low) and np.isfinite(high):
        notes.append("used the statsmodels t/Wald interval")
        return low, high, "ols"
    notes.append("no confidence interval could be computed")
    return math.nan, math.nan, "none"


def adjusted(replicates: np.ndarray) -> np.ndarray:
    """Spread replicates about their mean so that resampling them has unbiased variance."""
    n = replicates.size
    mean = replicates.mean()
    return mean + math.sqrt(n / (n - 1)) * (replicates - mean)


def mean_statistic(sample: np.ndarray, axis: int = -1) -> np.ndarray:
    """The sample mean, vectorised for ``scipy.stats.bootstrap``."""
    return sample.mean(axis=axis)


# Fewest groups whose geometric mean is bootstrapped; with fewer, the Student t interval of the
# mean of the logs. Resampling so few cannot reach past the data: on normal logs, the corrected
# bootstrap's 95% interval covered 64% of trials at 2 groups, 78% at 3, 90% at 4, 92% at 5.
MIN_BOOTSTRAP_GROUPS = 5


def geometric_mean_fit(
    kind: str,
    log_values: np.ndarray,
    n_excluded: int,
    confidence: float,
    n_resamples: int,
    seed: int,
    notes: list[str],
) -> Fit:
    """The geometric mean of positive values given by their logs (shape ``(groups,)``, one per
    group), with a bootstrap CI over the groups; the OLS t-interval (Student t with groups - 1
    degrees of freedom) with fewer than :data:`MIN_BOOTSTRAP_GROUPS` groups, or when the
    bootstrap is degenerate; NaN bounds (``ci_method`` "none") with one group."""
    n_used = log_values.size
    result = OLS(log_values, np.ones(n_used)).fit()
    ci = None
    if 2 <= n_used < MIN_BOOTSTRAP_GROUPS:
        notes.append(f"{n_used} groups: too few to bootstrap")
    elif n_used >= MIN_BOOTSTRAP_GROUPS:
        ci = bootstrap_ci(
            [adjusted(log_values)],
            mean_statistic,
            True,
            confidence,
            n_resamples,
            seed,
            n_used - 1,
            notes,
        )
    if ci is None:
        ci = wald_ci(result, 0, confidence, notes)
    ci_low, ci_high, ci_method = ci
    centre = float(result.params[0])
    return Fit(
        kind=kind,
        value=math.exp(centre),
        ci_low=math.exp(ci_low),
        ci_high=math.exp(ci_high),
        prefactor=math.nan,
        r2=math.nan,
        residual_std=float(np.std(log_values, ddof=1)) if n_used >= 2 else math.nan,
        n_points=n_used,
        n_groups=n_used,
        n_excluded=n_excluded,
        converged=bool(np.isfinite(centre)),
        ci_method=ci_method,
        window=None,
        message="; ".join(notes),
    )
