"""``curve_geometric_rate`` and ``per_run_geometric_rate``: a recorded curve's contraction per
step, pooled over the runs or run by run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.curves import MIN_FALL, CurveClaim
from sdyn.analysis.kinds.shared import shortfall, synthetic_curves, synthetic_frame
from sdyn.api import require

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit


def fall(points: pd.DataFrame, windows: dict | tuple) -> pd.Series:
    """Per run, how much its curve falls over a window: its first resolved value in the window
    over its last. ``windows``: one ``(start, end)`` for every run, or per run id (a run
    without one is left out)."""
    import pandas as pd

    falls = {}
    for run, curve in points.sort_values("x").groupby("run"):
        if isinstance(windows, dict) and run not in windows:
            continue  # a run its fit left out has no window
        lo, hi = windows[run] if isinstance(windows, dict) else windows
        inside = curve[curve["x"].between(lo, hi)]["y"]
        if len(inside) >= 2:
            falls[run] = float(inside.iloc[0] / inside.iloc[-1])
    return pd.Series(falls, dtype=float)


@dataclass(frozen=True, kw_only=True)
class GeometricRateClaim(CurveClaim):
    """The base of the two geometric-rate kinds: ``quantity ~ c rate^step``, the contraction
    per step (``floor``: values at or below are excluded, a plateau the decay stops at); not
    measured where the median run's resolved curve falls by less than
    :data:`~sdyn.analysis.kinds.curves.MIN_FALL` (flat: no contraction to measure); drawn on
    log-linear axes; the referee's synthetic curves."""

    value_name: ClassVar[str] = "contraction per step"

    floor: float | None = None

    def flat(self, usable: pd.DataFrame, span: str) -> str | None:
        falls = usable.groupby("run")["y"].agg(["first", "last"])
        median = float((falls["first"] / falls["last"]).median())
        if median < MIN_FALL:
            first = float(usable["x"].min())
            return (
                f"no contraction to measure: flat from t = {first:g}, it falls by a factor "
                f"{median:.3g} over {span} (median run; a rate needs {MIN_FALL:g})"
            )
        return None

    def draw(self, ax, results) -> None:
        from sdyn.analysis import plotting

        plotting.rates(ax, results)

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        """``seeds`` runs (``levels`` plays no part: the axis is the step) whose curve is
        ``truth^t`` over 300 steps, times the noise at every step."""
        import numpy as np

        steps = np.arange(301, dtype=float)
        runs = synthetic_frame([{"seed": s} for s in range(seeds)])
        values = {
            h: truth**steps * np.exp(noise * rng.normal(size=steps.size))
            for h in runs["config_hash"]
        }
        return runs, synthetic_curves(runs, steps, {"column": self.quantity, **values})


@dataclass(frozen=True, kw_only=True)
class CurveGeometricRate(GeometricRateClaim):
    """``quantity ~ c rate^step`` on the recorded curves, one window for all runs, chosen by
    the fit: the contraction per step against ``theory`` (``direction "<="`` and theory 1:
    "it contracts").

    * ``floor``: values at or below are excluded (a plateau the decay stops at);
      ``relative_floor``: float64's resolution, relative to each run's first value.
    * Not measured: fewer than 3 resolved steps, or a curve that falls by less than
      :data:`~sdyn.analysis.kinds.curves.MIN_FALL` over its resolved steps (flat: no
      contraction to measure).
    * Fit: log-linear over the window the fit picks, pooled over the runs, with a 95% interval
      over whole runs (cluster-robust t: :func:`sdyn.analysis.fits.fit_geometric_rate`).
    * Evidence: at least 2 runs; and the curve must fall by ``MIN_FALL`` over the fit's own
      window (median run), or the rate is inconclusive: a few steps over which the curve
      hardly moves do not measure a rate.
    * Verdict: the interval against ``theory`` (an exact rate, every run alike to float64's
      resolution, as it is), unless the rate still changes between the window's halves.
    * Plot: log-linear, the curves' points, the fitted rate with its band over its window.
    """

    kind: ClassVar[str] = "curve_geometric_rate"
    least_evidence: ClassVar[str] = "2 runs, whose curve falls by 2 over the fitted window"

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        points = self.curve_points(rows, curves)
        return points, self.half_fit(points)

    def half_fit(self, part: pd.DataFrame) -> Fit:
        from sdyn.analysis.fits import fit_geometric_rate

        return fit_geometric_rate(
            part["x"], part["y"], part["run"], floor=self.floor, min_fall=MIN_FALL
        )

    def evidence(self, fit: Fit) -> str | None:
        return shortfall(fit.n_groups, 2, "runs")

    def judge(self, fit: Fit, theory: float, points, *, notes) -> tuple[str, str]:
        if fit.converged:
            lo, hi = fit.window
            median = float(fall(points[self.resolved(points)], (lo, hi)).median())
            if not median >= MIN_FALL:
                return "inconclusive", (
                    f"the fit's window t = {lo:g}-{hi:g} holds no rate: the curve falls by a "
                    f"factor {median:.3g} over it (median run; a rate needs {MIN_FALL:g})"
                )
        return super().judge(fit, theory, points, notes=notes)

    @classmethod
    def example(cls) -> tuple[CurveGeometricRate, float, float]:
        claim = cls(
            id="curve_rate_example",
            statement="d contracts by 0.95 per step or faster",
            source="referee",
            quantity="d",
            axis="step",
            theory=0.95,
            direction="<=",
        )
        return claim, 0.8, 0.98


@dataclass(frozen=True, kw_only=True)
class PerRunGeometricRate(GeometricRateClaim):
    """The same law run by run: each run's curve gets its own window and rate (for runs whose
    transients differ, a saddle passed at different times); the value is the geometric mean
    of the runs' rates, with the Student t interval of the mean log rate.

    * ``floor``: values at or below are excluded; ``settled`` (a fraction of the last step,
      or the run table's column holding each run's, such as the experiment's own plateau
      fraction): a quantity measured against the run's own plateau has one only where the
      curve has settled: a run whose curve is above ``floor`` anywhere in the last
      ``settled`` of its steps has no plateau yet, and is left out (counted in the notes).
    * Each run's rate counts only where its curve falls by
      :data:`~sdyn.analysis.kinds.curves.MIN_FALL` over its own window; the others are left
      out and counted.
    * Evidence: at least 2 runs with a rate.
    * Plot: log-linear, each run's fitted line over its own window.
    """

    kind: ClassVar[str] = "per_run_geometric_rate"
    least_evidence: ClassVar[str] = "2 runs whose curve falls by 2 over its own window"

    settled: float | str | None = None

    def check(self) -> None:
        if self.settled is not None:
            if not isinstance(self.settled, str):
                require(0 < self.settled <= 1, f"{self.label}: settled must be in (0, 1]")
            require(self.floor is not None, f"{self.label}: settled needs a floor")

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        points = self.curve_points(rows, curves)
        if self.settled is not None:
            fraction, shown = self.settled, f"{self.settled}"
            if isinstance(fraction, str):  # each run's own, from its config
                fraction = points["run"].map(rows.set_index("config_hash")[fraction])
                shown = f"{'/'.join(f'{v:g}' for v in sorted(set(fraction)))} ({self.settled})"
            last = points.groupby("run")["x"].transform("max")
            tail = points[points["x"] >= (1 - fraction) * last]
            unsettled = tail.groupby("run")["y"].max() > self.floor
            gone = unsettled[unsettled].index
            if len(gone):
                notes.append(
                    f"{len(gone)} of {points['run'].nunique()} runs left out: no plateau yet "
                    f"(above {self.floor:g} in the last {shown} of their steps)"
                )
                points = points[~points["run"].isin(gone)]
        fit = self.half_fit(points)
        if fit.converged:
            windows = {g["group"]: tuple(g["window"]) for g in fit.details["groups"]}
            resolved = points[self.resolved(points)].assign(run=lambda p: p["run"].astype(str))
            falls = fall(resolved, windows)
            short = falls[falls < MIN_FALL].index
            if len(short):
                notes.append(
                    f"{len(short)} of {len(windows)} runs left out: their curve falls by less "
                    f"than {MIN_FALL:g} over their own window"
                )
                points = points[~points["run"].astype(str).isin(short)]
                fit = self.half_fit(points)
        return points, fit

    def half_fit(self, part: pd.DataFrame) -> Fit:
        from sdyn.analysis.fits import fit_geometric_rate

        return fit_geometric_rate(
            part["x"], part["y"], part["run"], per_group=True, floor=self.floor,
            min_fall=MIN_FALL,
        )  # fmt: skip

    def still_changing(self, points, fit, theory, notes) -> str | None:
        return None  # each run's own window is where its rate is steady

    def evidence(self, fit: Fit) -> str | None:
        return shortfall(fit.n_groups, 2, "runs with a rate")

    @classmethod
    def example(cls) -> tuple[PerRunGeometricRate, float, float]:
        claim = cls(
            id="per_run_rate_example",
            statement="d contracts by 0.95 per step or faster, run by run",
            source="referee",
            quantity="d",
            axis="step",
            theory=0.95,
            direction="<=",
        )
        return claim, 0.8, 0.98
