"""What the kinds fitted on recorded curves share: rates only where a rate exists.

A rate fitted on a curve that does not move (a loss at its floor from t = 0, an alignment
below float64 resolution before the window starts) is a number without a law behind it; a
rate that still changes across its window is not yet the asymptotic rate a theorem states.
:meth:`CurveClaim.absence` turns the first into "not measured", :meth:`CurveClaim.judge` the
second into "inconclusive".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.base import KindBase
from sdyn.text import count

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit

# A geometric rate's curve must fall by at least this factor over its window: less is a
# plateau with noise on it, whatever contraction a fit then reports. (A power law is not held
# to it: a slow decay is a measured exponent, which a bound on the exponent judges.)
MIN_FALL = 2.0
# Distinct steps a half-window needs before its rate is compared with the other half's.
MIN_HALF_STEPS = 4


@dataclass(frozen=True, kw_only=True)
class CurveClaim(KindBase):
    """The base of the kinds fitted on a recorded curve (``quantity`` is a curve column;
    ``axis`` is ``"step"``). ``relative_floor``: a value at or below this fraction of its
    run's first recorded value is below float64's resolution of the quantity and not used.

    A kind fitted on curves sets :meth:`decaying` (whether it states a decay, which needs
    resolved steps to measure), :meth:`span` (the steps its fit may use), and
    :meth:`half_fit` (its fit on half the window, for the check that the rate has settled).
    """

    relative_floor: float | None = None
    floor: ClassVar[float | None] = None

    def decaying(self) -> bool:
        """Whether the claim states a decay (a contraction, a negative exponent)."""
        return True

    def span(self, points: pd.DataFrame) -> tuple[float, float]:
        """The steps the fit may use (inclusive); default: every recorded step."""
        return float(points["x"].min()), float(points["x"].max())

    def halves(self, lo: float, hi: float) -> float:
        """Where the window is cut in two for the settling check (default: the middle)."""
        return (lo + hi) / 2

    def half_fit(self, part: pd.DataFrame) -> Fit:
        """The kind's fit on part of its window (points as :meth:`curve_points`)."""
        raise NotImplementedError

    def limits(self, planned: pd.DataFrame) -> str | None:
        groups = planned.groupby(self.by) if self.by in planned else [(None, planned)]
        for value, part in groups:
            if len(part) < 2:
                where = f" at {self.by.split('.')[-1]} = {value}" if value is not None else ""
                return f"one run{where}: a law on curves needs at least 2 runs"
        return None

    def curve_points(self, rows: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
        """The claim's recorded curves, every step: columns x (step), y, seed, run."""
        import pandas as pd

        mine = curves[curves["config_hash"].isin(rows["config_hash"])]
        seeds = rows.set_index("config_hash")["seed"]
        return pd.DataFrame(
            {
                "x": mine["step"].astype(float),
                "y": mine[self.quantity].astype(float),
                "seed": mine["config_hash"].map(seeds).astype(float),
                "run": mine["config_hash"],
            }
        )

    def resolved(self, points: pd.DataFrame) -> pd.Series:
        """Rows of ``points`` that resolve the quantity: finite, positive, above ``floor``,
        and above ``relative_floor`` times the run's first recorded value."""
        import numpy as np

        y = points["y"]
        keep = np.isfinite(y) & (y > 0)
        if self.floor is not None:
            keep &= y > self.floor
        if self.relative_floor is not None:
            first = points.sort_values("x").groupby("run")["y"].transform("first")
            keep &= y > self.relative_floor * first.reindex(points.index).abs()
        return keep

    def absence(self, rows: pd.DataFrame, curves) -> str | None:
        """Not measured: the curve was not recorded (or not for these runs), or, for a claim of
        a decay, fewer than 3 distinct steps of its span resolve the quantity (the runs
        stopped, or the curve left float64's resolution or sits at its floor, before or early
        in the span), or (:meth:`flat`) it does not fall enough to hold a rate."""
        if curves is None or self.quantity not in curves:
            return f"the curve {self.quantity} was not recorded"
        if not curves["config_hash"].isin(rows["config_hash"]).any():
            return "no curves were recorded for its runs"
        points = self.curve_points(rows, curves)
        if not self.decaying() or points.empty:
            return None
        lo, hi = self.span(points)
        span = f"t = {lo:g}-{hi:g}"
        keep = self.resolved(points)
        usable = points[keep & points["x"].between(lo, hi)].sort_values("x")
        if usable["x"].nunique() < 3:
            lost = points[~keep].sort_values("x").groupby("run").head(1)
            if lost.empty:
                return f"no rate: fewer than 3 recorded steps in its window {span}"
            at, over = lost["x"].median(), f"median over {count(len(lost), 'run')}"
            if lost["y"].isna().all():
                what = f"its runs stopped (no value from t = {at:g}, {over})"
            else:
                where = "its floor" if self.floor is not None else "float64 resolution"
                what = f"it is at or below {where} from t = {at:g} ({over})"
            return f"no rate: {what}, leaving fewer than 3 resolved steps in its window {span}"
        return self.flat(usable, span)

    def flat(self, usable: pd.DataFrame, span: str) -> str | None:
        """Why the resolved points hold no rate (default: they always do)."""
        return None

    def judge(self, fit: Fit, theory: float, points, *, notes) -> tuple[str, str]:
        from sdyn.analysis import verdict

        label, reason = verdict.judge(self, fit, theory)
        if label in ("consistent", "violated"):
            changing = self.still_changing(points, fit, theory, notes)
            if changing:
                return "inconclusive", f"{changing}; the whole window: {reason}"
        return label, reason

    def window_of(self, points: pd.DataFrame, fit: Fit) -> tuple[float, float]:
        """The steps the fit used (default: the fit's own window)."""
        return fit.window

    def still_changing(
        self, points: pd.DataFrame, fit: Fit, theory: float, notes: list[str]
    ) -> str | None:
        """Whether the rate has settled over its window; the reason it has not, or None.

        The rate is fitted again on each half of the window. It is still changing when the
        halves' intervals are disjoint and, continued by one more half-window at the pace
        from the first half to the second, the late rate would cross the bound: then the
        verdict the whole window gives is not yet the asymptotic one. A drift away from the
        bound leaves the verdict standing. The window and both halves go to ``notes``.
        """
        from sdyn.analysis.verdict import format_interval

        if not fit.converged:
            return None
        lo, hi = self.window_of(points, fit)
        mid = self.halves(lo, hi)
        notes.append(f"window t = {lo:g}-{hi:g}")
        halves = []
        for part in (points[points["x"].between(lo, mid)], points[points["x"].between(mid, hi)]):
            if part["x"].nunique() < MIN_HALF_STEPS:
                return None
            half = self.half_fit(part)
            if not (half.converged and math.isfinite(half.ci_low) and math.isfinite(half.ci_high)):
                return None
            halves.append(half)
        early, late = halves
        text = (
            f"{format_interval(early.ci_low, early.ci_high, early.value)} on t = "
            f"{lo:g}-{mid:.3g}, {format_interval(late.ci_low, late.ci_high, late.value)} on "
            f"t = {mid:.3g}-{hi:g}"
        )
        notes.append(f"halves of the window: {text}")
        disjoint = early.ci_high < late.ci_low or late.ci_high < early.ci_low
        projected = 2 * late.value - early.value
        if disjoint and self._side(projected, theory) != self._side(fit.value, theory):
            return f"the rate is still changing: {text}"
        return None

    def _side(self, value: float, theory: float) -> int:
        """Where ``value`` lies against the bound: 0 where allowed, -1 below, +1 above."""
        low, high = -math.inf, math.inf
        if self.direction in ("<=", "=="):
            high = theory + self.tolerance
        if self.direction in (">=", "=="):
            low = theory - self.tolerance
        return -1 if value < low else (1 if value > high else 0)
