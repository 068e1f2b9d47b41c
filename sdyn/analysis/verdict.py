"""Compare a fitted quantity's interval with a theorem's bound or prediction.

Verdicts (:data:`VERDICTS`):

* ``consistent`` / ``violated``: the interval lies inside / outside what the theorem allows;
* ``consistent (vacuous)``: a per-run bound every run meets with so much room that the check
  could not have failed (:class:`sdyn.analysis.kinds.Bound`);
* ``inconclusive``: the interval straddles the bound, the evidence is too thin to judge (each
  kind's :meth:`~sdyn.api.Claim.evidence`), or the rate has not settled; the reason says which;
* ``outside assumptions``: the runs are not in the setting the theorem (or the figure) covers;
* ``not measured``: the sweep does not vary what the claim is about, or no value resolves;
* ``derived``: the claim restates another claim's evidence (``Claim.derived_from``) and is
  reported beside it, not as a second verdict.

The interval a verdict reads is named for what it is (:func:`interval_name`): a 95% CI, a
``bracket`` (a threshold law whose sigma the grid cannot identify: it holds the slopes the
grid allows), or ``exact`` (every run agrees to float64's resolution, :data:`RESOLUTION`: then the
value itself is compared, never a zero-width "CI"). A claim judged at several checkpoints
holds at each at the Bonferroni level (:func:`joint_confidence`), combined by
:func:`combine`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sdyn.analysis.fits import Fit
from sdyn.analysis.fits.result import CI_METHODS
from sdyn.api import DIRECTIONS

if TYPE_CHECKING:
    from sdyn.api import Claim

__all__ = [
    "CONFIDENCE",
    "DERIVED",
    "RESOLUTION",
    "VACUOUS",
    "VERDICTS",
    "Slack",
    "combine",
    "exact",
    "factor_slack",
    "format_interval",
    "interval_name",
    "joint_confidence",
    "judge",
    "slack",
    "verdict",
]

VACUOUS = "consistent (vacuous)"
DERIVED = "derived"
VERDICTS = (
    "consistent",
    VACUOUS,
    "violated",
    "inconclusive",
    "outside assumptions",
    "not measured",
    DERIVED,
)
# The level of every reported interval; a claim judged at k checkpoints reads each at
# 1 - (1 - CONFIDENCE) / k, so that together they hold at CONFIDENCE.
CONFIDENCE = 0.95
# An interval narrower than this, relative to its value, is float64 rounding carried through a
# fit, not a confidence interval: every run gave the same value (an exact rate of a step rule,
# say). Such a value is reported as exact and compared as it is.
RESOLUTION = 1e-9
# An interval narrower than this fraction of a fit's design resolution (thresholds read on a
# grid) is degenerate: the fit cannot say.
DEGENERATE_RESOLUTION = 0.01
# Which checkpoint decides a claim judged at several: the worst verdict, and within it the
# interval least favourable to the claim.
SEVERITY = {"consistent": 0, "inconclusive": 1, "violated": 2}


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


def exact(fit: Fit, floor: float = 0.0) -> bool:
    """Whether ``fit``'s interval is narrower than float64's resolution of its value
    (:data:`RESOLUTION` of the larger of its ends' magnitude and ``floor``: an exponent near 0
    is resolved to about 1e-9 absolutely, not relatively): every run gave the same value,
    which is then exact."""
    ends = (fit.ci_low, fit.ci_high, fit.value)
    if not all(math.isfinite(b) for b in ends):
        return False
    return fit.ci_high - fit.ci_low <= RESOLUTION * max(*(abs(b) for b in ends), floor)


def interval_name(fit: Fit, floor: float = 0.0) -> str:
    """What ``fit``'s interval is: ``"bracket"`` (``details["bracket"]``: it holds the values a
    grid allows, no confidence level), ``"exact"`` (:func:`exact`, with ``floor``), else ``"95%
    CI"`` (or the level in ``details["confidence"]``). A plugin's fit made by a method of its
    own (a ``ci_method`` not in :data:`sdyn.analysis.fits.result.CI_METHODS`) that states no
    level is named by its method (``"jackknife interval"``): sdyn cannot say it is a 95% CI."""
    if fit.details.get("bracket"):
        return "bracket"
    if exact(fit, floor):
        return "exact"
    if "confidence" not in fit.details and fit.ci_method not in CI_METHODS:
        return f"{fit.ci_method} interval"
    return f"{100 * fit.details.get('confidence', CONFIDENCE):.3g}% CI"


def shown(fit: Fit, name: str | None = None) -> str:
    """A fit's value and interval as a table shows it: ``1.05 [0.902, 1.19]``,
    ``1.01 [0.75, 1.33] (bracket)``, ``0.367879 (exact)``, for a count of runs (``"count"``, a
    sure bound) ``0 of 40 runs above``, and where the data bound the value on one side only
    (a censored threshold law) ``no estimate, 95% CI [1.33, inf]``."""
    name = name or interval_name(fit)
    if not math.isfinite(fit.value):
        if math.isnan(fit.ci_low) and math.isnan(fit.ci_high):
            return "nan"
        return f"no estimate, {name} {format_interval(fit.ci_low, fit.ci_high)}"
    if name == "count":
        return f"{fit.details.get('exceeding', 0)} of {fit.n_points} runs above"
    if name == "exact":
        return f"{fit.value:.6g} (exact)"
    text = format_interval(fit.ci_low, fit.ci_high, fit.value)
    return f"{text} (bracket)" if name == "bracket" else text


def judge(claim: Claim, fit: Fit, theory: float) -> tuple[str, str]:
    """The standard judgment of a claim's fit (its value is finite): "inconclusive" where the
    solver did not converge or the evidence is short (``claim.evidence``); otherwise the
    interval, named by ``claim.interval_name``, against the theory (:func:`verdict`)."""
    if not fit.converged:
        return "inconclusive", "fit did not converge" + (f": {fit.message}" if fit.message else "")
    shortfall = claim.evidence(fit)
    if shortfall:
        return "inconclusive", shortfall
    return verdict(
        fit,
        theory=theory,
        direction=claim.direction,
        tolerance=claim.tolerance,
        name=claim.interval_name(fit),
    )


def verdict(
    estimate: Fit | float,
    ci_low: float | None = None,
    ci_high: float | None = None,
    *,
    theory: float,
    direction: str,
    tolerance: float = 0.0,
    name: str | None = None,
) -> tuple[str, str]:
    """Judge a measured quantity against a theoretical bound, from its interval.

    ``direction`` says what the theorem claims about the measured quantity ``q``:

    * ``"<="`` (``theory`` is an upper bound): consistent if ``ci_high <= theory + tolerance``,
      violated if ``ci_low > theory + tolerance``, else inconclusive (the interval straddles);
    * ``">="`` (a lower bound): consistent if ``ci_low >= theory - tolerance``, violated if
      ``ci_high < theory - tolerance``, else inconclusive;
    * ``"=="`` (a prediction): consistent if ``[ci_low, ci_high]`` meets
      ``[theory - tolerance, theory + tolerance]``, violated otherwise.

    An interval named ``"exact"``, or unnamed and narrower than :data:`RESOLUTION` of its
    value, is exact: the value itself is compared, and a bound it meets up to that resolution
    counts as met (a value at the bound up to rounding is at the bound). Before that the
    verdict is "inconclusive" when there is no estimate or interval (NaN), or, for a
    :class:`Fit` with a design ``resolution`` (a grid), when the interval is narrower than
    :data:`DEGENERATE_RESOLUTION` of it. Infinite ends are allowed (an uninformative side).

    Args:
        estimate: a :class:`~sdyn.analysis.fits.Fit` (``ci_low``/``ci_high`` must then be left
            out), or the point estimate as a float, in the units of ``theory``.
        ci_low, ci_high: the interval's ends when ``estimate`` is a float.
        theory: the theorem's bound or predicted value, finite.
        direction: ``"<="``, ``">="`` or ``"=="``, as above.
        tolerance: non-negative slack added to the bound in the permissive direction (for
            ``"=="``, the half-width of the accepted band), in the units of ``theory``.
        name: what the interval is, for the reason; ``"exact"`` compares the value itself.
            Default: ``"exact"`` for an interval below :data:`RESOLUTION` of its value, else
            ``"95% CI"``.

    Returns:
        ``(verdict, reason)``: ``verdict`` is ``"consistent"``, ``"violated"`` or
        ``"inconclusive"``; ``reason`` is one short sentence with the numbers, e.g.
        ``"95% CI [1.41, 1.73] lies at or below the bound 2"``.

    Raises:
        ValueError: on an unknown ``direction``, a non-finite ``theory``, a negative or
            non-finite ``tolerance``, missing or extra interval ends, or ``ci_low > ci_high``.
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
        value, ci_low, ci_high = estimate.value, estimate.ci_low, estimate.ci_high
        resolution = estimate.resolution
    else:
        if ci_low is None or ci_high is None:
            raise ValueError("ci_low and ci_high are required when estimate is a number")
        value = estimate
    value, ci_low, ci_high = float(value), float(ci_low), float(ci_high)
    if ci_low > ci_high:
        raise ValueError(f"ci_low ({ci_low}) must not exceed ci_high ({ci_high})")
    if math.isnan(value) or math.isnan(ci_low) or math.isnan(ci_high):
        return "inconclusive", "no estimate or interval (NaN)"
    width = ci_high - ci_low
    scale = max(abs(ci_low), abs(ci_high), abs(value))
    given = tolerance  # what the reason quotes; an exact value's rounding is added below
    slack_text = f" (tolerance {given:.4g})" if given else ""
    if math.isfinite(resolution) and width <= DEGENERATE_RESOLUTION * resolution:
        return (
            "inconclusive",
            f"degenerate interval: {format_interval(ci_low, ci_high)} is "
            f"narrower than the grid resolves ({resolution:.3g})",
        )
    # An infinite end is never exact; a kind may know its value exact below the relative rule.
    # A named interval is what its kind calls it: a plugin's zero-width "95% CI" is compared as
    # an interval, never said to be runs that agree.
    if name == "exact" or (name is None and math.isfinite(width) and width <= RESOLUTION * scale):
        # The value itself, a bound it meets up to rounding counting as met.
        name = "exact"
        ci_low = ci_high = value
        tolerance += RESOLUTION * scale
        interval = f"the exact value {value:.6g} (every run agrees to float64 resolution)"
    else:
        name = name or f"{100 * CONFIDENCE:.3g}% CI"
        interval = f"{name} {format_interval(ci_low, ci_high)}"
    if direction == "<=":
        bound = f"the bound {theory:.4g}{slack_text}"
        if ci_high <= theory + tolerance:
            return "consistent", f"{interval} lies at or below {bound}"
        if ci_low > theory + tolerance:
            return "violated", f"{interval} lies above {bound}"
        return "inconclusive", f"{interval} straddles {bound}"
    if direction == ">=":
        bound = f"the bound {theory:.4g}{slack_text}"
        if ci_low >= theory - tolerance:
            return "consistent", f"{interval} lies at or above {bound}"
        if ci_high < theory - tolerance:
            return "violated", f"{interval} lies below {bound}"
        return "inconclusive", f"{interval} straddles {bound}"
    band = f"the prediction {theory:.4g}" + (f" +/- {given:.4g}" if given else "")
    if ci_high < theory - tolerance:
        return "violated", f"{interval} lies below {band}"
    if ci_low > theory + tolerance:
        return "violated", f"{interval} lies above {band}"
    return "consistent", f"{interval} meets {band}"


def joint_confidence(k: int) -> float:
    """The level of each of ``k`` intervals that hold jointly at :data:`CONFIDENCE`
    (Bonferroni): ``1 - (1 - CONFIDENCE) / k``."""
    return 1 - (1 - CONFIDENCE) / k


def combine(
    judged: list[tuple[float, Fit, tuple[str, str]]], theory: float, direction: str
) -> tuple[int, str, str]:
    """One verdict from a claim's verdicts at several checkpoints, each read at
    :func:`joint_confidence`: violated if one is, consistent if all are, inconclusive
    otherwise; the checkpoint that decides is the worst, and within its verdict the one whose
    interval is least favourable to the claim.

    Args:
        judged: ``(checkpoint, fit, (verdict, reason))`` per checkpoint judged, non-empty.

    Returns:
        ``(index into judged, verdict, reason)``, the reason naming the deciding checkpoint.
    """

    def badness(k: int):
        fit, label = judged[k][1], judged[k][2][0]
        side = {"<=": fit.ci_high, ">=": -fit.ci_low}.get(
            direction, max(fit.ci_high - theory, theory - fit.ci_low)
        )
        return SEVERITY[label], side

    k = max(range(len(judged)), key=badness)
    checkpoint, _, (label, reason) = judged[k]
    agree = sum(v == "consistent" for _, _, (v, _) in judged)
    if len(judged) > 1:
        decides = f"t = {checkpoint:g} decides ({agree} of {len(judged)} consistent)"
        return k, label, f"{decides}: {reason}"
    return k, label, f"at t = {checkpoint:g}: {reason}"


@dataclass(frozen=True)
class Slack:
    """How much room a bound leaves the measurement: positive where the bound holds.

    ``unit`` says how it is measured: ``"difference"`` (an exponent or a rate: the bound minus
    the value for ``<=``, the value minus the bound for ``>=``, in the units of the bound),
    ``"factor"`` (a ratio: the bound over the value for ``<=``, the value over the bound for
    ``>=``; above 1 where it holds) or ``"decades"`` (a per-run bound: ``-log10`` of the
    largest measured/bound ratio over the runs; no interval). ``text`` is one short phrase
    for tables, e.g. ``"0.95 [0.81, 1.1]"``. ``against``: the bound the room is measured from,
    where it is not the claim's theory (a per-run bound's: each run's, not the share delta).
    """

    value: float
    ci_low: float
    ci_high: float
    unit: str
    text: str
    against: str = ""

    def as_dict(self) -> dict:
        """JSON-ready: value, ci_low, ci_high, unit, text, against."""
        return dataclasses.asdict(self)


def slack(fit: Fit, theory: float, direction: str, floor: float = 0.0) -> Slack | None:
    """The room the bound ``theory`` leaves ``fit``, as a difference in the units of the
    bound, its interval the fit's carried over (an exact value's, with ``floor`` as in
    :func:`exact`, as it is); None for a prediction (``"=="``) or without an estimate
    (NaN)."""
    if direction == "==" or not math.isfinite(fit.value):
        return None
    sign = 1.0 if direction == "<=" else -1.0  # the slack is sign * (theory - value)
    value, *ends = (sign * (theory - b) for b in (fit.value, fit.ci_low, fit.ci_high))
    low, high = sorted(ends)
    if exact(fit, floor):
        return Slack(value, value, value, "difference", f"{value:.6g} (exact)")
    return Slack(value, low, high, "difference", format_interval(low, high, value))


def factor_slack(fit: Fit, theory: float, direction: str) -> Slack | None:
    """The room a bound on a ratio leaves: the bound over the value (``"<="``) or the value
    over the bound (``">="``), above 1 where it holds; None for a prediction, without an
    estimate, or where a ratio is not positive."""
    if direction == "==" or not math.isfinite(fit.value) or theory <= 0 or fit.value <= 0:
        return None
    if direction == "<=":
        value, low, high = (_over(theory, b) for b in (fit.value, fit.ci_high, fit.ci_low))
    else:
        value, low, high = (b / theory for b in (fit.value, fit.ci_low, fit.ci_high))
    if exact(fit):
        return Slack(value, value, value, "factor", f"x{value:.6g} (exact)")
    return Slack(value, low, high, "factor", "x" + format_interval(low, high, value))


def _over(a: float, b: float) -> float:
    """``a / b`` for ``a > 0``, infinite where ``b`` is 0 (an interval's open end)."""
    return a / b if b > 0 else (math.inf if b == 0 else math.nan)
