"""Typical ratios of paired measurements (two optimisers on one seed), as geometric means."""

from __future__ import annotations

import math

import numpy as np
from statsmodels.regression.linear_model import OLS

from sdyn.analysis.fits.intervals import wald_ci
from sdyn.analysis.fits.result import Fit, check_options, columns, nan_fit


def fit_ratio(
    y,
    reference,
    *,
    confidence: float = 0.95,
    min_pairs: int = 2,
) -> Fit:
    """Estimate the typical ratio ``y / reference`` of paired positive measurements.

    Each index is one pair (e.g. the same seed measured under two optimisers). The estimate is
    the geometric mean of the ratios, with :func:`geometric_mean_fit`'s interval (the Student t
    interval of the mean log ratio, transformed back by exp). A ratio below 1 means ``y`` is
    smaller than its reference.

    Args:
        y: 1-D array-like, shape (n,), the compared measurement of each pair.
        reference: 1-D array-like, shape (n,), the reference measurement of the same pairs.
        confidence: interval level in (0, 1).
        min_pairs: fewest usable pairs for a fit (>= 1).

    Returns:
        A :class:`Fit` of kind ``"ratio"``: ``n_points == n_groups`` is the number of usable
        pairs, ``n_excluded`` the pairs dropped because a value is NaN, infinite or not
        positive, ``residual_std`` the standard deviation of the log ratios. Too few usable
        pairs gives a NaN fit with ``converged=False``.

    Raises:
        ValueError: if the inputs are not 1-D of equal length, or an option is out of range.
    """
    (y, reference), _ = columns((y, reference), None, ("y", "reference"))
    check_options(confidence, min_pairs, name="min_pairs", min_allowed=1)
    usable = np.isfinite(y) & np.isfinite(reference) & (y > 0) & (reference > 0)
    n_excluded = int(np.count_nonzero(~usable))
    log_ratios = np.log(y[usable]) - np.log(reference[usable])
    n_used = log_ratios.size
    notes = [f"{n_excluded} pairs excluded (non-finite or non-positive)"] if n_excluded else []
    if n_used < min_pairs:
        notes.append(f"only {n_used} usable pairs (need {min_pairs})")
        return nan_fit("ratio", n_used, n_used, n_excluded, "; ".join(notes))

    return geometric_mean_fit("ratio", log_ratios, n_excluded, confidence, notes)


def geometric_mean_fit(
    kind: str, log_values: np.ndarray, n_excluded: int, confidence: float, notes: list[str]
) -> Fit:
    """The geometric mean of positive values given by their logs (shape ``(groups,)``, one per
    group, e.g. a pair's log ratio or a run's log rate), with the Student t interval of the
    mean log (groups - 1 degrees of freedom, statsmodels' OLS on a constant) transformed back
    by exp; NaN bounds (``ci_method`` "none") with one group.

    The t interval at every number of groups: on normal and heavy-tailed (t3) logs it covered
    94.3-97.0% of 1,000 trials at 3-40 groups, sdyn's corrected bootstrap 79-95%
    (``benchmarks/coverage.py``). Only on skewed (exponential) logs, from 20 groups, did the
    bootstrap cover more (93.5-94.5% against 92.7-92.8%); the logs of sdyn's own paired ratios
    are not skewed (pooled sample skewness -0.01 over the implicit-bias figures' sweeps).
    """
    n_used = log_values.size
    result = OLS(log_values, np.ones(n_used)).fit()
    ci_low, ci_high, ci_method = wald_ci(result, 0, confidence, notes)
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
