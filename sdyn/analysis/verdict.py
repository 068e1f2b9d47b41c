"""Compare a fitted quantity's confidence interval with a theorem's bound or prediction."""

from __future__ import annotations

import math

from sdyn.analysis.fits import Fit

__all__ = ["DIRECTIONS", "VERDICTS", "verdict"]

DIRECTIONS = ("<=", ">=", "==")
VERDICTS = ("consistent", "violated", "inconclusive")


def verdict(
    estimate: Fit | float,
    ci_low: float | None = None,
    ci_high: float | None = None,
    *,
    theory: float,
    direction: str,
    tolerance: float = 0.0,
    converged: bool = True,
    n_points: int | None = None,
    min_points: int = 3,
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

    Before that, the verdict is "inconclusive" if the fit did not converge, has fewer than
    ``min_points`` points, or its estimate or a CI bound is NaN. Infinite bounds are allowed
    (an uninformative side of the interval).

    Args:
        estimate: a :class:`~sdyn.analysis.fits.Fit` (its ``value``, ``ci_low``, ``ci_high``,
            ``converged`` and ``n_points`` are used; ``ci_low``/``ci_high`` must then be left
            out), or the point estimate as a float, in the units of ``theory``.
        ci_low, ci_high: the interval's bounds when ``estimate`` is a float.
        theory: the theorem's bound or predicted value, finite.
        direction: ``"<="``, ``">="`` or ``"=="``, as above.
        tolerance: non-negative slack added to the bound in the permissive direction (for
            ``"=="``, the half-width of the accepted band), in the units of ``theory``.
        converged: whether the fit converged (and-ed with ``Fit.converged`` for a Fit).
        n_points: points behind the fit (default ``Fit.n_points`` for a Fit; ``None`` with a
            float skips the check).
        min_points: fewest points for a conclusive verdict.
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
    if isinstance(estimate, Fit):
        if ci_low is not None or ci_high is not None:
            raise ValueError("pass either a Fit or a value with ci_low and ci_high, not both")
        value, ci_low, ci_high = estimate.value, estimate.ci_low, estimate.ci_high
        converged = converged and estimate.converged
        n_points = estimate.n_points if n_points is None else n_points
    else:
        if ci_low is None or ci_high is None:
            raise ValueError("ci_low and ci_high are required when estimate is a number")
        value = estimate
    value, ci_low, ci_high = float(value), float(ci_low), float(ci_high)
    if ci_low > ci_high:
        raise ValueError(f"ci_low ({ci_low}) must not exceed ci_high ({ci_high})")

    if not converged:
        return "inconclusive", "fit did not converge"
    if n_points is not None and n_points < min_points:
        return "inconclusive", f"only {n_points} points (need {min_points})"
    if math.isnan(value) or math.isnan(ci_low) or math.isnan(ci_high):
        return "inconclusive", "no estimate or confidence interval (NaN)"

    interval = f"{confidence:.0%} CI [{ci_low:.4g}, {ci_high:.4g}]"
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
