"""Typical ratios of paired measurements (two optimisers on one seed), as geometric means."""

from __future__ import annotations

import numpy as np

from sdyn.analysis.fits.bootstrap import geometric_mean_fit
from sdyn.analysis.fits.result import DEFAULT_RESAMPLES, Fit, check_options, columns, nan_fit


def fit_ratio(
    y,
    reference,
    *,
    confidence: float = 0.95,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    min_pairs: int = 2,
) -> Fit:
    """Estimate the typical ratio ``y / reference`` of paired positive measurements.

    Each index is one pair (e.g. the same seed measured under two optimisers). The estimate is
    the geometric mean of the ratios; its interval is the Student t interval of the mean log
    ratio, or with 20 pairs or more a bootstrap of it over pairs (BCa, then percentile, with
    the small-sample corrections of :mod:`sdyn.analysis.fits.bootstrap`), transformed back by
    exp. A ratio below 1 means ``y`` is smaller than its reference.

    Args:
        y: 1-D array-like, shape (n,), the compared measurement of each pair.
        reference: 1-D array-like, shape (n,), the reference measurement of the same pairs.
        confidence: interval level in (0, 1).
        n_resamples: bootstrap resamples over pairs.
        seed: seed of the bootstrap's random generator.
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
    n_resamples = check_options(confidence, n_resamples, min_pairs, name="min_pairs", min_allowed=1)
    usable = np.isfinite(y) & np.isfinite(reference) & (y > 0) & (reference > 0)
    n_excluded = int(np.count_nonzero(~usable))
    log_ratios = np.log(y[usable]) - np.log(reference[usable])
    n_used = log_ratios.size
    notes = [f"{n_excluded} pairs excluded (non-finite or non-positive)"] if n_excluded else []
    if n_used < min_pairs:
        notes.append(f"only {n_used} usable pairs (need {min_pairs})")
        return nan_fit("ratio", n_used, n_used, n_excluded, "; ".join(notes))

    return geometric_mean_fit("ratio", log_ratios, n_excluded, confidence, n_resamples, seed, notes)
