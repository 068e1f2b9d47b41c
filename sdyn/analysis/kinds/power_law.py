"""``power_law``: a summary quantity's exponent along a swept axis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.base import KindBase
from sdyn.analysis.kinds.shared import (
    local_exponent,
    planned_levels,
    shortfall,
    summary_points,
    synthetic_frame,
)

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit


@dataclass(frozen=True, kw_only=True)
class PowerLaw(KindBase):
    """``quantity ~ axis^alpha`` over the runs: the exponent ``alpha`` against ``theory``.

    * Points: one per run, ``(axis, quantity)`` from its summary.
    * Not measured: ``quantity`` not recorded, or ``axis`` not swept (one value).
    * Fit: OLS log-log slope, its 95% heteroscedasticity-consistent (HC3) t interval: the
      seeds' spread may differ between values (:func:`sdyn.analysis.fits.fit_power_law`).
    * Note: the exponent over the largest 3 values of ``axis`` alone
      (:func:`~sdyn.analysis.kinds.shared.local_exponent`), as for a threshold law.
    * Evidence: at least :attr:`LEVELS` distinct ``axis`` values with 2 seeds each; with less
      the verdict is inconclusive, and ``--plan`` says so before training.
    * Verdict: the interval against ``theory`` (an exact slope, every run alike to float64's
      resolution, is compared as it is); slack: the difference to the bound.
    * Plot: log-log, each run, the median per value, the fit with its band, the theory's slope.

    Example::

        PowerLaw(id="norm", statement="||w*|| grows like n^1/2", source="exact",
                 quantity="interpolant_norm", axis="experiment.n", theory=0.5,
                 direction="==", tolerance=0.05)
    """

    kind: ClassVar[str] = "power_law"
    value_name: ClassVar[str] = "exponent"
    RESOLUTION_FLOOR: ClassVar[float] = 1.0
    least_evidence: ClassVar[str] = "4 distinct x values with at least 2 seeds each"
    LEVELS: ClassVar[int] = 4

    def absence(self, rows: pd.DataFrame, curves) -> str | None:
        absent = super().absence(rows, curves)
        if absent is None and rows[self.axis].nunique() < 2:
            return f"{self.axis} is not swept (one value, {rows[self.axis].iloc[0]})"
        return absent

    def limits(self, planned: pd.DataFrame) -> str | None:
        return planned_levels(planned, self.axis, self.by, self.LEVELS)

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        from sdyn.analysis.fits import fit_power_law

        def fit(part):
            return fit_power_law(part["x"], part["y"], part["seed"])

        points = summary_points(rows, self.axis, self.quantity)
        local = local_exponent(points, self.axis, fit)
        if local:
            notes.append(local)
        return points, fit(points)

    def evidence(self, fit: Fit) -> str | None:
        return shortfall(fit.n_levels, self.LEVELS, "distinct x values with at least 2 seeds each")

    def draw(self, ax, results) -> None:
        from sdyn.analysis import plotting

        plotting.power_laws(ax, results)

    @classmethod
    def example(cls) -> tuple[PowerLaw, float, float]:
        claim = cls(
            id="power_law_example",
            statement="q grows at most like x",
            source="referee",
            quantity="q",
            axis="experiment.x",
            theory=1.0,
            direction="<=",
        )
        return claim, 0.5, 1.5

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        import numpy as np

        rows = [
            {self.axis: x, "seed": s, self.quantity: x**truth * np.exp(noise * rng.normal())}
            for x in np.geomspace(1.0, 1000.0, levels)
            for s in range(seeds)
        ]
        return synthetic_frame(rows), None
