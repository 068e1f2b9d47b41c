"""Compare a fitted quantity's confidence interval with a theorem's bound or prediction.

Verdicts (:data:`VERDICTS`):

* ``consistent`` / ``violated``: the interval lies inside / outside what the theorem allows;
* ``inconclusive``: the interval straddles the bound, or the evidence is too thin to judge
  (:data:`EVIDENCE`), or the interval is degenerate (zero width: the fit is wrong or the data
  cannot say), or no fit could be made; the reason says which;
* ``outside assumptions``: the runs are not in the setting the theorem covers (decided by
  :mod:`sdyn.analysis.claims`, which still reports the measured value);
* ``not measured``: the sweep does not vary what the claim is about (decided there too).
"""

from __future__ import annotations

import math

from sdyn.analysis.fits import Fit

__all__ = [
    "DIRECTIONS",
    "EVIDENCE",
    "EVIDENCE_RULE",
    "VERDICTS",
    "evidence_shortfall",
    "format_interval",
    "verdict",
]

DIRECTIONS = ("<=", ">=", "==")
VERDICTS = ("consistent", "violated", "inconclusive", "outside assumptions", "not measured")
# The minimum evidence per kind of fit: (attribute of the Fit, fewest allowed, what it counts).
# Below it the verdict is inconclusive, whatever the interval: a line through 3 points, or a
# bootstrap over 2 seeds, says little however narrow its interval comes out.
EVIDENCE = {
    "power_law": ("n_levels", 4, "distinct x values with at least 2 seeds each"),
    "threshold_power_law": ("n_levels", 4, "distinct x values with at least 2 seeds each"),
    "threshold": ("n_points", 3, "thresholds"),
    "geometric_rate": ("n_groups", 2, "runs"),
    "ratio": ("n_points", 3, "pairs"),
    "exceedance": ("n_points", 1, "runs"),
}
EVIDENCE_RULE = (
    "a power law or threshold law needs at least 4 distinct x values with at least 2 seeds "
    "each, a rate at least 2 runs, a ratio at least 3 pairs; with less, or with a zero-width "
    "interval, the verdict is inconclusive whatever the interval says"
)
# An interval narrower than this (relative to the value, or to the fit's resolution where the
# design has one) is degenerate: a collapsed bootstrap, not certainty.
DEGENERATE_RELATIVE = 1e-6
DEGENERATE_RESOLUTION = 0.01


def significant_digits(low: float, high: float) -> int:
    """Significant digits that show an interval's width (at least 3, at most 12): ``[1, 1]``
    must not hide ``[0.99993, 1.00001]``."""
    width = high - low
    scale = max((abs(b) for b in (low, high) if math.isfinite(b)), default=0.0)
    if not (math.isfinite(width) and width > 0 and scale > 0):
        return 3
    return min(max(math.ceil(math.log10(scale / width)) + 2, 3), 12)


def format_interval(low: float, high: float, value: float | None = None) -> str:
    """``"[low, high]"``, or ``"value [low, high]"``, with the digits the width needs."""
    digits = significant_digits(low, high)
    text = f"[{low:.{digits}g}, {high:.{digits}g}]"
    return text if value is None else f"{value:.{digits}g} {text}"


def evidence_shortfall(fit: Fit) -> str | None:
    """Why ``fit`` rests on too little evidence for a verdict (:data:`EVIDENCE`), or None."""
    attribute, fewest, what = EVIDENCE[fit.kind]
    have = getattr(fit, attribute)
    if have < fewest:
        return f"too little evidence: {have} {what} (need {fewest})"
    return None


def verdict(
    estimate: Fit | float,
    ci_low: float | None = None,
    ci_high: float | None = None,
    *,
    theory: float,
    direction: str,
    tolerance: float = 0.0,
    confidence: float = 0.95,
) -> tuple[str, str]:
    """Judge a measured quantity against a theoretical bound, from its confidence interval.

    ``direction`` says what the theorem claims about the measured quantity ``q``:

    * ``"<="`` (``theory`` is an upper bound): consistent if ``ci_high <= theory + tolerance``,
      violated if ``ci_low > theory + tolerance``, else inconclusive (the CI straddles it);
    * ``">="`` (a lower bound): consistent if ``ci_low >= theory - tolerance``, violated if
      ``ci_high < theory - tolerance``, else inconclusive;
    * ``"=="`` (a prediction): consistent if ``[ci_low, ci_high]`` meets
      ``[theory - tolerance, theory + tolerance]``, violated otherwise.

    Before that the verdict is "inconclusive" when there is no estimate or interval (NaN), the
    interval is degenerate (width at most ``DEGENERATE_RELATIVE`` of its larger end in absolute
    value, or ``DEGENERATE_RESOLUTION`` of a Fit's ``resolution``), and for a :class:`Fit` also
    when its solver did not converge or its evidence is short of :data:`EVIDENCE`. Infinite
    bounds are allowed (an uninformative side of the interval).

    Args:
        estimate: a :class:`~sdyn.analysis.fits.Fit` (``ci_low``/``ci_high`` must then be left
            out), or the point estimate as a float, in the units of ``theory``.
        ci_low, ci_high: the interval's bounds when ``estimate`` is a float.
        theory: the theorem's bound or predicted value, finite.
        direction: ``"<="``, ``">="`` or ``"=="``, as above.
        tolerance: non-negative slack added to the bound in the permissive direction (for
            ``"=="``, the half-width of the accepted band), in the units of ``theory``.
        confidence: the interval's level, only used to label it in the reason.

    Returns:
        ``(verdict, reason)``: ``verdict`` is ``"consistent"``, ``"violated"`` or
        ``"inconclusive"``; ``reason`` is one short sentence with the numbers, e.g.
        ``"95% CI [1.41, 1.73] lies at or below the bound 2"``.

    Raises:
        ValueError: on an unknown ``direction``, a non-finite ``theory``, a negative or
            non-finite ``tolerance``, missing or extra CI bounds, or ``ci_low > ci_high``.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if not math.isfinite(theory):
        raise ValueError(f"theory must be finite, got {theory}")
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"tolerance must be finite and >= 0, got {tolerance}")
    resolution = math.nan
    if isinstance(estimate, Fit):
        if ci_low is not None or ci_high is not None:
            raise ValueError("pass either a Fit or a value with ci_low and ci_high, not both")
        fit = estimate
        value, ci_low, ci_high, resolution = fit.value, fit.ci_low, fit.ci_high, fit.resolution
        if math.isnan(value):
            return "inconclusive", f"no fit: {fit.message}" if fit.message else "no fit"
        if not fit.converged:
            return "inconclusive", "fit did not converge" + (
                f": {fit.message}" if fit.message else ""
            )
        shortfall = evidence_shortfall(fit)
        if shortfall:
            return "inconclusive", shortfall
    else:
        if ci_low is None or ci_high is None:
            raise ValueError("ci_low and ci_high are required when estimate is a number")
        value = estimate
    value, ci_low, ci_high = float(value), float(ci_low), float(ci_high)
    if ci_low > ci_high:
        raise ValueError(f"ci_low ({ci_low}) must not exceed ci_high ({ci_high})")
    if math.isnan(value) or math.isnan(ci_low) or math.isnan(ci_high):
        return "inconclusive", "no estimate or confidence interval (NaN)"

    interval = f"{100 * confidence:.3g}% CI {format_interval(ci_low, ci_high)}"
    ends = [abs(b) for b in (ci_low, ci_high) if math.isfinite(b)]
    floor = DEGENERATE_RELATIVE * max(ends, default=0.0)
    if math.isfinite(resolution):
        floor = max(floor, DEGENERATE_RESOLUTION * resolution)
    if ci_high - ci_low <= floor:
        return "inconclusive", f"degenerate interval: {interval} has (near) zero width"
    slack = f" (tolerance {tolerance:.4g})" if tolerance else ""
    if direction == "<=":
        bound = f"the bound {theory:.4g}{slack}"
        if ci_high <= theory + tolerance:
            return "consistent", f"{interval} lies at or below {bound}"
        if ci_low > theory + tolerance:
            return "violated", f"{interval} lies above {bound}"
        return "inconclusive", f"{interval} straddles {bound}"
    if direction == ">=":
        bound = f"the bound {theory:.4g}{slack}"
        if ci_low >= theory - tolerance:
            return "consistent", f"{interval} lies at or above {bound}"
        if ci_high < theory - tolerance:
            return "violated", f"{interval} lies below {bound}"
        return "inconclusive", f"{interval} straddles {bound}"
    band = f"the prediction {theory:.4g}" + (f" +/- {tolerance:.4g}" if tolerance else "")
    if ci_high < theory - tolerance:
        return "violated", f"{interval} lies below {band}"
    if ci_low > theory + tolerance:
        return "violated", f"{interval} lies above {band}"
    return "consistent", f"{interval} meets {band}"
