"""``geometric_mean``: a curve's value at checkpoints, over the runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.checkpoints import CheckpointClaim, steps_text
from sdyn.analysis.kinds.shared import synthetic_curves, synthetic_frame
from sdyn.api import require

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit


@dataclass(frozen=True, kw_only=True)
class GeometricMean(CheckpointClaim):
    """The geometric mean over the runs of the curve ``quantity`` at each of ``checkpoints``
    (required), times ``normalise``'s factor (e.g. ``("l_irr", -1.0)``: the loss over the
    optimal loss), against ``theory``; judged at every checkpoint as the base class says.

    * Evidence: at least 3 resolved runs at a checkpoint.
    * Slack: a factor (the bound over the value, or the value over the bound).
    * Plot: one column per checkpoint, each run's value, the interval there and the theory.

    Example::

        GeometricMean(id="near_optimal", statement="L(t)/L* <= 1.1 from t = 500 on",
                      source="Fig. 2", quantity="loss", axis="seed",
                      normalise=("l_irr", -1.0), checkpoints=(500, 1000, 2000),
                      theory=1.1, direction="<=")
    """

    kind: ClassVar[str] = "geometric_mean"
    value_name: ClassVar[str] = "geometric mean"
    least_evidence: ClassVar[str] = "3 resolved runs at each checkpoint judged"

    def check(self) -> None:
        require(bool(self.checkpoints), f"{self.label}: read at checkpoints; give some")

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        import pandas as pd

        values = self.values_at(rows, curves, [self.axis])
        table = pd.DataFrame(
            {
                "checkpoint": values["checkpoint"].astype(float),
                "x": 1.0,
                "y": values["value"].astype(float),
                "seed": values[self.axis].astype(float),
                "run": values["run"],
            }
        )
        empty = f"its checkpoints t = {steps_text(self.checkpoints)} lie beyond its runs' budget"
        return self.measure_checkpoints(table, empty, theory=theory)

    def draw(self, ax, results) -> None:
        from sdyn.analysis import plotting

        plotting.checkpoints(ax, results, "runs")

    @classmethod
    def example(cls) -> tuple[GeometricMean, float, float]:
        claim = cls(
            id="geometric_mean_example",
            statement="q is at most 2 at t = 10 and 100",
            source="referee",
            quantity="q",
            axis="seed",
            checkpoints=(10, 100),
            theory=2.0,
            direction="<=",
        )
        return claim, 1.0, 4.0

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        """``seeds * levels`` runs whose curve is ``truth`` (times the noise) at t = 0, 10,
        100."""
        import numpy as np

        steps = np.array([0.0, 10.0, 100.0])
        runs = synthetic_frame([{self.axis: s} for s in range(seeds * levels)])
        runs["seed"] = runs[self.axis]
        values = {h: truth * np.exp(noise * rng.normal(size=3)) for h in runs["config_hash"]}
        return runs, synthetic_curves(runs, steps, {"column": self.quantity, **values})
