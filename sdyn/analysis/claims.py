"""Turn an experiment's ``CLAIMS`` into fits and verdicts on a runs table loaded from MLflow.

Each claim is first checked for being measured at all (the sweep varies its axis, records its
quantity, holds its reference), then fitted, then judged: by its interval against the theory
(:func:`sdyn.analysis.verdict.verdict`), unless its runs lie outside the setting the theorem
covers (``Claim.assumptions``), which overrides the verdict with "outside assumptions".
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sdyn.analysis.fits import (
    Fit,
    fit_exceedance,
    fit_geometric_rate,
    fit_power_law,
    fit_ratio,
    fit_threshold,
    threshold_intervals,
)
from sdyn.analysis.fits.result import nan_fit
from sdyn.analysis.rates import absence, still_changing
from sdyn.analysis.verdict import (
    POWER_LIMIT,
    VACUOUS,
    Slack,
    evidence_shortfall,
    format_interval,
    slack,
    vacuous,
    verdict,
)
from sdyn.experiments.common import CLAIM_KINDS, Assumption, Claim, Describe, Figure

# Claim kinds fitted on recorded curves rather than on per-run summary metrics.
CURVE_KINDS = ("curve_power_law", "curve_geometric_rate", "per_run_geometric_rate")
# Claim kinds whose axis must take at least two values in the sweep to be measured at all.
SWEPT_KINDS = ("power_law", "threshold_power_law")
# The joint confidence of a claim judged at several checkpoints (Bonferroni over them).
CONFIDENCE = 0.95
# Which interval decides a claim judged at several checkpoints: the worst verdict, and within
# it the interval least favourable to the claim.
SEVERITY = {"consistent": 0, "inconclusive": 1, "violated": 2}
# Statuses whose summary metrics are measurements; "failed" runs have none.
MEASURED = ("converged", "budget_exhausted", "diverged")


@dataclass
class Description:
    """A descriptive statistic reported beside a claim (``Claim.describe``): no verdict."""

    quantity: str
    axis: str  # the column the points are plotted against
    text: str  # one line for the report
    fit: Fit | None  # the slope fit, when the description has an axis
    points: pd.DataFrame  # columns x, y, seed (x: the description's axis, or the claim's)
    reference: float | None  # the slope the theory's bound has
    at: str = ""  # where its runs were read, e.g. "n = 128" (Describe.at_middle)


@dataclass
class ClaimResult:
    """A claim with its fit, its verdict and the points the fit used (for plots and tables)."""

    claim: Claim
    label: str  # the claim id, with [value] when the claim is split by a column
    fit: Fit
    verdict: str
    reason: str
    points: pd.DataFrame  # columns x, y, seed (thresholds also low, high, censored,
    # non_monotone)
    n_runs: int  # runs that entered the claim
    n_failed: int  # runs of the claim's selection excluded as failed
    theory: float  # the theory's value the verdict used (Claim.theory or its theory_column)
    run_ids: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    described: list[Description] = field(default_factory=list)
    references: list[tuple[str, float]] = field(default_factory=list)  # (label, value)
    scope: str = ""  # the values of the sweep's other axes its runs hold (:func:`scope`)
    slack: Slack | None = None  # the room its bound leaves (None: a prediction, or no fit)

    @property
    def measured(self) -> bool:
        """Whether the sweep measured the claim at all (its verdict is not "not measured")."""
        return self.verdict != "not measured"

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
            "theory": self.theory,
            "direction": c.direction,
            "verdict": self.verdict,
            "reason": self.reason,
            "slack": self.slack and self.slack.as_dict(),
            "points": self.fit.n_points,
            "runs": self.n_runs,
            "failed_runs": self.n_failed,
            "fit": self.fit.as_dict(),
            "assumptions": [a.statement for a in c.assumptions],
            "described": [
                {"quantity": d.quantity, "text": d.text, "fit": d.fit and d.fit.as_dict()}
                for d in self.described
            ],
            "references": [{"label": label, "value": value} for label, value in self.references],
            "notes": self.notes + ([c.note] if c.note else []),
            "mlflow_run_ids": self.run_ids,
        }


def matches(frame: pd.DataFrame, column: str, op: str, value) -> pd.Series:
    """Rows of ``frame`` where ``column op value`` holds (ops of :class:`Assumption`); all False
    when the column is missing. ``"null"`` accepts NaN, None and the strings "None"/"null"."""
    if column not in frame:
        return pd.Series(False, index=frame.index)
    series = frame[column]
    if op == "null":
        return series.isna() | series.astype(str).isin(("None", "null", "nan", ""))
    if op == "in":
        return series.isin(value)
    compare = {
        "==": series.__eq__,
        "!=": series.__ne__,
        "<": series.__lt__,
        "<=": series.__le__,
        ">": series.__gt__,
        ">=": series.__ge__,
    }[op]
    return compare(value).fillna(False).astype(bool)


def _conditions(where: tuple[tuple, ...]) -> list[tuple[str, str, object]]:
    """A ``where`` (see :class:`Claim`) as ``(column, op, value)`` triples."""
    out = []
    for condition in where:
        if len(condition) == 3:
            out.append(condition)
        else:
            column, value = condition
            out.append((column, "in" if isinstance(value, tuple) else "==", value))
    return out


def _conditions_text(where: tuple[tuple, ...]) -> str:
    return ", ".join(f"{c} {op} {_short(v)}" for c, op, v in _conditions(where))


def _where(rows: pd.DataFrame, where: tuple[tuple, ...]) -> pd.DataFrame:
    """The rows that meet every condition of a ``where`` (see :class:`Claim`)."""
    keep = pd.Series(True, index=rows.index)
    for column, op, value in _conditions(where):
        keep &= matches(rows, column, op, value)
    return rows[keep]


def select(spec: Claim | Figure, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a claim (or a figure) is about: those meeting every condition of its
    ``where``, at the middle value of its ``at_middle`` column if set, and (claims) at the
    largest value of its ``at_largest`` column if set."""
    rows = _where(runs, spec.where)
    if spec.at_middle and not rows.empty:
        rows = _at_middle(rows, spec.at_middle)
    at_largest = getattr(spec, "at_largest", None)
    if at_largest and not rows.empty:
        rows = rows[rows[at_largest] == rows[at_largest].max()]
    return rows


def _at_middle(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    values = sorted(rows[column].unique())
    return rows[rows[column] == values[len(values) // 2]]


def evaluate(
    claim: Claim,
    runs: pd.DataFrame,
    curves: pd.DataFrame | None = None,
    *,
    grid: str | None = None,
    seed: int = 0,
) -> list[ClaimResult]:
    """Fit one claim on a :func:`sdyn.analysis.load.load_sweep` table and give its verdict.

    ``curves`` (from :func:`sdyn.analysis.load.load_curves`) is needed by the ``curve_*`` kinds;
    ``grid`` is the sweep's grid name, checked against ``Claim.grids``. Failed runs are
    excluded and counted; diverged runs count as not meeting a threshold. Returns one result,
    or one per value of ``claim.by`` (for ``paired_ratio``, one per value other than
    ``claim.reference``); a claim the sweep does not measure gives one result with the verdict
    "not measured" and the reason.

    Raises:
        ValueError: a claim of unknown kind, or a ``geometric_mean`` without checkpoints.
    """
    if claim.kind not in CLAIM_KINDS:
        raise ValueError(f"claim {claim.id}: unknown kind {claim.kind!r}")
    if claim.kind == "geometric_mean" and not claim.checkpoints:
        raise ValueError(f"claim {claim.id}: a geometric_mean is read at checkpoints; give some")
    measured = runs[runs["status"].isin(MEASURED)] if "status" in runs else runs
    n_failed = len(runs) - len(measured)
    if claim.grids and grid not in claim.grids:
        grids = ", ".join(f"+grid={g}" for g in claim.grids)
        return [_not_measured(claim, claim.id, f"measured by {grids} sweeps", n_failed)]
    rows = select(claim, measured)
    if claim.by is None:
        results = [_evaluate(claim, claim.id, rows, curves, n_failed, seed)]
    elif rows.empty:
        return [_not_measured(claim, claim.id, _unselected(claim), n_failed)]
    elif claim.kind == "paired_ratio":
        reference = rows[rows[claim.by] == claim.reference]
        if reference.empty:
            reason = f"its reference {claim.by}={claim.reference} is not in this sweep"
            return [_not_measured(claim, claim.id, reason, n_failed)]
        results = [
            _evaluate(claim, f"{claim.id}[{value}]", group, curves, n_failed, seed, reference)
            for value, group in rows.groupby(claim.by, sort=True)
            if value != claim.reference
        ] or [_not_measured(claim, claim.id, f"only the reference {claim.reference} ran", n_failed)]
    else:
        results = [
            _evaluate(claim, f"{claim.id}[{value}]", group, curves, n_failed, seed)
            for value, group in rows.groupby(claim.by, sort=True)
        ]
    held = scope(claim, measured, rows)
    for result in results:
        result.scope = held
    return results


def scope(claim: Claim, runs: pd.DataFrame, rows: pd.DataFrame) -> str:
    """Which values of the sweep's other axes a claim's ``rows`` hold (``runs``: the sweep's
    measured runs): ``n = 128`` where the claim reads one value, ``n = 64, 128, 256 pooled``
    where it pools several; "" where nothing else is swept. Figure titles carry it."""
    own = {claim.axis, claim.threshold_axis, claim.by}
    parts = []
    for column in runs.columns:
        if not column.startswith("experiment.") or column in own or runs[column].nunique() < 2:
            continue
        values = [_short(v) for v in sorted(rows[column].dropna().unique())]
        name = column.split(".", 1)[1]
        if len(values) == 1:
            parts.append(f"{name} = {values[0]}")
        elif len(values) > 5:
            parts.append(f"{name} = {values[0]}-{values[-1]} ({len(values)} values) pooled")
        elif values:
            parts.append(f"{name} = {', '.join(values)} pooled")
    return "; ".join(parts)


def _not_measured(claim: Claim, label: str, reason: str, n_failed: int) -> ClaimResult:
    return ClaimResult(
        claim=claim,
        label=label,
        fit=nan_fit(CLAIM_KINDS[claim.kind], 0, 0, 0, reason),
        verdict="not measured",
        reason=reason,
        points=pd.DataFrame({"x": [], "y": [], "seed": []}, dtype=float),
        n_runs=0,
        n_failed=n_failed,
        theory=claim.theory,
    )


def _unselected(claim: Claim) -> str:
    """The reason for a claim none of whose runs meets its ``where``."""
    conditions = _conditions_text(claim.where)
    return f"no run meets its selection ({conditions})" if conditions else "no runs"


def _absence(claim: Claim, rows: pd.DataFrame, curves) -> str | None:
    """Why the sweep does not measure ``claim`` on ``rows`` at all, or None."""
    if rows.empty:
        return _unselected(claim)
    if claim.kind in CURVE_KINDS or claim.checkpoints:
        if curves is None or claim.quantity not in curves:
            return f"the curve {claim.quantity} was not recorded"
        if not curves["config_hash"].isin(rows["config_hash"]).any():
            return "no curves were recorded for its runs"
        if claim.kind in CURVE_KINDS:  # a rate only where the curve moves
            points = _curve_points(claim, rows, curves)
            return absence(claim, points, _window(claim, points))
        return None
    needed = [claim.quantity] + ([claim.reference] if claim.kind == "column_ratio" else [])
    for column in needed:
        if column not in rows or rows[column].isna().all():
            return f"{column} was not recorded by its runs"
    if claim.kind in SWEPT_KINDS and rows[claim.axis].nunique() < 2:
        return f"{claim.axis} is not swept (one value, {rows[claim.axis].iloc[0]})"
    return None


def _evaluate(claim, label, rows, curves, n_failed, seed, reference=None) -> ClaimResult:
    """Fit one claim on its rows (``reference``: the baseline rows of a ``paired_ratio``)."""
    absent = _absence(claim, rows, curves)
    if absent:
        return _not_measured(claim, label, absent, n_failed)
    notes: list[str] = []
    theory = _theory(claim, rows)
    if claim.checkpoints:
        table, empty = _checkpoint_table(claim, rows, curves, reference)
        if table.empty:
            return _not_measured(claim, label, empty, n_failed)
        fit, (verdict_label, reason) = _judge_checkpoints(claim, table, theory, seed, notes)
    else:
        table, fit = _fit(claim, rows, curves, reference, seed, notes)
        verdict_label, reason = verdict(
            fit, theory=theory, direction=claim.direction, tolerance=claim.tolerance
        )
        changing = verdict_label in ("consistent", "violated") and still_changing(
            claim, table, fit, seed, notes
        )
        if changing:
            verdict_label, reason = "inconclusive", f"{changing}; the whole window: {reason}"
    if fit.kind == "exceedance" and fit.converged:
        reason = f"{fit.message}; the exceedance probability's {reason}"
        if verdict_label == "consistent" and vacuous(fit):
            verdict_label = VACUOUS
            reason = f"no power: every measured/bound ratio is below {POWER_LIMIT:g}; {reason}"
    outside = _outside(claim, rows)
    if outside:
        verdict_label, reason = "outside assumptions", outside
    if fit.message:
        notes.append(fit.message)
    return ClaimResult(
        claim=claim,
        label=label,
        fit=fit,
        verdict=verdict_label,
        reason=reason,
        points=table.drop(columns=["run"], errors="ignore"),
        n_runs=len(rows),
        n_failed=n_failed,
        theory=theory,
        run_ids=rows["run_id"].tolist() if "run_id" in rows else [],
        notes=notes,
        described=_describe(claim, rows),
        references=reference_values(claim.references, rows),
        slack=slack(fit, theory, claim.direction),
    )


def _fit(claim, rows, curves, reference, seed, notes) -> tuple[pd.DataFrame, Fit]:
    """The points a claim (without checkpoints) is fitted on, and the fit, by kind."""
    if claim.kind == "threshold_power_law":
        table = _thresholds(claim, rows, notes)
        return table, fit_threshold(table["low"], table["high"], table["x"])
    if claim.kind in ("power_law", "bound"):
        table = pd.DataFrame(
            {"x": rows[claim.axis], "y": rows[claim.quantity], "seed": rows["seed"]}
        ).astype(float)
        if claim.kind == "bound":
            return table, fit_exceedance(table["y"])
        return table, fit_power_law(table["x"], table["y"], table["seed"], seed=seed)
    if claim.kind == "paired_ratio":
        table = _pairs(claim, rows, reference)
        return table, fit_ratio(table["y"], table["x"], seed=seed)
    if claim.kind == "column_ratio":
        table = pd.DataFrame(
            {"x": rows[claim.reference], "y": rows[claim.quantity], "seed": rows["seed"]}
        ).astype(float)
        return table, fit_ratio(table["y"], table["x"], seed=seed)
    table = _curve_points(claim, rows, curves)
    if claim.kind == "curve_power_law":
        table = table[table["x"].between(*_window(claim, table))]
        return table, fit_power_law(table["x"], table["y"], table["seed"], seed=seed)
    per_group = claim.kind == "per_run_geometric_rate"
    fit = fit_geometric_rate(
        table["x"], table["y"], table["run"], per_group=per_group, floor=claim.floor, seed=seed
    )
    return table, fit


def _window(claim: Claim, points: pd.DataFrame) -> tuple[float, float]:
    """The steps a curve claim is fitted on: ``claim.window`` as fractions of the last
    recorded step (from step 1: a power law in t has no value at 0) for a power law, every
    recorded step for a rate (its fit chooses a window inside)."""
    if points.empty:
        return (math.nan, math.nan)
    last = float(points["x"].max())
    if claim.kind != "curve_power_law":
        return (float(points["x"].min()), last)
    lo, hi = claim.window
    return (max(lo * last, 1.0), hi * last)


def reference_values(references: tuple[tuple, ...], rows: pd.DataFrame) -> list[tuple[str, float]]:
    """``(label, value)`` of each ``(column or constant, label)`` reference (see
    :class:`Claim`): a column's median over ``rows``, or the constant; columns ``rows`` lacks
    are left out."""
    return [
        (label, float(ref) if isinstance(ref, int | float) else float(rows[ref].median()))
        for ref, label in references
        if isinstance(ref, int | float) or ref in rows
    ]


def _theory(claim: Claim, rows: pd.DataFrame) -> float:
    """``claim.theory``, or the single value of its ``theory_column`` in ``rows``.

    Raises:
        ValueError: the column takes several values (the runs disagree on the theory).
    """
    if claim.theory_column is None or claim.theory_column not in rows:
        return claim.theory
    values = rows[claim.theory_column].dropna().unique()
    if len(values) > 1:
        raise ValueError(
            f"claim {claim.id}: its runs disagree on {claim.theory_column} ({sorted(values)})"
        )
    return float(values[0]) if len(values) else claim.theory


def _widest(claim: Claim, rows: pd.DataFrame) -> pd.DataFrame:
    """Per value of the claim's axis and seed, the run at the largest ``threshold_axis``."""
    order = rows.sort_values(claim.threshold_axis)
    return order.groupby([claim.axis, "seed"], sort=False).tail(1)


def _outside(claim: Claim, rows: pd.DataFrame) -> str | None:
    """Which of the claim's assumptions its runs do not meet, as a reason, or None.

    Threshold claims are checked on their widest runs (the theorem's width and lambda are
    read there); other claims on every run; an assumption with a ``when`` only on the runs
    that meet it.
    """
    checked = _widest(claim, rows) if claim.kind == "threshold_power_law" else rows
    reasons = []
    for assumption in claim.assumptions:
        applies = _where(checked, assumption.when)
        failing = applies[~matches(applies, assumption.column, assumption.op, assumption.value)]
        if not failing.empty:
            reasons.append(_assumption_reason(assumption, claim, failing, len(applies)))
    return "; ".join(reasons) or None


def _assumption_reason(a: Assumption, claim: Claim, failing: pd.DataFrame, n: int) -> str:
    """``statement: not so in k of n runs (show=values; at axis=values)``, briefly."""
    where = []
    shown = a.show or a.column
    if shown not in failing:
        where.append(f"{shown} not recorded")
    else:
        values = sorted(failing[shown].unique())
        name = shown.removeprefix("experiment.")
        if len(values) <= 3:
            where.append(f"{name}={', '.join(_short(v) for v in values)}")
        elif pd.api.types.is_numeric_dtype(failing[shown]):
            where.append(f"{name} {_short(values[0])} to {_short(values[-1])}")
    if (
        claim.axis in failing
        and claim.axis not in (shown, "seed")
        and failing[claim.axis].nunique() <= 6
    ):
        values = sorted(failing[claim.axis].unique())
        axis = claim.axis.removeprefix("experiment.")
        where.append(f"at {axis}={', '.join(_short(v) for v in values)}")
    detail = f" ({'; '.join(where)})" if where else ""
    return f"{a.statement}: not so in {len(failing)} of {n} runs{detail}"


def _short(value) -> str:
    return f"{value:.3g}" if isinstance(value, float | np.floating) else str(value)


def _pairs(claim: Claim, rows: pd.DataFrame, reference: pd.DataFrame) -> pd.DataFrame:
    """Rows matched with the reference rows on ``claim.axis`` (and ``claim.matched``):
    x = reference, y = compared."""
    keys = [claim.axis, *claim.matched]
    pairs = rows[[*keys, claim.quantity]].merge(
        reference[[*keys, claim.quantity]], on=keys, suffixes=("", "_reference")
    )
    return pd.DataFrame(
        {
            "x": pairs[f"{claim.quantity}_reference"].astype(float),
            "y": pairs[claim.quantity].astype(float),
            "seed": pairs[claim.axis].astype(float),
        }
    )


def _steps(steps) -> str:
    return ", ".join(f"{t:g}" for t in steps)


def _at_checkpoints(claim: Claim, rows: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """Per run and checkpoint, the curve ``claim.quantity`` at the last recorded step at or
    before the checkpoint: NaN where the run no longer resolves it (its curve has ended, or the
    value is at or below ``claim.relative_floor`` times the run's first recorded value);
    checkpoints beyond a run's last step are left out. Columns ``pair`` (the run's
    ``claim.axis``), the ``claim.matched`` columns, ``checkpoint``, ``value`` (times the
    ``normalise`` factor)."""
    runs = rows.set_index("config_hash")
    factor = pd.Series(1.0, index=runs.index)
    if claim.normalise:
        column, power = claim.normalise
        factor = runs[column].astype(float) ** power
    mine = curves[curves["config_hash"].isin(runs.index)].sort_values("step")
    records = []
    for run, curve in mine.groupby("config_hash", sort=False):
        steps = curve["step"].to_numpy()
        values = curve[claim.quantity].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        floor = -math.inf
        if claim.relative_floor is not None and finite.size:
            floor = claim.relative_floor * abs(finite[0])
        for checkpoint in claim.checkpoints:
            if steps[-1] < checkpoint:
                continue
            value = values[np.searchsorted(steps, checkpoint, side="right") - 1]
            value = value if value > floor else math.nan  # NaN stays NaN
            keys = [runs.at[run, column] for column in (claim.axis, *claim.matched)]
            records.append((*keys, checkpoint, value * factor[run]))
    return pd.DataFrame(records, columns=["pair", *claim.matched, "checkpoint", "value"])


def _checkpoint_table(claim, rows, curves, reference) -> tuple[pd.DataFrame, str]:
    """The values a checkpoint claim is judged on: columns ``checkpoint``, ``x`` (the
    reference run's value of a pair; 1 for ``geometric_mean``), ``y``, ``seed``; and, should
    it be empty, why."""
    table = _at_checkpoints(claim, rows, curves)
    empty = f"its checkpoints t = {_steps(claim.checkpoints)} lie beyond its runs' budget"
    x = pd.Series(1.0, index=table.index)
    if claim.kind == "paired_ratio" and not table.empty:
        keys = [claim.axis, *claim.matched]
        empty = f"no run pairs with a {claim.reference} run (on {', '.join(keys)})"
        theirs = _at_checkpoints(claim, reference, curves)
        on = ["pair", *claim.matched, "checkpoint"]
        table = table.merge(theirs, on=on, suffixes=("", "_reference"))
        x = table["value_reference"]
    frame = pd.DataFrame(
        {
            "checkpoint": table["checkpoint"].astype(float),
            "x": x.astype(float),
            "y": table["value"].astype(float),
            "seed": table["pair"].astype(float),
        }
    )
    return frame, empty


def _judge_checkpoints(claim, table, theory, seed, notes) -> tuple[Fit, tuple[str, str]]:
    """Fit and judge a claim at each of its checkpoints (see :class:`Claim`), at the
    Bonferroni level; return the deciding checkpoint's fit (``details["checkpoints"]`` holds
    every checkpoint's) and the combined ``(verdict, reason)``."""
    confidence = 1 - (1 - CONFIDENCE) / len(claim.checkpoints)
    judged, dropped = [], []
    for checkpoint, group in table.groupby("checkpoint", sort=True):
        fit = fit_ratio(group["y"], group["x"], confidence=confidence, seed=seed)
        if evidence_shortfall(fit):
            dropped.append(f"t = {checkpoint:g} ({fit.n_excluded} of {len(group)} unresolved)")
            continue
        outcome = verdict(
            fit,
            theory=theory,
            direction=claim.direction,
            tolerance=claim.tolerance,
            confidence=confidence,
        )
        judged.append((checkpoint, fit, outcome))
    if dropped:
        notes.append(
            "dropped, too few values resolved in float64 (or too few runs): " + ", ".join(dropped)
        )
    if not judged:
        reason = "no checkpoint has enough resolved values: " + ", ".join(dropped)
        return nan_fit("ratio", 0, 0, len(table), reason), ("inconclusive", reason)

    def badness(item):
        fit, label = item[1], item[2][0]
        side = {"<=": fit.ci_high, ">=": -fit.ci_low}.get(
            claim.direction, max(fit.ci_high - theory, theory - fit.ci_low)
        )
        return SEVERITY[label], side

    checkpoint, fit, (label, reason) = max(judged, key=badness)
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
    notes.append(
        f"at each checkpoint ({100 * confidence:.3g}% intervals, 95% jointly): "
        + "; ".join(
            f"t = {c['checkpoint']:g}: {format_interval(c['ci_low'], c['ci_high'], c['value'])} "
            f"{c['verdict']}"
            for c in summary
        )
    )
    agree = sum(v == "consistent" for _, _, (v, _) in judged)
    if len(judged) > 1:
        reason = f"t = {checkpoint:g} decides ({agree} of {len(judged)} consistent): {reason}"
    else:
        reason = f"at t = {checkpoint:g}: {reason}"
    return dataclasses.replace(fit, details={"checkpoints": summary}), (label, reason)


def _thresholds(claim: Claim, rows: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    """Per axis value and seed, the interval in which the threshold lies (scaled by the
    claim's ``normalise`` factor), with a plotting position ``y``: the interval's geometric
    middle, or its finite end when censored."""
    parts = []
    for x_value, group in rows.groupby(claim.axis):
        value = group[claim.quantity].astype(float).replace([np.inf, -np.inf], np.nan)
        cells = threshold_intervals(
            group[claim.threshold_axis].astype(float), value, claim.level, group["seed"]
        )
        if claim.normalise:
            column, power = claim.normalise
            widest = _widest(claim, group).set_index("seed")[column].astype(float)
            factor = widest.reindex(cells["group"]).to_numpy() ** power
            cells = cells.assign(low=cells["low"] * factor, high=cells["high"] * factor)
        parts.append(cells.assign(x=float(x_value)))
    table = pd.concat(parts, ignore_index=True).rename(columns={"group": "seed"})
    noisy = int(table["non_monotone"].sum())
    if noisy:
        notes.append(
            f"{noisy} seed(s) succeed at some {claim.threshold_axis} below their last failure "
            "(non-monotone outcome): the threshold is taken above the last failure"
        )
    middle = np.sqrt(table["low"] * table["high"])
    y = np.where(table["censored"] == "left", table["high"], middle)
    y = np.where(table["censored"] == "right", table["low"], y)
    table = table.assign(y=y, seed=table["seed"].astype(float))
    return table[["x", "y", "seed", "low", "high", "censored", "non_monotone"]]


def _curve_points(claim: Claim, rows: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
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
    return table


def _describe(claim: Claim, rows: pd.DataFrame) -> list[Description]:
    """The claim's ``describe`` statistics over its rows (see :class:`Describe`)."""
    out = []
    for spec in claim.describe:
        chosen = _where(rows, spec.where)
        quantities = [q for q in spec.quantities if q in rows]
        if chosen.empty:
            text = f"no run has {_conditions_text(spec.where)}"
            empty = pd.DataFrame({"x": [], "y": [], "seed": []}, dtype=float)
            axis = spec.axis or claim.axis
            out += [
                Description(q, axis, f"{q}: {text}", None, empty, spec.reference)
                for q in quantities
            ]
            continue
        at = ""
        if spec.at_middle:
            chosen = _at_middle(chosen, spec.at_middle)
            at = f"{spec.at_middle.split('.', 1)[-1]} = {_short(chosen[spec.at_middle].iloc[0])}"
        out += [_description(spec, q, chosen, at, claim.axis) for q in quantities]
    return out


def _description(
    spec: Describe, quantity: str, rows: pd.DataFrame, at: str, claim_axis: str
) -> Description:
    """One quantity's description; its points are plotted against ``spec.axis``, or against
    the claim's own axis when the description has none."""
    axis = spec.axis or claim_axis
    points = pd.DataFrame({"x": rows[axis], "y": rows[quantity], "seed": rows["seed"]})
    points = points.astype(float)
    if spec.axis is None:
        q1, median, q3 = np.nanpercentile(points["y"], [25, 50, 75])
        runs = len(rows)
        text = f"{quantity}: median {median:.3g} (quartiles {q1:.3g}, {q3:.3g}) over {runs} runs"
        return Description(quantity, axis, text, None, points, None)
    fit = fit_power_law(points["x"], points["y"], points["seed"])
    name = spec.axis.split(".")[-1]
    where = f" at {at}" if at else ""
    if math.isnan(fit.value):
        text = f"{quantity} vs {name}{where}: no slope ({fit.message})"
    else:
        text = (
            f"{quantity} ~ {name}^{fit.value:.3g} [{fit.ci_low:.3g}, {fit.ci_high:.3g}]{where} "
            f"(descriptive; the bound scales as {name}^{spec.reference:g})"
        )
    return Description(quantity, axis, text, fit, points, spec.reference, at)
