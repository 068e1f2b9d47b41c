"""A bound checked run by run: how often the measured quantity exceeds what a theorem allows.

A theorem such as "with probability at least 1 - delta over the initialisation,
||w_r(t) - w_r(0)|| <= D for all r and t" (softmax-NTK, Def. A.2 with Thm 4.2) is a statement
about each run, not about a slope. Each run gives the ratio of its measured quantity to its own
bound; the theorem holds when the probability that a run exceeds its bound (ratio > 1) is at
most delta. The fraction of exceeding runs estimates that probability, with the exact
Clopper-Pearson interval of a binomial proportion.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from sdyn.analysis.fits.result import Fit, columns, nan_fit


def fit_exceedance(ratio, *, rounding: float = 0.0, confidence: float = 0.95) -> Fit:
    """The fraction of runs whose measured quantity exceeds its bound, ``ratio > 1 + rounding``.

    Args:
        ratio: 1-D array-like, shape (N,), per run the measured quantity over the bound the
            theorem gives for that run (dimensionless; <= 1 where the bound holds). NaN
            entries (no bound could be evaluated) are excluded and counted.
        rounding: relative float64 rounding of the ratio: a ratio within it of 1 is at the
            bound, not above it (non-negative).
        confidence: level of the Clopper-Pearson interval, in (0, 1).

    Returns:
        A :class:`Fit` of kind ``"exceedance"``: ``value`` the fraction ``k / N`` of runs with
        ratio > 1 + rounding, ``ci_low``/``ci_high`` its exact binomial interval
        (``ci_method="clopper-pearson"``), ``n_points`` the runs N, ``n_excluded`` the NaN
        ratios, ``details`` the counts ``exceeding`` and ``at_bound`` (ratios in
        ``(1, 1 + rounding]``) and the ``max_ratio`` and ``median_ratio``.
        No usable run gives a NaN fit.

    Raises:
        ValueError: ``ratio`` not 1-D, ``confidence`` outside (0, 1), or a negative
            ``rounding``.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if not rounding >= 0.0:
        raise ValueError(f"rounding must be >= 0, got {rounding}")
    (ratio,), _ = columns((ratio,), None, ("ratio",))
    usable = ~np.isnan(ratio)
    n_excluded = int(np.count_nonzero(~usable))
    ratio = ratio[usable]
    n = ratio.size
    excluded = f"{n_excluded} runs without a bound (NaN)" if n_excluded else ""
    if n == 0:
        return nan_fit("exceedance", 0, 0, n_excluded, excluded or "no runs")
    k = int(np.count_nonzero(ratio > 1.0 + rounding))
    at_bound = int(np.count_nonzero((ratio > 1.0) & (ratio <= 1.0 + rounding)))
    interval = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    details = {
        "exceeding": k,
        "at_bound": at_bound,
        "max_ratio": float(ratio.max()),
        "median_ratio": float(np.median(ratio)),
    }
    notes = [f"{k} of {n} runs exceed the bound (largest ratio {details['max_ratio']:.3g})"]
    if at_bound:
        notes.append(f"{at_bound} at the bound within float64 rounding ({rounding:g})")
    return Fit(
        kind="exceedance",
        value=k / n,
        ci_low=interval.low,
        ci_high=interval.high,
        prefactor=math.nan,
        r2=math.nan,
        residual_std=math.nan,
        n_points=n,
        n_groups=n,
        n_excluded=n_excluded,
        converged=True,
        ci_method="clopper-pearson",
        window=None,
        message="; ".join(part for part in (*notes, excluded) if part),
        details=details,
    )
