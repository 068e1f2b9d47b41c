"""``curve_power_law``: a recorded curve's exponent in the step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.curves import CurveClaim
from sdyn.analysis.kinds.shared import shortfall, synthetic_curves, synthetic_frame
from sdyn.api import require

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit


@dataclass(frozen=True, kw_only=True)
class CurvePowerLaw(CurveClaim):
    """``quantity ~ step^alpha`` on the recorded curves of the runs, pooled, over ``window``
    (fractions of the last recorded step, from step 1): the exponent against ``theory``.

    * Not measured: the curve was not recorded; for a decay (``theory < 0``), fewer than 3
      steps of the window resolve it (``relative_floor``: float64's resolution of the
      quantity, relative to the run's first value).
    * Fit: log-log slope over the window, pooled over the runs; its 95% interval is over the
      runs, whole curves (the cluster-robust t interval): the steps of one curve are not
      independent replicates.
    * Evidence: at least :attr:`LEVELS` distinct steps with 2 runs each.
    * Verdict: the interval against ``theory``, unless the rate is still changing: fitted
      again on the two halves of the window (in log t), disjoint halves whose trend would
      cross the bound make it inconclusive.
    * Plot: log-log, the curves' points, the fit with its band, the theory's slope.
    """

    kind: ClassVar[str] = "curve_power_law"
    value_name: ClassVar[str] = "exponent"
    RESOLUTION_FLOOR: ClassVar[float] = 1.0
    least_evidence: ClassVar[str] = "4 distinct steps with at least 2 runs each"
    LEVELS: ClassVar[int] = 4

    window: tuple[float, float] = (0.0, 1.0)

    def check(self) -> None:
        lo, hi = self.window
        require(0 <= lo < hi <= 1, f"{self.label}: window must be fractions 0 <= lo < hi <= 1")

    def decaying(self) -> bool:
        return self.theory < 0

    def span(self, points: pd.DataFrame) -> tuple[float, float]:
        last = float(points["x"].max())
        lo, hi = self.window
        return max(lo * last, 1.0), hi * last

    def halves(self, lo: float, hi: float) -> float:
        return math.sqrt(lo * hi)

    def window_of(self, points: pd.DataFrame, fit: Fit) -> tuple[float, float]:
        return float(points["x"].min()), float(points["x"].max())

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        points = self.curve_points(rows, curves)
        if not points.empty:
            points = points[points["x"].between(*self.span(points))]
        return points, self.half_fit(points)

    def half_fit(self, part: pd.DataFrame) -> Fit:
        from sdyn.analysis.fits import fit_power_law

        return fit_power_law(part["x"], part["y"], part["run"], clustered=True)

    def evidence(self, fit: Fit) -> str | None:
        return shortfall(fit.n_levels, self.LEVELS, "distinct steps with at least 2 runs each")

    def draw(self, ax, results) -> None:
        from sdyn.analysis import plotting

        plotting.power_laws(ax, results)

    @classmethod
    def example(cls) -> tuple[CurvePowerLaw, float, float]:
        claim = cls(
            id="curve_power_law_example",
            statement="d decays at least like t^-1/2",
            source="referee",
            quantity="d",
            axis="step",
            theory=-0.5,
            direction="<=",
            window=(0.1, 1.0),
        )
        return claim, -1.0, 0.0

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        """``seeds`` runs (``levels`` plays no part: the axis is the step) whose curves follow
        ``t^alpha`` with each run's own exponent ``alpha`` (mean ``truth``, spread ``noise``),
        times the noise at every recorded step: the steps of one curve are not replicates."""
        import numpy as np

        steps = np.unique(np.round(np.geomspace(1, 1001, 60)) - 1)
        runs = synthetic_frame([{"seed": s} for s in range(seeds)])
        t = np.maximum(steps, 1.0)
        values = {
            h: t ** (truth + noise * rng.normal()) * np.exp(noise * rng.normal(size=steps.size))
            for h in runs["config_hash"]
        }
        return runs, synthetic_curves(runs, steps, {"column": self.quantity, **values})
