"""Turn an experiment's ``CLAIMS`` into fits and verdicts on a runs table loaded from MLflow."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sdyn.analysis.fits import (
    Fit,
    fit_geometric_rate,
    fit_geometric_rate_per_group,
    fit_power_law,
    fit_ratio,
    threshold_crossings,
)
from sdyn.analysis.verdict import verdict
from sdyn.experiments.common import Claim

# Claim kinds fitted on recorded curves rather than on per-run summary metrics.
CURVE_KINDS = ("curve_power_law", "curve_geometric_rate", "per_run_geometric_rate")
# Statuses whose summary metrics are measurements; "failed" runs have none.
MEASURED = ("converged", "budget_exhausted", "diverged")


@dataclass
class ClaimResult:
    """A claim with its fit, its verdict and the points the fit used (for plots and tables)."""

    claim: Claim
    label: str  # the claim id, with [value] when the claim is split by a column
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
            "claim": self.label,
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
        if column not in rows:
            rows = rows.iloc[:0]
        elif isinstance(value, tuple):
            rows = rows[rows[column].isin(value)]
        else:
            rows = rows[rows[column] == value]
    if claim.at_middle and not rows.empty:
        values = sorted(rows[claim.at_middle].unique())
        rows = rows[rows[claim.at_middle] == values[len(values) // 2]]
    return rows


def evaluate(
    claim: Claim, runs: pd.DataFrame, curves: pd.DataFrame | None = None, *, seed: int = 0
) -> list[ClaimResult]:
    """Fit one claim on a :func:`sdyn.analysis.load.load_sweep` table and give its verdict.

    ``curves`` (from :func:`sdyn.analysis.load.load_curves`) is needed by the ``curve_*`` kinds.
    Failed runs are excluded and counted; diverged runs count as not meeting a threshold.
    Returns one result, or one per value of ``claim.by`` (for ``paired_ratio``, one per value
    other than ``claim.reference``).

    Raises:
        ValueError: a claim of unknown kind, or a curve claim without curves.
    """
    measured = runs[runs["status"].isin(MEASURED)] if "status" in runs else runs
    n_failed = len(runs) - len(measured)
    rows = _select(claim, measured)
    if claim.by is None:
        return [_evaluate(claim, claim.id, rows, curves, n_failed, seed)]
    if claim.kind == "paired_ratio":
        reference = rows[rows[claim.by] == claim.reference]
        return [
            _evaluate(claim, f"{claim.id}[{value}]", group, curves, n_failed, seed, reference)
            for value, group in rows.groupby(claim.by, sort=True)
            if value != claim.reference
        ]
    return [
        _evaluate(claim, f"{claim.id}[{value}]", group, curves, n_failed, seed)
        for value, group in rows.groupby(claim.by, sort=True)
    ]


def _pairs(claim: Claim, rows: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Rows matched with the reference rows on ``claim.axis``: x = reference, y = compared."""
    pairs = rows[[claim.axis, claim.quantity]].merge(
        reference[[claim.axis, claim.quantity]], on=claim.axis, suffixes=("", "_reference")
    )
    return pd.DataFrame(
        {
            "x": pairs[f"{claim.quantity}_reference"].astype(float),
            "y": pairs[claim.quantity].astype(float),
            "seed": pairs[claim.axis].astype(float),
        }
    )


def _thresholds(claim: Claim, rows: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    points = []
    for x_value, group in rows.groupby(claim.axis):
        value = group[claim.quantity].astype(float).replace([np.inf, -np.inf], np.nan)
        cross = threshold_crossings(
            group[claim.threshold_axis].astype(float), value, claim.level, group["seed"]
        )
        for side, where in (("low", "below the smallest"), ("high", "above the largest")):
            count = int((cross["censored"] == side).sum())
            if count:
                notes.append(f"{claim.axis}={x_value}: {count} seed(s) {where} swept value")
        ok = cross[cross["censored"] == ""]
        factor = pd.Series(1.0, index=ok["group"])
        if claim.normalise:
            column, power = claim.normalise
            widest = group.sort_values(claim.threshold_axis).groupby("seed").last()
            factor = widest[column].astype(float).reindex(ok["group"]) ** power
        points += [
            (x_value, t * f, g)
            for g, t, f in zip(ok["group"], ok["threshold"], factor, strict=True)
        ]
    return pd.DataFrame(points, columns=["x", "y", "seed"])


def _curve_points(claim: Claim, rows: pd.DataFrame, curves: pd.DataFrame | None) -> pd.DataFrame:
    if curves is None:
        raise ValueError(f"claim {claim.id}: a curve claim needs the sweep's curves")
    mine = curves[curves["config_hash"].isin(rows["config_hash"])]
    seeds = rows.set_index("config_hash")["seed"]
    table = pd.DataFrame(
        {
            "x": mine["step"].astype(float),
            "y": mine[claim.quantity].astype(float),
            "seed": mine["config_hash"].map(seeds).astype(float),
            "run": mine["config_hash"],
        }
    )
    if claim.kind == "curve_power_law" and not table.empty:
        last = table["x"].max()
        lo, hi = claim.window
        table = table[(table["x"] >= max(lo * last, 1.0)) & (table["x"] <= hi * last)]
    return table


def _evaluate(claim, label, rows, curves, n_failed, seed, reference=None) -> ClaimResult:
    """Fit one claim on its rows (``reference``: the baseline rows of a ``paired_ratio``)."""
    notes: list[str] = []
    if claim.kind == "threshold_power_law":
        table = _thresholds(claim, rows, notes)
    elif claim.kind == "power_law":
        table = pd.DataFrame(
            {"x": rows[claim.axis], "y": rows[claim.quantity], "seed": rows["seed"]}
        ).astype(float)
    elif claim.kind in CURVE_KINDS:
        table = _curve_points(claim, rows, curves)
    elif claim.kind == "paired_ratio":
        table = _pairs(claim, rows, reference)
    else:
        raise ValueError(f"claim {claim.id}: unknown kind {claim.kind!r}")
    if claim.kind == "curve_geometric_rate":
        fit = fit_geometric_rate(table["x"], table["y"], table["run"], floor=claim.floor, seed=seed)
    elif claim.kind == "paired_ratio":
        fit = fit_ratio(table["y"], table["x"], seed=seed)
    elif claim.kind == "per_run_geometric_rate":
        fit = fit_geometric_rate_per_group(
            table["x"], table["y"], table["run"], floor=claim.floor, seed=seed
        )
    else:
        fit = fit_power_law(table["x"], table["y"], table["seed"], seed=seed)
    verdict_label, reason = verdict(
        fit, theory=claim.theory, direction=claim.direction, tolerance=claim.tolerance
    )
    if not fit.converged and fit.message:
        reason = f"{reason}: {fit.message}"
    if fit.message:
        notes.append(fit.message)
    return ClaimResult(
        claim=claim,
        label=label,
        fit=fit,
        verdict=verdict_label,
        reason=reason,
        points=table[["x", "y", "seed"]].astype(float),  # float even when empty
        n_runs=len(rows),
        n_failed=n_failed,
        run_ids=rows["run_id"].tolist() if "run_id" in rows else [],
        notes=notes,
    )
