"""``column_ratio``: a quantity over another column of the same run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.base import KindBase
from sdyn.analysis.kinds.shared import shortfall, synthetic_frame
from sdyn.api import require

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit


@dataclass(frozen=True, kw_only=True)
class ColumnRatio(KindBase):
    """Per run, ``quantity`` over the column ``reference`` of the same run (e.g. a learned
    model's error over a baseline's on the same draws); the value is the geometric mean of the
    ratios over the runs, with the Student t interval of the mean log ratio.

    * Not measured: ``quantity`` or ``reference`` not recorded.
    * Evidence: at least 3 runs.
    * Slack: a factor. Plot: each run's ratio (labelled ``quantity_label / reference_label``)
      against the claim's ``axis``, the fitted ratio with its interval, the theory's ratio.
    """

    kind: ClassVar[str] = "column_ratio"
    value_name: ClassVar[str] = "ratio"
    least_evidence: ClassVar[str] = "3 runs"
    RUNS: ClassVar[int] = 3

    reference: str | None = None  # the column the quantity is divided by
    reference_label: str = ""  # what that column is, for the plot's y label

    def check(self) -> None:
        require(bool(self.reference), f"{self.label}: give reference (the column to divide by)")

    def columns(self) -> set[str]:
        return super().columns() | {self.reference}

    def labels(self) -> tuple[str, str]:
        x, y = super().labels()
        return x, f"{y} / {self.reference_label or self.reference}"

    def absence(self, rows: pd.DataFrame, curves) -> str | None:
        for column in (self.quantity, self.reference):
            if column not in rows or rows[column].isna().all():
                return f"{column} was not recorded by its runs"
        return None

    def limits(self, planned: pd.DataFrame) -> str | None:
        groups = planned.groupby(self.by) if self.by in planned else [(None, planned)]
        for value, part in groups:
            if len(part) < self.RUNS:
                where = f" at {self.by.split('.')[-1]} = {value}" if value is not None else ""
                return f"{len(part)} planned runs{where}: a ratio needs {self.RUNS}"
        return None

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        import pandas as pd

        from sdyn.analysis.fits import fit_ratio

        y, x = rows[self.quantity].astype(float), rows[self.reference].astype(float)
        table = pd.DataFrame(
            {
                "x": rows[self.axis].astype(float),
                "y": y / x,
                "seed": rows["seed"].astype(float),
                "run": rows.get("config_hash", rows.index),
            }
        )
        return table, fit_ratio(y, x)

    def evidence(self, fit: Fit) -> str | None:
        return shortfall(fit.n_points, self.RUNS, "runs")

    def slack(self, fit: Fit, theory: float):
        from sdyn.analysis import verdict

        return verdict.factor_slack(fit, theory, self.direction)

    def draw(self, ax, results) -> None:
        import numpy as np

        from sdyn.analysis import plotting

        xs = []
        for k, (name, result) in enumerate(results):
            points = plotting.positive(result.points)
            if points.empty:
                continue
            plotting.runs(ax, points, k, plotting.tag(name), "runs: ratio (per seed)")
            xs += points["x"].tolist()
            fit = result.fit
            if fit.converged and np.isfinite(fit.ci_low) and np.isfinite(fit.ci_high):
                ax.axhline(
                    fit.value,
                    color=plotting.colour(2 * k + 1),
                    label=f"{plotting.tag(name)}fit: ratio {fit.value:.4g}",
                )
                ax.axhspan(
                    fit.ci_low,
                    fit.ci_high,
                    color=plotting.colour(2 * k + 1),
                    alpha=0.2,
                    label=f"{plotting.tag(name)}{plotting.interval_text(self, fit)}",
                )
        ax.axhline(
            self.theory,
            ls="--",
            color=plotting.THEORY,
            label=f"theory: ratio {self.direction} {self.theory:g}",
        )
        if xs and max(xs) > 10 * min(xs):
            ax.set_xscale("log")
        ax.set_yscale("log")

    @classmethod
    def example(cls) -> tuple[ColumnRatio, float, float]:
        claim = cls(
            id="column_ratio_example",
            statement="q is at most r",
            source="referee",
            quantity="q",
            reference="r",
            axis="experiment.x",
            theory=1.0,
            direction="<=",
        )
        return claim, 0.5, 2.0

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        """Runs with a reference column r and q = truth times r, times the noise."""
        import numpy as np

        rows = []
        for x in np.geomspace(1.0, 100.0, levels):
            for s in range(seeds):
                r = np.exp(rng.normal())
                rows.append(
                    {
                        self.axis: x,
                        "seed": s,
                        self.reference: r,
                        self.quantity: r * truth * np.exp(noise * rng.normal()),
                    }
                )
        return synthetic_frame(rows), None
