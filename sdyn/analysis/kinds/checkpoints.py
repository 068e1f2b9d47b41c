"""What the kinds judged at checkpoints share: a curve read at given steps, one interval per
checkpoint at the Bonferroni level, one verdict from all of them."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from sdyn.analysis.kinds.base import KindBase
from sdyn.analysis.kinds.shared import shortfall
from sdyn.text import count

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit


@dataclass(frozen=True, kw_only=True)
class CheckpointClaim(KindBase):
    """The base of kinds read on a curve at ``checkpoints`` (steps): the claim holds at each.

    The curve ``quantity`` is read at the last recorded step at or before each checkpoint
    (times ``normalise``'s ``(column, power)`` factor of its run); a value the run no longer
    resolves (its curve ended because the run stopped, or at or below ``relative_floor`` times
    the run's first recorded value: below float64 resolution) drops its run or pair at that
    checkpoint; a checkpoint left with fewer than :attr:`PAIRS` values is dropped, and said
    so; with none left, no value resolves ("not measured"). Each checkpoint gets an interval at
    the Bonferroni level (:func:`sdyn.analysis.verdict.joint_confidence`), so that together
    they hold with 95%: the claim is violated if one of them is, consistent if all are,
    inconclusive otherwise, and reports the interval that decides
    (:func:`sdyn.analysis.verdict.combine`).
    """

    PAIRS: ClassVar[int] = 3

    checkpoints: tuple[int, ...] = ()
    relative_floor: float | None = None
    normalise: tuple[str, float] | None = None

    def columns(self) -> set[str]:
        return super().columns() | {*(self.normalise or ())[:1]}

    def labels(self) -> tuple[str, str]:
        x, y = super().labels()
        return ("checkpoint" if self.checkpoints else x), y

    def absence(self, rows: pd.DataFrame, curves) -> str | None:
        if not self.checkpoints:
            return super().absence(rows, curves)
        if curves is None or self.quantity not in curves:
            return f"the curve {self.quantity} was not recorded"
        if not curves["config_hash"].isin(rows["config_hash"]).any():
            return "no curves were recorded for its runs"
        return None

    def limits(self, planned: pd.DataFrame) -> str | None:
        steps = planned.get("experiment.steps")
        if self.checkpoints and steps is not None and min(self.checkpoints) > steps.max():
            return (
                f"its checkpoints t = {steps_text(self.checkpoints)} lie beyond the planned budget "
                f"(steps = {steps.max():g})"
            )
        seeds = planned["seed"].nunique()
        if seeds < self.PAIRS:
            return f"{count(seeds, 'seed')}: a ratio needs {self.PAIRS} runs or pairs"
        return None

    def values_at(self, rows: pd.DataFrame, curves: pd.DataFrame, keys) -> pd.DataFrame:
        """Per run and checkpoint, the curve at the last recorded step at or before it: NaN
        where the run no longer resolves it; checkpoints beyond a run's last step are left out.
        Columns: ``keys`` (columns of the run), ``checkpoint``, ``value`` (times the
        ``normalise`` factor), ``run``."""
        import numpy as np
        import pandas as pd

        runs = rows.set_index("config_hash")
        factor = pd.Series(1.0, index=runs.index)
        if self.normalise:
            column, power = self.normalise
            factor = runs[column].astype(float) ** power
        mine = curves[curves["config_hash"].isin(runs.index)].sort_values("step")
        records = []
        for run, curve in mine.groupby("config_hash", sort=False):
            steps = curve["step"].to_numpy()
            values = curve[self.quantity].to_numpy(dtype=float)
            finite = values[np.isfinite(values)]
            floor = -math.inf
            if self.relative_floor is not None and finite.size:
                floor = self.relative_floor * abs(finite[0])
            for checkpoint in self.checkpoints:
                if steps[-1] < checkpoint:
                    continue
                value = values[np.searchsorted(steps, checkpoint, side="right") - 1]
                value = value if value > floor else math.nan  # NaN stays NaN
                own = [runs.at[run, column] for column in keys]
                records.append((*own, checkpoint, value * factor[run], run))
        return pd.DataFrame(records, columns=[*keys, "checkpoint", "value", "run"])

    def judged(self, table: pd.DataFrame, theory: float, empty: str) -> Fit:
        """Fit and judge ``table`` (columns checkpoint, x, y, seed) at each checkpoint; the
        deciding checkpoint's fit, ``details`` holding every checkpoint's (``checkpoints``),
        their level (``confidence``) and the combined ``verdict`` and ``reason``. Where no
        checkpoint has enough values: the best-filled checkpoint's fit without a verdict
        (judged inconclusive by the evidence rule), or, where no value resolves at all, a NaN
        fit with the reason."""
        from sdyn.analysis import verdict
        from sdyn.analysis.fits import fit_ratio
        from sdyn.analysis.fits.result import nan_fit

        if table.empty:
            return nan_fit("ratio", 0, 0, 0, empty)
        confidence = verdict.joint_confidence(len(self.checkpoints))
        judged, dropped, thin = [], [], []
        for checkpoint, group in table.groupby("checkpoint", sort=True):
            fit = fit_ratio(group["y"], group["x"], confidence=confidence)
            if self.evidence(fit) or not math.isfinite(fit.value):
                dropped.append(
                    f"t = {checkpoint:g} ({fit.n_points} resolved, {fit.n_excluded} of "
                    f"{len(group)} below float64's resolution)"
                )
                if math.isfinite(fit.value):
                    thin.append(fit)
                continue
            outcome = verdict.verdict(
                fit,
                theory=theory,
                direction=self.direction,
                tolerance=self.tolerance,
                name="exact" if verdict.exact(fit) else f"{100 * confidence:.3g}% CI",
            )
            judged.append((checkpoint, fit, outcome))
        unresolved = ", ".join(dropped)
        if not judged:
            reason = f"no checkpoint has {self.PAIRS} resolved values: {unresolved}"
            if not thin:  # nothing resolves at all: not measured
                return nan_fit("ratio", 0, 0, len(table), reason)
            # Values resolve, too few to judge: the best-filled checkpoint, inconclusive.
            best = max(thin, key=lambda f: f.n_points)
            return replace(best, details={"confidence": confidence}, message=reason)
        k, label, reason = verdict.combine(judged, theory, self.direction)
        summary = [
            {
                "checkpoint": t,
                "value": f.value,
                "ci_low": f.ci_low,
                "ci_high": f.ci_high,
                "points": f.n_points,
                "verdict": v,
            }
            for t, f, (v, _) in judged
        ]
        notes = [judged[k][1].message] if judged[k][1].message else []
        notes.append(
            f"at each checkpoint ({100 * confidence:.3g}% intervals, 95% jointly): "
            + "; ".join(
                f"t = {c['checkpoint']:g}: "
                f"{verdict.format_interval(c['ci_low'], c['ci_high'], c['value'])} {c['verdict']}"
                for c in summary
            )
        )
        if dropped:
            notes.append(f"dropped, too few resolved values: {unresolved}")
        details = {
            "checkpoints": summary,
            "confidence": confidence,
            "verdict": label,
            "reason": reason,
        }
        return replace(judged[k][1], details=details, message="; ".join(notes))

    def measure_checkpoints(self, table, empty, *, theory) -> tuple[pd.DataFrame, Fit]:
        """``(table, fit)`` for a table of checkpoint values (see :meth:`judged`)."""
        return table, self.judged(table, theory, empty)

    def evidence(self, fit: Fit) -> str | None:
        return shortfall(fit.n_points, self.PAIRS, "values")

    def judge(self, fit: Fit, theory: float, points, *, notes) -> tuple[str, str]:
        if "verdict" in fit.details:
            return fit.details["verdict"], fit.details["reason"]
        return super().judge(fit, theory, points, notes=notes)

    def slack(self, fit: Fit, theory: float):
        from sdyn.analysis import verdict

        return verdict.factor_slack(fit, theory, self.direction)


def steps_text(steps) -> str:
    """Checkpoints as a message lists them: ``100, 1000, 10000``."""
    return ", ".join(f"{t:g}" for t in steps)
