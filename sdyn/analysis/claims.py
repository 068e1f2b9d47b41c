"""Turn an experiment's ``CLAIMS`` into fits and verdicts on a runs table loaded from MLflow."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sdyn.analysis.fits import Fit, fit_power_law, threshold_crossings
from sdyn.analysis.verdict import verdict
from sdyn.experiments.common import Claim

# Statuses whose summary metrics are measurements; "failed" runs have none.
MEASURED = ("converged", "budget_exhausted", "diverged")


@dataclass
class ClaimResult:
    """A claim with its fit, its verdict and the points the fit used (for plots and tables)."""

    claim: Claim
    fit: Fit
    verdict: str
    reason: str
    points: pd.DataFrame  # columns x, y, seed (the data of the final power-law fit)
    n_runs: int  # runs that entered the claim
    n_failed: int  # runs of the claim's selection excluded as failed
    run_ids: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """JSON-ready summary: claim, value, CI, points, runs, theory, verdict, MLflow run ids."""
        c = self.claim
        return {
            "claim": c.id,
            "statement": c.statement,
            "source": c.source,
            "kind": c.kind,
            "quantity": c.quantity,
            "axis": c.axis,
            "value": self.fit.value,
            "ci_low": self.fit.ci_low,
            "ci_high": self.fit.ci_high,
            "theory": c.theory,
            "direction": c.direction,
            "verdict": self.verdict,
            "reason": self.reason,
            "points": self.fit.n_points,
            "runs": self.n_runs,
            "failed_runs": self.n_failed,
            "fit": self.fit.as_dict(),
            "notes": self.notes + ([c.note] if c.note else []),
            "mlflow_run_ids": self.run_ids,
        }


def _select(claim: Claim, runs: pd.DataFrame) -> pd.DataFrame:
    rows = runs
    for column, value in claim.where:
        rows = rows[rows[column] == value] if column in rows else rows.iloc[:0]
    if claim.at_middle and not rows.empty:
        values = sorted(rows[claim.at_middle].unique())
        rows = rows[rows[claim.at_middle] == values[len(values) // 2]]
    return rows


def evaluate(claim: Claim, runs: pd.DataFrame, *, seed: int = 0) -> ClaimResult:
    """Fit one claim on a :func:`sdyn.analysis.load.load_sweep` table and give its verdict.

    Failed runs are excluded and counted; diverged runs count as not meeting a threshold.
    Raises ValueError for a claim of unknown kind.
    """
    measured = runs[runs["status"].isin(MEASURED)] if "status" in runs else runs
    n_failed = len(runs) - len(measured)
    rows = _select(claim, measured)
    notes = []
    if claim.kind == "threshold_power_law":
        points = []
        for x_value, group in rows.groupby(claim.axis):
            value = group[claim.quantity].astype(float).replace([np.inf, -np.inf], np.nan)
            cross = threshold_crossings(
                group[claim.threshold_axis].astype(float), value, claim.level, group["seed"]
            )
            low = cross[cross["censored"] == "low"]
            high = cross[cross["censored"] == "high"]
            if len(low):
                notes.append(f"{claim.axis}={x_value}: {len(low)} seed(s) below the smallest width")
            if len(high):
                notes.append(f"{claim.axis}={x_value}: {len(high)} seed(s) above the largest width")
            ok = cross[cross["censored"] == ""]
            points += [(x_value, t, g) for g, t in zip(ok["group"], ok["threshold"], strict=True)]
        table = pd.DataFrame(points, columns=["x", "y", "seed"])
    elif claim.kind == "power_law":
        table = pd.DataFrame(
            {"x": rows[claim.axis], "y": rows[claim.quantity], "seed": rows["seed"]}
        ).astype(float)
    else:
        raise ValueError(f"claim {claim.id}: unknown kind {claim.kind!r}")
    fit = fit_power_law(table["x"], table["y"], table["seed"], seed=seed)
    label, reason = verdict(fit, theory=claim.theory, direction=claim.direction)
    if not fit.converged and fit.message:
        reason = f"{reason}: {fit.message}"
    if fit.message:
        notes.append(fit.message)
    return ClaimResult(
        claim=claim,
        fit=fit,
        verdict=label,
        reason=reason,
        points=table,
        n_runs=len(rows),
        n_failed=n_failed,
        run_ids=rows["run_id"].tolist() if "run_id" in rows else [],
        notes=notes,
    )
