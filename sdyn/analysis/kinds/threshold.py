"""``threshold_power_law``: the exponent of an interval-censored threshold along an axis."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.base import KindBase
from sdyn.analysis.kinds.shared import (
    local_exponent,
    planned_levels,
    shortfall,
    synthetic_frame,
)
from sdyn.api import require

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit


@dataclass(frozen=True, kw_only=True)
class ThresholdPowerLaw(KindBase):
    """The threshold ``x*`` of ``threshold_axis`` from which ``quantity <= level`` holds for
    good, per value of ``axis`` and seed, and its law ``x* ~ axis^alpha``.

    * Fields: ``threshold_axis`` (required: the swept axis the threshold lies on, e.g.
      ``experiment.m``), ``level`` (success is ``quantity <= level``; NaN fails), ``normalise``
      (``(column, power)``: each threshold times that column of its widest run, e.g.
      ``("lambda_min", 2.0)`` for ``m* lambda^2``).
    * Points: per ``axis`` value and seed, the interval between the last failure and the
      first success above it, left- or right-censored at the swept range's ends.
    * Fit: the interval-censored log-normal model (:func:`sdyn.analysis.fits.fit_threshold`),
      profile-likelihood 95% interval. Where every threshold fits one line within its grid
      cell, sigma is not identified: the interval then holds the slopes the grid allows (its
      message states them), reported as a **bracket**, not a 95% CI.
    * Evidence: at least :attr:`LEVELS` distinct ``axis`` values with 2 seeds each.
    * Note: the exponent over the largest 3 values of ``axis`` alone
      (:func:`~sdyn.analysis.kinds.shared.local_exponent`).
    * Assumptions are checked on each seed's widest run (where the theorem's width and
      lambda are read) and on the run whose failure bounds its threshold from below (the
      threshold is read there: a failure outside the theorem's setting says nothing of it).
    * Plot: each seed's interval (open triangles where censored), the estimate per value, the
      fit with its band, the theory's slope.
    """

    kind: ClassVar[str] = "threshold_power_law"
    value_name: ClassVar[str] = "exponent"
    RESOLUTION_FLOOR: ClassVar[float] = 1.0
    least_evidence: ClassVar[str] = "4 distinct x values with at least 2 seeds each"
    LEVELS: ClassVar[int] = 4

    threshold_axis: str | None = None
    level: float = 1.0
    normalise: tuple[str, float] | None = None

    def check(self) -> None:
        require(bool(self.threshold_axis), f"{self.label}: give threshold_axis (e.g. experiment.m)")

    def own_columns(self) -> set[str]:
        return super().own_columns() | {self.threshold_axis}

    def columns(self) -> set[str]:
        return super().columns() | {self.threshold_axis, *(self.normalise or ())[:1]}

    def absence(self, rows: pd.DataFrame, curves) -> str | None:
        absent = super().absence(rows, curves)
        if absent is None and rows[self.axis].nunique() < 2:
            return f"{self.axis} is not swept (one value, {rows[self.axis].iloc[0]})"
        return absent

    def limits(self, planned: pd.DataFrame) -> str | None:
        return planned_levels(planned, self.axis, self.by, self.LEVELS)

    def setting_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        import pandas as pd

        if self.quantity not in rows:  # planned runs: no threshold is known yet
            return self.widest(rows)
        failures = []
        for _, group, cells in self.intervals(rows):
            last = set(zip(cells["group"], cells["low"], strict=True))
            at = zip(group["seed"], group[self.threshold_axis].astype(float), strict=True)
            failures.append(group[[key in last for key in at]])
        chosen = pd.concat([self.widest(rows), *failures])
        return chosen[~chosen.index.duplicated()]

    def intervals(self, rows: pd.DataFrame):
        """Per value of ``axis``: ``(value, its rows, threshold_intervals of its seeds)``."""
        import numpy as np

        from sdyn.analysis.fits import threshold_intervals

        for x_value, group in rows.groupby(self.axis):
            value = group[self.quantity].astype(float).replace([np.inf, -np.inf], np.nan)
            cells = threshold_intervals(
                group[self.threshold_axis].astype(float), value, self.level, group["seed"]
            )
            yield x_value, group, cells

    def widest(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Per value of ``axis`` and seed, the run at the largest ``threshold_axis``."""
        order = rows.sort_values(self.threshold_axis)
        return order.groupby([self.axis, "seed"], sort=False).tail(1)

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        from sdyn.analysis.fits import fit_threshold

        table = self.thresholds(rows, notes)
        local = local_exponent(
            table, self.axis, lambda top: fit_threshold(top["low"], top["high"], top["x"])
        )
        if local:
            notes.append(local)
        return table, fit_threshold(table["low"], table["high"], table["x"])

    def thresholds(self, rows: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
        """Per axis value and seed, the interval in which the threshold lies (times the
        ``normalise`` factor), with a plotting position ``y``: the interval's geometric middle,
        or its finite end when censored. Columns x, y, seed, run (the seed's widest run),
        low, high, censored, non_monotone."""
        import numpy as np
        import pandas as pd

        parts = []
        for x_value, group, cells in self.intervals(rows):
            widest = self.widest(group).set_index("seed")
            if self.normalise:
                column, power = self.normalise
                factor = widest[column].astype(float).reindex(cells["group"]).to_numpy() ** power
                cells = cells.assign(low=cells["low"] * factor, high=cells["high"] * factor)
            run = widest["config_hash"] if "config_hash" in widest else widest.index.to_series()
            cells = cells.assign(x=float(x_value), run=run.reindex(cells["group"]).to_numpy())
            parts.append(cells)
        table = pd.concat(parts, ignore_index=True).rename(columns={"group": "seed"})
        noisy = int(table["non_monotone"].sum())
        if noisy:
            notes.append(
                f"{noisy} seed(s) succeed at some {self.threshold_axis} below their last failure "
                "(non-monotone outcome): the threshold is taken above the last failure"
            )
        middle = np.sqrt(table["low"] * table["high"])
        y = np.where(table["censored"] == "left", table["high"], middle)
        y = np.where(table["censored"] == "right", table["low"], y)
        table = table.assign(y=y, seed=table["seed"].astype(float))
        return table[["x", "y", "seed", "run", "low", "high", "censored", "non_monotone"]]

    def evidence(self, fit: Fit) -> str | None:
        return shortfall(fit.n_levels, self.LEVELS, "distinct x values with at least 2 seeds each")

    def draw(self, ax, results) -> None:
        import numpy as np

        from sdyn.analysis import plotting

        anchor = None
        for k, (name, result) in enumerate(results):
            points = plotting.positive(result.points)
            if points.empty:
                continue
            _intervals(ax, points, result.fit, plotting.colour(2 * k), plotting.tag(name))
            if result.fit.converged:
                xs = np.geomspace(points["x"].min(), points["x"].max(), 50)
                drawn = plotting.law(
                    ax, self, result.fit, xs, k, plotting.tag(name), geometric=False
                )
                anchor = anchor or drawn  # the theory's line through the first fit
        if anchor is not None:
            plotting.theory_slope(ax, self, anchor)
        ax.set_xscale("log")
        ax.set_yscale("log")

    def details(self, result) -> str:
        """The thresholds as a markdown table: per axis value and seed, the last failure, the
        first success above it, censoring and a non-monotone outcome."""
        import pandas as pd

        pts = result.points.sort_values(["x", "seed"])
        table = pd.DataFrame(
            {
                self.axis: pts["x"].map("{:g}".format),
                "seed": pts["seed"].astype(int),
                "above (last failure)": pts["low"].map("{:g}".format),
                "at or below (first success)": pts["high"].map("{:g}".format),
                "censored": pts["censored"],
                "non-monotone": pts["non_monotone"].map({True: "yes", False: ""}),
            }
        )
        return table.to_markdown(index=False)

    @classmethod
    def example(cls) -> tuple[ThresholdPowerLaw, float, float]:
        claim = cls(
            id="threshold_example",
            statement="m* grows at most like n^2",
            source="referee",
            quantity="margin",
            axis="experiment.n",
            threshold_axis="experiment.m",
            theory=2.0,
            direction="<=",
        )
        return claim, 1.0, 3.0

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        """Per n and seed a threshold ``m* = 4 n^truth`` (times the noise); a run at width m
        has ``margin = m* / m``, at or below ``level`` 1 from m* on; widths a factor 2 apart."""
        import numpy as np

        widths = 2.0 ** np.arange(1, 21)
        rows = []
        for n in np.geomspace(4.0, 32.0, levels):
            for s in range(seeds):
                threshold = 4 * n**truth * np.exp(noise * rng.normal())
                rows += [
                    {self.axis: n, self.threshold_axis: m, "seed": s, self.quantity: threshold / m}
                    for m in widths
                ]
        return synthetic_frame(rows), None


def _intervals(ax, pts: pd.DataFrame, fit, color: str, tag: str) -> None:
    """Each seed's threshold interval (a bar between two swept values; an open triangle at the
    swept range's end where it is censored), and the model's estimate per x."""
    import numpy as np

    # Spread the seeds of one x a little, so that equal intervals stay visible.
    rank = pts.groupby("x").cumcount().to_numpy()
    width = pts.groupby("x")["x"].transform("size").to_numpy()
    x = pts["x"].to_numpy() * np.exp(0.025 * (rank - (width - 1) / 2))
    inside = (pts["censored"] == "").to_numpy()
    ax.vlines(
        x[inside],
        pts["low"][inside],
        pts["high"][inside],
        color=color,
        alpha=0.5,
        label=f"{tag}threshold interval (per seed)",
    )
    for side, marker, where in (("left", "v", "high"), ("right", "^", "low")):
        mine = (pts["censored"] == side).to_numpy()
        if mine.any():
            ax.scatter(
                x[mine],
                pts[where][mine],
                marker=marker,
                facecolors="none",
                edgecolors=color,
                s=30,
                label=f"{tag}{side}-censored ({mine.sum()})",
            )
    per_axis = fit.details.get("per_axis", [])
    estimates = [(e["x"], e["estimate"]) for e in per_axis if e["estimate"] is not None]
    if estimates:
        ex, ey = zip(*estimates, strict=True)
        ax.plot(ex, ey, "s", color=color, ms=6, label=f"{tag}estimate per x (censored model)")
