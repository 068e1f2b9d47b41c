"""Turn an experiment's claims into fits and verdicts on a runs table loaded from MLflow.

:func:`evaluate` applies the rules every claim kind shares, in this order: a claim of another
grid, or one none of whose runs meets its selection, is "not measured"; each part (one per
value of ``Claim.by``) is then asked by its kind whether the sweep measures it at all
(:meth:`~sdyn.api.Claim.absence`), measured (:meth:`~sdyn.api.Claim.measure`); a part where
no value resolves is "not measured"; the kind judges the rest
(:meth:`~sdyn.api.Claim.judge`); runs outside the setting the theorem or figure covers make it
"outside assumptions"; a claim derived from another is reported as "derived". The kinds
themselves are :mod:`sdyn.analysis.kinds`; :func:`limits` asks them, before training, which
claims the planned runs could never decide.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from sdyn.analysis import rows as rows_mod
from sdyn.analysis.fits import Fit, fit_power_law
from sdyn.analysis.fits.result import nan_fit
from sdyn.analysis.verdict import DERIVED, Slack, format_interval
from sdyn.api import MEASURED, Assumption, Claim, Describe, blamed


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
    points: pd.DataFrame  # columns x, y, seed, run (config hash), and the kind's own
    n_runs: int  # runs that entered the claim
    n_failed: int  # runs of the claim's selection excluded as failed
    theory: float  # the theory's value the verdict used (Claim.theory or its theory_column)
    run_ids: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    described: list[Description] = field(default_factory=list)
    references: list[tuple[str, float]] = field(default_factory=list)  # (label, value)
    scope: str = ""  # the values of the sweep's other axes its points hold (:func:`scope`)
    slack: Slack | None = None  # the room its bound leaves (None: a prediction, no fit, outside)

    @property
    def measured(self) -> bool:
        """Whether the sweep measured the claim at all (its verdict is not "not measured")."""
        return self.verdict != "not measured"

    @property
    def interval(self) -> str:
        """What the fit's interval is: "95% CI", "bracket" or "exact" (the claim's kind says)."""
        return self.claim.interval_name(self.fit)

    def as_dict(self) -> dict:
        """JSON-ready summary: claim, value, interval, points, runs, theory, verdict, slack,
        MLflow run ids."""
        c = self.claim
        return {
            "claim": self.label,
            "statement": c.statement,
            "source": c.source,
            "kind": c.kind,
            "value_name": c.value_name,
            "quantity": c.quantity,
            "axis": c.axis,
            "value": self.fit.value,
            "ci_low": self.fit.ci_low,
            "ci_high": self.fit.ci_high,
            "interval": self.interval,
            "theory": self.theory,
            "direction": c.direction,
            "verdict": self.verdict,
            "reason": self.reason,
            "slack": self.slack and self.slack.as_dict(),
            "points": self.fit.n_points,
            "runs": self.n_runs,
            "failed_runs": self.n_failed,
            "fit": self.fit.as_dict(),
            "assumptions": [a.statement for a in c.assumed()],
            "derived_from": c.derived_from or None,
            "described": [
                {"quantity": d.quantity, "text": d.text, "fit": d.fit and d.fit.as_dict()}
                for d in self.described
            ],
            "references": [{"label": label, "value": value} for label, value in self.references],
            "notes": self.notes + ([c.note] if c.note else []),
            "mlflow_run_ids": self.run_ids,
        }


def evaluate(
    claim: Claim,
    runs: pd.DataFrame,
    curves: pd.DataFrame | None = None,
    *,
    grid: str | None = None,
    unmeasured: str | None = None,
) -> list[ClaimResult]:
    """Fit one claim on a :func:`sdyn.analysis.load.load_sweep` table and give its verdict.

    ``curves`` (from :func:`sdyn.analysis.load.load_curves`) is needed by the kinds that read
    curves; ``grid`` is the sweep's grid name, checked against ``Claim.grids``;
    ``unmeasured``, why the sweep's plan does not measure the claim where it knows (a threshold
    search that did not bracket its criterion: :func:`sdyn.search.unsearched`). Only runs with a
    status in :data:`sdyn.api.MEASURED` enter; failed runs are counted. Returns one result per
    part (:meth:`~sdyn.api.Claim.split`: one, or one per value of ``claim.by``); a claim the
    sweep does not measure gives one result with the verdict "not measured" and the reason.

    Raises:
        PluginError: a plugin's kind raised (:func:`sdyn.api.blamed`).
    """
    with blamed(claim.label, type(claim)):  # a plugin kind's exception: one line naming the claim
        measured = runs[runs["status"].isin(MEASURED)] if "status" in runs else runs
        n_failed = len(runs) - len(measured)
        if claim.grids and grid not in claim.grids:
            grids = ", ".join(f"+grid={g}" for g in claim.grids)
            return [_not_measured(claim, claim.id, f"measured by {grids} sweeps", n_failed)]
        if unmeasured:
            return [_not_measured(claim, claim.id, unmeasured, n_failed)]
        if measured.empty:  # "no runs" (or a selection no run meets) hid why
            why = f"all {n_failed} runs failed" if n_failed else "no run is recorded"
            return [_not_measured(claim, claim.id, why, n_failed)]
        chosen = claim.select(measured)
        if chosen.empty:
            return [_not_measured(claim, claim.id, unselected(claim), n_failed)]
        parts = claim.split(chosen)
        if isinstance(parts, str):
            return [_not_measured(claim, claim.id, parts, n_failed)]
        results = [_evaluate(claim, label, part, curves, n_failed) for label, part in parts]
        for result in results:
            drawn = chosen
            if "run" in result.points and "config_hash" in chosen:
                drawn = chosen[chosen["config_hash"].isin(result.points["run"])]
            result.scope = scope(claim, measured, drawn)
        return results


def scope(claim: Claim, runs: pd.DataFrame, drawn: pd.DataFrame) -> str:
    """Which values of the sweep's other axes the runs ``drawn`` (those whose points a
    claim's plot shows) hold, ``runs`` being the sweep's measured runs: ``n = 128`` where they
    hold one value, ``n = 64, 128, 256 pooled`` where several; "" where nothing else is swept.
    Figure titles carry it."""
    own = claim.own_columns()
    parts = []
    for column in runs.columns:
        if not column.startswith("experiment.") or column in own or runs[column].nunique() < 2:
            continue
        values = [rows_mod.short(v) for v in sorted(drawn[column].dropna().unique())]
        name = column.split(".", 1)[1]
        if len(values) == 1:
            parts.append(f"{name} = {values[0]}")
        elif len(values) > 5:
            parts.append(f"{name} = {values[0]}-{values[-1]} ({len(values)} values) pooled")
        elif values:
            parts.append(f"{name} = {', '.join(values)} pooled")
    return "; ".join(parts)


def unselected(claim: Claim) -> str:
    """The reason for a claim none of whose runs meets its ``where``."""
    conditions = rows_mod.conditions_text(claim.where)
    return f"no run meets its selection ({conditions})" if conditions else "no runs"


def _not_measured(claim: Claim, label: str, reason: str, n_failed: int, **kw) -> ClaimResult:
    fit = kw.pop("fit", None) or nan_fit("ratio", 0, 0, 0, reason)
    return ClaimResult(
        claim=claim,
        label=label,
        fit=fit,
        verdict="not measured",
        reason=reason,
        points=kw.pop("points", pd.DataFrame({"x": [], "y": [], "seed": [], "run": []})),
        n_runs=kw.pop("n_runs", 0),
        n_failed=n_failed,
        theory=claim.theory,
        **kw,
    )


def _evaluate(claim: Claim, label: str, rows, curves, n_failed: int) -> ClaimResult:
    """Measure and judge one part of a claim (its rows), with the rules every kind shares."""
    absent = claim.absence(rows, curves)
    if absent:
        return _not_measured(claim, label, absent, n_failed)
    notes: list[str] = []
    theory = _theory(claim, rows)
    points, fit = claim.measure(rows, curves, theory=theory, notes=notes)
    if fit.message:
        notes.append(fit.message)
    context = dict(
        points=points,
        n_runs=len(rows),
        run_ids=rows["run_id"].tolist() if "run_id" in rows else [],
        notes=notes,
        described=describe(claim, rows),
        references=rows_mod.reference_values(claim.references, rows),
    )
    if not (math.isfinite(fit.value) or math.isfinite(fit.ci_low) or math.isfinite(fit.ci_high)):
        reason = "; ".join(["no value resolves", *notes])
        return _not_measured(claim, label, reason, n_failed, fit=fit, **context)
    verdict_label, reason = claim.judge(fit, theory, points, notes=notes)
    outside = _outside(claim, rows)
    if outside:
        verdict_label, reason = "outside assumptions", outside
    if claim.derived_from:
        reason = (
            f"restates {claim.derived_from}'s evidence, not a second verdict (on its own: "
            f"{verdict_label}, {reason})"
        )
        verdict_label = DERIVED
    return ClaimResult(
        claim=claim,
        label=label,
        fit=fit,
        verdict=verdict_label,
        reason=reason,
        n_failed=n_failed,
        theory=theory,
        slack=None if outside else claim.slack(fit, theory),  # a bound not judged leaves no room
        **context,
    )


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


def _outside(claim: Claim, rows: pd.DataFrame, planned: bool = False) -> str | None:
    """Which of the settings the claim assumes (its assumptions, its figure's setting) its
    runs do not meet, as a reason, or None; checked on the kind's
    :meth:`~sdyn.api.Claim.setting_rows`, an assumption with a ``when`` only on the runs
    that meet it. ``planned``: ``rows`` are planned runs, and the assumptions on results
    (columns they lack) are not checked."""
    checked = claim.setting_rows(rows)
    reasons = []
    for assumption in claim.assumed():
        columns = {assumption.column, *(c[0] for c in assumption.when)}
        if planned and not columns <= set(rows.columns):
            continue
        applies = rows_mod.where(checked, assumption.when)
        ok = rows_mod.matches(applies, assumption.column, assumption.op, assumption.value)
        failing = applies[~ok]
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
            where.append(f"{name}={', '.join(rows_mod.short(v) for v in values)}")
        elif pd.api.types.is_numeric_dtype(failing[shown]):
            where.append(f"{name} {rows_mod.short(values[0])} to {rows_mod.short(values[-1])}")
    if (
        claim.axis in failing
        and claim.axis not in (shown, "seed")
        and failing[claim.axis].nunique() <= 6
    ):
        values = sorted(failing[claim.axis].unique())
        axis = claim.axis.removeprefix("experiment.")
        where.append(f"at {axis}={', '.join(rows_mod.short(v) for v in values)}")
    detail = f" ({'; '.join(where)})" if where else ""
    return f"{a.statement}: not so in {len(failing)} of {n} runs{detail}"


def evidence_rule(claims) -> str:
    """The least evidence each kind among ``claims`` needs for a verdict, in one line:
    ``power_law: 4 distinct x values ...; bound: ...``."""
    kinds = {type(c).kind: type(c).least_evidence for c in claims}
    return "; ".join(f"{kind}: {text}" for kind, text in kinds.items() if text)


def limits(claims, planned: pd.DataFrame, grid: str) -> list[tuple[str, str]]:
    """The claims that the planned runs could never decide, and why, before any training.

    Args:
        claims: the experiment's claims.
        planned: one row per planned run: ``seed`` and the config columns.
        grid: the sweep's grid name (claims of other grids are not listed).

    Returns:
        ``(label, reason)`` for each claim (or part of one, ``id[value]``) that no run
        selects, whose kind's :meth:`~sdyn.api.Claim.limits` finds the planned runs short of
        the least evidence that could decide it, or whose runs are outside the setting it
        assumes. Conditions and assumptions on results (columns the plan does not hold) are
        taken as met.

    Raises:
        PluginError: a plugin's kind raised (:func:`sdyn.api.blamed`).
    """
    out = []
    for claim in claims:
        if claim.grids and grid not in claim.grids:
            continue
        with blamed(claim.label, type(claim)):  # a plugin kind's exception: one line
            known = tuple(c for c in claim.where if c[0] in planned)
            chosen = rows_mod.select(planned, known, claim.at_middle)
            if claim.at_largest and claim.at_largest in chosen and not chosen.empty:
                chosen = chosen[chosen[claim.at_largest] == chosen[claim.at_largest].max()]
            parts = unselected(claim) if chosen.empty else claim.split(chosen)
            reason = parts if isinstance(parts, str) else claim.limits(chosen)
            if reason:
                out.append((claim.id, reason))
                continue
            for label, part in parts:
                outside = _outside(claim, part, planned=True)
                if outside:
                    out.append((label, f"outside its assumptions: {outside}"))
    return out


def describe(claim: Claim, rows: pd.DataFrame) -> list[Description]:
    """The claim's ``describe`` statistics over its rows (see :class:`sdyn.api.Describe`)."""
    out = []
    for spec in claim.describe:
        chosen = rows_mod.where(rows, spec.where)
        quantities = [q for q in spec.quantities if q in rows]
        if chosen.empty:
            text = f"no run has {rows_mod.conditions_text(spec.where)}"
            empty = pd.DataFrame({"x": [], "y": [], "seed": []}, dtype=float)
            axis = spec.axis or claim.axis
            out += [
                Description(q, axis, f"{q}: {text}", None, empty, spec.reference)
                for q in quantities
            ]
            continue
        at = ""
        if spec.at_middle:
            chosen = rows_mod.at_middle(chosen, spec.at_middle)
            middle = rows_mod.short(chosen[spec.at_middle].iloc[0])
            at = f"{spec.at_middle.split('.', 1)[-1]} = {middle}"
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
            f"{quantity} ~ {name}^{format_interval(fit.ci_low, fit.ci_high, fit.value)}{where} "
            f"(descriptive; the bound scales as {name}^{spec.reference:g})"
        )
    return Description(quantity, axis, text, fit, points, spec.reference, at)
