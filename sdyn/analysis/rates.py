"""Rates only where a rate exists: the checks a curve claim's rate passes before its verdict.

A rate fitted on a curve that does not move (a loss at its floor from t = 0, an alignment
below float64 resolution before the window starts) is a number without a law behind it; a
rate that still changes across its window is not yet the asymptotic rate a theorem states.
:func:`absence` turns the first into "not measured", :func:`still_changing` the second into
"inconclusive" (both called by :func:`sdyn.analysis.claims.evaluate`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sdyn.analysis.fits import Fit, fit_geometric_rate, fit_power_law
from sdyn.analysis.verdict import format_interval
from sdyn.experiments.common import Claim

# A geometric rate's curve must fall by at least this factor over its window: less is a
# plateau with noise on it, whatever contraction a fit then reports. (A power law is not held
# to it: a slow decay is a measured exponent, which a bound on the exponent judges.)
MIN_FALL = 2.0
# Distinct steps a half-window needs before its rate is compared with the other half's.
MIN_HALF_STEPS = 4


def decaying(claim: Claim) -> bool:
    """Whether the claim states a decay (a geometric contraction, or a power law in the step
    with a negative exponent): the claims :func:`absence` checks."""
    if claim.kind in ("curve_geometric_rate", "per_run_geometric_rate"):
        return True
    return claim.kind == "curve_power_law" and claim.theory < 0


def resolved(claim: Claim, points: pd.DataFrame) -> pd.Series:
    """Rows of a curve claim's ``points`` (columns x = step, y, run) that resolve the claim's
    quantity: finite, positive, above ``claim.floor``, and above ``claim.relative_floor``
    times the run's first recorded value (float64's resolution of the quantity)."""
    y = points["y"]
    keep = np.isfinite(y) & (y > 0)
    if claim.floor is not None:
        keep &= y > claim.floor
    if claim.relative_floor is not None:
        first = points.sort_values("x").groupby("run")["y"].transform("first")
        keep &= y > claim.relative_floor * first.reindex(points.index).abs()
    return keep


def absence(claim: Claim, points: pd.DataFrame, window: tuple[float, float]) -> str | None:
    """Why a decaying curve claim has no rate to fit in ``window`` (steps, inclusive), or None.

    ``points``: the claim's recorded curves, every step (columns x = step, y, seed, run). The
    rate does not exist when fewer than 3 distinct steps of the window resolve the quantity
    (:func:`resolved`: the runs stopped, or the curve left float64's resolution or sits at
    its floor, before or early in the window), or, for a geometric rate, when the median
    run's curve falls by less than :data:`MIN_FALL` from its first to its last resolved value
    in the window (flat: no contraction to measure). Claims that state no decay
    (:func:`decaying`) are never absent here.
    """
    if not decaying(claim) or points.empty:
        return None
    lo, hi = window
    span = f"t = {lo:g}-{hi:g}"
    keep = resolved(claim, points)
    inside = points["x"].between(lo, hi)
    usable = points[keep & inside].sort_values("x")
    if usable["x"].nunique() < 3:
        lost = points[~keep].sort_values("x").groupby("run").head(1)
        if lost.empty:
            return f"no rate: fewer than 3 recorded steps in its window {span}"
        at, k = lost["x"].median(), len(lost)
        if lost["y"].isna().all():
            what = f"its runs stopped (no value from t = {at:g}, median over {k} runs)"
        else:
            where = "its floor" if claim.floor is not None else "float64 resolution"
            what = f"it is at or below {where} from t = {at:g} (median over {k} runs)"
        return f"no rate: {what}, leaving fewer than 3 resolved steps in its window {span}"
    if claim.kind == "curve_power_law":
        return None
    ends = usable.groupby("run")["y"].agg(["first", "last"])
    fall = float(np.median(ends["first"] / ends["last"]))
    if fall < MIN_FALL:
        first = float(usable["x"].min())
        return (
            f"no contraction to measure: flat from t = {first:g}, it falls by a factor "
            f"{fall:.3g} over {span} (median run; a rate needs {MIN_FALL:g})"
        )
    return None


def _side(claim: Claim, value: float) -> int:
    """Where ``value`` lies against the claim's bound: 0 where allowed, else -1 below or +1
    above the allowed range (theory with its tolerance)."""
    low, high = -math.inf, math.inf
    if claim.direction in ("<=", "=="):
        high = claim.theory + claim.tolerance
    if claim.direction in (">=", "=="):
        low = claim.theory - claim.tolerance
    return -1 if value < low else (1 if value > high else 0)


def still_changing(
    claim: Claim, table: pd.DataFrame, fit: Fit, seed: int, notes: list[str]
) -> str | None:
    """Whether an asymptotic rate has settled over its window; the reason it has not, or None.

    For ``curve_power_law`` (halves in log t) and ``curve_geometric_rate`` (halves in t of
    ``fit.window``) claims with a finite fit: the rate is fitted again on each half of the
    window (``table``: the points the fit used, columns x = step, y, seed, run). The rate is
    still changing when the halves' intervals are disjoint and, continued by one more
    half-window at the pace from the first half to the second, the late rate would cross the
    bound (``_side`` changes): then the verdict the whole window gives is not yet the
    asymptotic one. A drift that moves away from the bound leaves the verdict standing. The
    window and both halves are added to ``notes``.

    Returns:
        The reason for an "inconclusive" verdict, e.g. ``"the rate is still changing: -0.15
        on t = 20-63, -0.38 on t = 63-200"``, or None.
    """
    if claim.kind not in ("curve_power_law", "curve_geometric_rate") or not fit.converged:
        return None
    power = claim.kind == "curve_power_law"
    lo, hi = (table["x"].min(), table["x"].max()) if power else fit.window
    if power and lo <= 0:
        return None
    mid = math.sqrt(lo * hi) if power else (lo + hi) / 2
    notes.append(f"window t = {lo:g}-{hi:g}")
    halves = []
    for part in (table[table["x"].between(lo, mid)], table[table["x"].between(mid, hi)]):
        if part["x"].nunique() < MIN_HALF_STEPS:
            return None
        if power:
            half = fit_power_law(part["x"], part["y"], part["seed"], seed=seed)
        else:
            half = fit_geometric_rate(part["x"], part["y"], part["run"], floor=claim.floor,
                                      seed=seed)  # fmt: skip
        if not (half.converged and math.isfinite(half.ci_low) and math.isfinite(half.ci_high)):
            return None
        halves.append(half)
    early, late = halves
    text = (
        f"{format_interval(early.ci_low, early.ci_high, early.value)} on t = {lo:g}-{mid:.3g}, "
        f"{format_interval(late.ci_low, late.ci_high, late.value)} on t = {mid:.3g}-{hi:g}"
    )
    notes.append(f"halves of the window: {text}")
    disjoint = early.ci_high < late.ci_low or late.ci_high < early.ci_low
    projected = 2 * late.value - early.value
    if disjoint and _side(claim, projected) != _side(claim, fit.value):
        return f"the rate is still changing: {text}"
    return None
