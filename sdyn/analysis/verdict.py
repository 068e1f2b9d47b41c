"""Compare a fitted quantity's confidence interval with a theorem's bound or prediction.

Verdicts (:data:`VERDICTS`):

* ``consistent`` / ``violated``: the interval lies inside / outside what the theorem allows;
* ``consistent (vacuous)``: a per-run bound that every run meets with more room than
  :data:`POWER_LIMIT` allows a test to have power (:func:`vacuous`): it could not have failed;
* ``inconclusive``: the interval straddles the bound, or the evidence is too thin to judge
  (:data:`EVIDENCE`), or the interval is degenerate (zero width: the fit is wrong or the data
  cannot say), or no fit could be made; the reason says which;
* ``outside assumptions``: the runs are not in the setting the theorem covers (decided by
  :mod:`sdyn.analysis.claims`, which still reports the measured value);
* ``not measured``: the sweep does not vary what the claim is about (decided there too).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from sdyn.analysis.fits import Fit

__all__ = [
    "DIRECTIONS",
    "EVIDENCE",
    "EVIDENCE_RULE",
    "POWER_LIMIT",
    "VACUOUS",
    "VERDICTS",
    "Slack",
    "evidence_shortfall",
    "format_interval",
    "slack",
    "vacuous",
    "verdict",
]

DIRECTIONS = ("<=", ">=", "==")
VACUOUS = "consistent (vacuous)"
VERDICTS = (
    "consistent",
    VACUOUS,
    "violated",
    "inconclusive",
    "outside assumptions",
    "not measured",
)
# A per-run bound whose every measured/bound ratio lies below this has no power: a bound
# 10^6 times too loose would have passed as well, so it cannot tell a right theorem from a
# wrong one.
POWER_LIMIT = 1e-6
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


@dataclass(frozen=True)
class Slack:
    """How much room a bound leaves the measurement: positive where the bound holds.

    ``unit`` says how it is measured: ``"difference"`` (an exponent or a rate: the bound minus
    the value for ``<=``, the value minus the bound for ``>=``, in the units of the bound),
    ``"factor"`` (a ratio: the bound over the value for ``<=``, the value over the bound for
    ``>=``; above 1 where it holds) or ``"decades"`` (a per-run bound: ``-log10`` of the
    largest measured/bound ratio over the runs; no interval). ``text`` is one short phrase
    for tables, e.g. ``"0.95 [0.81, 1.1]"``.
    """

    value: float
    ci_low: float
    ci_high: float
    unit: str
    text: str

    def as_dict(self) -> dict:
        """JSON-ready: value, ci_low, ci_high, unit, text."""
        return dataclasses.asdict(self)


def slack(fit: Fit, theory: float, direction: str) -> Slack | None:
    """The room the bound ``theory`` leaves ``fit`` (see :class:`Slack`), or None where there
    is no bound (``direction == "=="``, a prediction) or no estimate (NaN value).

    Per-run bounds (``fit.kind == "exceedance"``) read the largest ratio of their runs,
    ``fit.details["max_ratio"]``; ratios give a factor; every other fit a difference, whose
    interval is the fit's interval carried over.
    """
    if direction == "==" or not math.isfinite(fit.value):
        return None
    if fit.kind == "exceedance":
        largest = fit.details.get("max_ratio", math.nan)
        if not largest > 0:
            return None
        decades = -math.log10(largest)
        text = f"10^{decades:.3g} (largest ratio {largest:.3g})"
        return Slack(decades, math.nan, math.nan, "decades", text)
    below = direction == "<="
    if fit.kind == "ratio":
        if theory <= 0 or fit.value <= 0:
            return None
        if below:
            value, low, high = (_over(theory, b) for b in (fit.value, fit.ci_high, fit.ci_low))
        else:
            value, low, high = (b / theory for b in (fit.value, fit.ci_low, fit.ci_high))
        return Slack(value, low, high, "factor", "x" + format_interval(low, high, value))
    sign = 1.0 if below else -1.0  # the slack is sign * (theory - value)
    value, *ends = (sign * (theory - b) for b in (fit.value, fit.ci_low, fit.ci_high))
    low, high = sorted(ends)
    return Slack(value, low, high, "difference", format_interval(low, high, value))


def _over(a: float, b: float) -> float:
    """``a / b`` for ``a > 0``, infinite where ``b`` is 0 (an interval's open end)."""
    return a / b if b > 0 else (math.inf if b == 0 else math.nan)


def vacuous(fit: Fit) -> bool:
    """Whether a per-run bound (``exceedance``) held in every run with every measured/bound
    ratio below :data:`POWER_LIMIT`: a check with no power, reported as :data:`VACUOUS`."""
    largest = fit.details.get("max_ratio", math.nan) if fit.kind == "exceedance" else math.nan
    return bool(largest < POWER_LIMIT)
