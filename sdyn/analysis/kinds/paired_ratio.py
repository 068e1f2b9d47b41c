"""``paired_ratio``: one setting over a reference setting, paired run by run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sdyn.analysis.kinds.checkpoints import CheckpointClaim, steps_text
from sdyn.analysis.kinds.shared import synthetic_frame
from sdyn.api import require

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit


@dataclass(frozen=True, kw_only=True)
class PairedRatio(CheckpointClaim):
    """For each value of ``by`` other than ``reference``, the geometric-mean ratio of
    ``quantity`` to the reference's, paired on the column ``axis`` (e.g. ``seed``: the same
    data and init under two optimisers) and on ``matched``; labelled ``id[value]``.

    * ``quantity`` is a summary metric, or, with ``checkpoints``, a curve read at each of
      them (judged as :class:`~sdyn.analysis.kinds.checkpoints.CheckpointClaim` says).
    * Not measured: the reference is not in the sweep, only it ran, or no pair forms.
    * Fit: the geometric mean of the pairs' ratios, the Student t interval of the mean log
      ratio (:func:`sdyn.analysis.fits.fit_ratio`).
    * Evidence: at least 3 pairs (at a checkpoint).
    * Slack: a factor. Plot: the pairs with ``y = ratio x``, or one column per checkpoint.
    """

    kind: ClassVar[str] = "paired_ratio"
    value_name: ClassVar[str] = "ratio"
    least_evidence: ClassVar[str] = "3 pairs (at each checkpoint judged)"

    reference: Any = None  # the value of `by` the others are compared with
    matched: tuple[str, ...] = ()  # columns a pair's two runs must agree on

    def check(self) -> None:
        require(
            self.by is not None and self.reference is not None,
            f"{self.label}: give by (the compared column) and its reference value",
        )

    def columns(self) -> set[str]:
        return super().columns() | set(self.matched)

    def split(self, rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]] | str:
        reference = rows[rows[self.by] == self.reference]
        if reference.empty:
            return f"its reference {self.by}={self.reference} is not in this sweep"
        parts = []
        for value, part in rows.groupby(self.by, sort=True):
            if value != self.reference:
                part = part.copy()
                part.attrs["reference"] = reference
                parts.append((f"{self.id}[{value}]", part))
        return parts or f"only the reference {self.reference} ran"

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        import pandas as pd

        reference = rows.attrs["reference"]
        keys = [self.axis, *self.matched]
        if not self.checkpoints:
            from sdyn.analysis.fits import fit_ratio

            mine = rows[[*keys, self.quantity]].assign(run=rows.get("config_hash", rows.index))
            pairs = mine.merge(
                reference[[*keys, self.quantity]], on=keys, suffixes=("", "_reference")
            )
            table = pd.DataFrame(
                {
                    "x": pairs[f"{self.quantity}_reference"].astype(float),
                    "y": pairs[self.quantity].astype(float),
                    "seed": pairs[self.axis].astype(float),
                    "run": pairs["run"],
                }
            )
            return table, fit_ratio(table["y"], table["x"])
        mine = self.values_at(rows, curves, keys)
        theirs = self.values_at(reference, curves, keys).drop(columns="run")
        pairs = mine.merge(theirs, on=[*keys, "checkpoint"], suffixes=("", "_reference"))
        table = pd.DataFrame(
            {
                "checkpoint": pairs["checkpoint"].astype(float),
                "x": pairs["value_reference"].astype(float),
                "y": pairs["value"].astype(float),
                "seed": pairs[self.axis].astype(float),
                "run": pairs["run"],
            }
        )
        empty = f"no run pairs with a {self.reference} run (on {', '.join(keys)})"
        if mine.empty:  # no run reached a checkpoint: nothing to pair
            empty = (
                f"its checkpoints t = {steps_text(self.checkpoints)} lie beyond its runs' budget"
            )
        return self.measure_checkpoints(table, empty, theory=theory)

    def draw(self, ax, results) -> None:
        from sdyn.analysis import plotting

        if self.checkpoints:
            plotting.checkpoints(ax, results, "pairs")
        else:
            plotting.ratio_lines(ax, results)

    @classmethod
    def example(cls) -> tuple[PairedRatio, float, float]:
        claim = cls(
            id="paired_ratio_example",
            statement="b's q is at most a's",
            source="referee",
            quantity="q",
            axis="seed",
            by="experiment.opt",
            reference="a",
            theory=1.0,
            direction="<=",
        )
        return claim, 0.5, 2.0

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        """``seeds * levels`` pairs: the reference's q, and the compared run's q = truth times
        it, times the noise."""
        import numpy as np

        rows = []
        for s in range(seeds * levels):
            base = np.exp(rng.normal())
            rows.append({self.by: self.reference, "seed": s, self.quantity: base})
            rows.append(
                {
                    self.by: "b",
                    "seed": s,
                    self.quantity: base * truth * np.exp(noise * rng.normal()),
                }
            )
        return synthetic_frame(rows), None
