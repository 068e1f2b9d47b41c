"""The confidence intervals the fits share: statsmodels' t intervals, plain or clustered by
curve."""

from __future__ import annotations

import math

import numpy as np


def wald_ci(result, index: int, confidence: float, notes: list[str]) -> tuple[float, float, str]:
    """statsmodels' interval for parameter ``index``, or NaN bounds with method "none"."""
    low, high = (float(b) for b in result.conf_int(alpha=1.0 - confidence)[index])
    if np.isfinite(low) and np.isfinite(high):
        notes.append("used the statsmodels t/Wald interval")
        return low, high, "ols"
    notes.append("no confidence interval could be computed")
    return math.nan, math.nan, "none"


def clustered_slope_ci(
    result, codes: np.ndarray, confidence: float, notes: list[str]
) -> tuple[float, float, str]:
    """The interval of the slope of the OLS fit ``result`` of ``y`` on ``[1, x]`` whose rows
    come in groups, whole curves (``codes``, shape ``(n,)``: group indices 0..G-1): points of
    one curve are not independent replicates, so the curves are.

    With 2 or more groups, the cluster-robust t interval (statsmodels, clustered by group,
    G - 1 degrees of freedom); with one, the OLS t interval. Against a bootstrap of whole
    curves (BCa with small-sample corrections) at 20 and 40 curves, 1,000 trials a setting
    (``benchmarks/coverage.py``): where the curves' slopes or offsets are normal, t
    94.6-96.3%, the bootstrap 94.0-95.5%; heavy-tailed (t3) slopes, t 95.0-95.3%, the
    bootstrap 91.3-91.5%; skewed (exponential) slopes, t 91.8-93.7%, the bootstrap
    92.9-95.3%. At 5-10 curves the bootstrap covered 88.9-94.2%, t 88.3-97.2% (the skewed
    slopes the least for both). Returns ``(low, high, ci_method)``.
    """
    if codes.max() >= 1:
        notes.append(f"clustered by group ({codes.max() + 1} groups)")
        result = result.get_robustcov_results("cluster", groups=codes, use_t=True)
    return wald_ci(result, 1, confidence, notes)
