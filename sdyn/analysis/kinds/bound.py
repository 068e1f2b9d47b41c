"""``bound``: a theorem's bound checked run by run; the share of runs above it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.base import KindBase
from sdyn.analysis.kinds.shared import summary_points, synthetic_frame
from sdyn.api import require
from sdyn.text import count

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit
    from sdyn.analysis.verdict import Slack

# A per-run ratio within this (relative) of 1 is the bound attained up to float64 rounding: at
# the bound, not above it. A ratio is two computed quantities divided, each carrying rounding
# of order (operations x 1e-16); 1e-12 leaves room for thousands of steps of it.
ROUNDING = 1e-12
# A bound whose every measured/bound ratio lies below this has no power: one 10^6 times too
# loose would have passed as well, so the check could not have failed.
POWER_LIMIT = 1e-6
# The level of the exceedance probability's two-sided Clopper-Pearson interval.
ALPHA = 0.05
# What a per-run bound's slack is measured from: each run's bound, not the share delta.
EACH_RUN = "each run's bound (measured/bound 1)"


def runs_needed(delta: float) -> int:
    """The fewest runs, none above the bound, whose exceedance probability's 95% interval
    can lie at or below ``delta`` (the Clopper-Pearson upper end for 0 of N is
    ``1 - (alpha/2)^(1/N)``): 36 for delta = 0.1; 1 for a sure bound (delta = 0)."""
    if delta <= 0:
        return 1
    return math.ceil(math.log(ALPHA / 2) / math.log1p(-delta))


@dataclass(frozen=True, kw_only=True)
class Bound(KindBase):
    """A bound the theorem gives each run: ``quantity`` is, per run, the measured value over
    the bound for that run (dimensionless, <= 1 where it holds).

    * ``theory`` is the theorem's failure probability delta ("with probability at least
      1 - delta"): the share of runs above their bound must be at most delta. ``theory = 0``
      is a sure bound (it holds in every run): one run above it violates it.
    * Resolution: a ratio within ``rounding`` (relative, default :data:`ROUNDING`) of 1 is
      the bound attained up to float64 rounding, at the bound, not above it.
    * Fit: the share of runs above, with its exact Clopper-Pearson 95% interval
      (:func:`sdyn.analysis.fits.fit_exceedance`). It counts the runs as independent trials:
      each run must draw its own sample of what delta is over (the NTK experiment's runs each
      draw their own initialisation); runs sharing a draw would make the interval too narrow.
    * Evidence: a probability bound can read consistent only from :func:`runs_needed` runs
      with none above (36 for delta = 0.1); ``--plan`` names a plan with fewer, and the
      reason says so. It can read violated from fewer.
    * Verdict: a sure bound is consistent if no run is above it, violated otherwise; a
      probability bound by the interval against delta. Either is "consistent (vacuous)" where
      every ratio is below :data:`POWER_LIMIT`: the check could not have failed.
    * Slack: decades between the largest ratio and 1.
    * Plot: each run's ratio against ``axis`` and the bound at 1, on log axes.

    Example::

        Bound(id="rate", statement="||w_t - w*|| <= (1 - eta lambda)^t ||w*||", source="...",
              quantity="bound_ratio", axis="experiment.n", theory=0.0, direction="<=")
    """

    kind: ClassVar[str] = "bound"
    value_name: ClassVar[str] = "exceedance probability"
    least_evidence: ClassVar[str] = (
        "to read consistent, a bound holding with probability 1 - delta needs "
        "log(0.025) / log(1 - delta) runs with none above it (36 for delta = 0.1), a sure "
        "bound one run"
    )

    rounding: float = ROUNDING

    def check(self) -> None:
        require(
            self.direction == "<=",
            f"{self.label}: a bound's share of runs above it is bounded from above: direction '<='",
        )
        require(
            0 <= self.theory < 1,
            f"{self.label}: theory is the failure probability "
            f"delta, in [0, 1) (0: a sure bound); got {self.theory}",
        )
        require(self.rounding >= 0, f"{self.label}: rounding must be >= 0")

    def limits(self, planned: pd.DataFrame) -> str | None:
        delta = self.theory
        if self.theory_column in planned and planned[self.theory_column].nunique() == 1:
            delta = float(planned[self.theory_column].iloc[0])
        need = runs_needed(delta)
        if len(planned) < need:
            return (
                f"{len(planned)} planned runs can never place the share above the bound at or "
                f"below delta = {delta:g} (95%): that needs {need} runs with none above"
            )
        return None

    def measure(self, rows, curves, *, theory, notes) -> tuple[pd.DataFrame, Fit]:
        from sdyn.analysis.fits import fit_exceedance

        points = summary_points(rows, self.axis, self.quantity)
        return points, fit_exceedance(points["y"], rounding=self.rounding)

    def judge(self, fit: Fit, theory: float, points, *, notes) -> tuple[str, str]:
        from sdyn.analysis import verdict

        k, n, largest = fit.details["exceeding"], fit.n_points, fit.details["max_ratio"]
        counted = f"{k} of {n} runs exceed the bound (largest ratio {largest:.3g})"
        if theory == 0:
            if k:
                return "violated", f"{counted}: a sure bound must hold in every run"
            label, reason = "consistent", f"{counted}: the sure bound holds in every run"
        else:
            label, reason = verdict.verdict(
                fit, theory=theory, direction=self.direction, tolerance=self.tolerance
            )
            reason = f"{counted}; the exceedance probability's {reason}"
            need = runs_needed(theory)
            if label == "inconclusive" and k == 0 and n < need:
                runs = count(n, "run")
                reason += f"; {runs} can never show it (that needs {need} with none above)"
                if largest < POWER_LIMIT:
                    reason += f"; nor has the check power: every ratio is below {POWER_LIMIT:g}"
        if label == "consistent" and largest < POWER_LIMIT:
            label = verdict.VACUOUS
            reason = f"no power: every measured/bound ratio is below {POWER_LIMIT:g}; {reason}"
        return label, reason

    def interval_name(self, fit: Fit) -> str:
        """A sure bound's verdict reads a count of runs ("count"), a probability bound's the
        Clopper-Pearson 95% CI."""
        return "count" if self.theory == 0 and self.theory_column is None else "95% CI"

    def slack(self, fit: Fit, theory: float) -> Slack | None:
        from sdyn.analysis.verdict import Slack

        largest = fit.details.get("max_ratio", math.nan)
        if not largest > 0:
            return None
        if 1 < largest <= 1 + self.rounding:
            text = f"0 (at the bound: largest ratio 1 + {largest - 1:.2g}, float64 rounding)"
            return Slack(0.0, math.nan, math.nan, "decades", text, EACH_RUN)
        decades = -math.log10(largest)
        text = f"10^{decades:.3g} (largest ratio {largest:.3g})"
        return Slack(decades, math.nan, math.nan, "decades", text, EACH_RUN)

    def draw(self, ax, results) -> None:
        from sdyn.analysis import plotting

        for k, (name, result) in enumerate(results):
            points = plotting.positive(result.points)
            if not points.empty:
                plotting.runs(ax, points, k, plotting.tag(name), "runs: measured / bound")
        ax.axhline(1.0, ls="--", color=plotting.THEORY, label="the bound (ratio 1)")
        ax.set_xscale("log")
        ax.set_yscale("log")

    @classmethod
    def example(cls) -> tuple[Bound, float, float]:
        claim = cls(
            id="bound_example",
            statement="q <= its bound with probability 0.9",
            source="referee",
            quantity="ratio",
            axis="experiment.x",
            theory=0.1,
            direction="<=",
        )
        return claim, 0.0, 0.5

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        """Runs whose measured/bound ratio is 2 (above) with probability ``truth``, each on its
        own draw, 0.5 (below) otherwise, times the noise."""
        import numpy as np

        n = seeds * levels
        above = rng.random(n) < truth
        xs = np.repeat(np.geomspace(1.0, 100.0, levels), seeds)
        rows = [
            {
                self.axis: xs[k],
                "seed": k % seeds,
                self.quantity: (2.0 if above[k] else 0.5) * np.exp(noise * rng.normal()),
            }
            for k in range(n)
        ]
        return synthetic_frame(rows), None
