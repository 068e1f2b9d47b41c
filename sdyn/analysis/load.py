"""Pull a sweep back out of MLflow: one row per run, and the full curves from Parquet.

Reads only what :mod:`sdyn.tracking` wrote (the sweep's run table and its cell runs), so a report
can be rebuilt on another machine after the sweep process has exited.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from sdyn import plugins
from sdyn.api import Experiment, PluginError
from sdyn.tracking import FAILED, store, sweeps
from sdyn.tracking import table as run_table

CONFIG_SECTIONS = ("experiment.", "data.", "grid.")
RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def find_sweep(client: MlflowClient, name_or_id: str):
    """The parent run of a sweep, by MLflow run id or by sweep name (the newest of that name).

    Raises:
        ValueError: no such sweep in the store, sweeps of that name in two MLflow experiments
            of it, or the run of that id is not a sweep's parent (a cell run, say).
    """
    if RUN_ID.match(name_or_id):
        try:
            run = client.get_run(name_or_id)
        except MlflowException:  # no run of that id: perhaps a sweep's name
            pass
        else:
            if run.data.tags.get("sdyn.kind") != "sweep":
                raise ValueError(f"run {name_or_id} is not a sweep's parent run")
            return run
    experiments = [e.experiment_id for e in client.search_experiments()]
    # No sweep's name holds a ' (sdyn.config refuses it), which MLflow's filter cannot quote.
    found = "'" not in name_or_id and sweeps.parents(client, experiments, name_or_id)
    if not found:
        raise ValueError(f"no sweep named {name_or_id!r} in {mlflow.get_tracking_uri()}")
    if len(held := {run.info.experiment_id for run in found}) > 1:
        names = ", ".join(sorted(client.get_experiment(e).name for e in held))
        raise ValueError(
            f"sweeps named {name_or_id!r} are in {len(held)} MLflow experiments ({names}): "
            "give the parent run id of the one to report"
        )
    return found[-1]


def _numeric(series: pd.Series) -> pd.Series:
    converted = pd.to_numeric(series, errors="coerce")
    return converted if converted.notna().sum() == series.notna().sum() else series


def load_sweep(name_or_id: str, tracking_uri: str | None = None) -> pd.DataFrame:
    """One row per planned run of a sweep that reached a final state.

    Columns: ``run_id`` (its cell's MLflow run), ``config_hash``, ``status`` (sdyn status:
    converged, budget_exhausted, diverged, failed), ``mlflow_status`` (FAILED or FINISHED),
    ``curves_artifact`` and ``parent_run_id`` (where its full curves lie), ``node``, every param
    under its own name (``experiment.n``, ``seed``, ...; numbers converted back to numbers),
    every summary metric by name, and ``table_artifact.<name>`` per extra table the experiment
    recorded. Runs of the plan that an earlier sweep recorded are included (a sweep copies
    them into its run table); a run recorded twice keeps one row (a result beats a failure,
    then the latest). ``frame.attrs`` holds ``sweep``, ``parent_run_id``, ``experiment``,
    ``grid``, ``planned``, ``config`` (the resolved ``experiment.*``, ``data.*`` and ``grid.*``
    values the sweep used, as strings), ``settings`` (those that differ from the
    experiment's defaults, ``key=value, ...``), ``experiment_id`` (the parent's MLflow
    experiment), ``stopped`` (its parent is KILLED: the sweep was stopped, and not resumed since)
    and ``tracking_uri`` (the store it was read from).

    Raises:
        ValueError: no such sweep, or a finished sweep's artifacts are out of reach.
    """
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    client = MlflowClient()
    parent = find_sweep(client, name_or_id)
    parent_id = parent.info.run_id
    hashes: set[str] = set()
    # A new sweep's parent lacks plan.json until its driver has made it ready; a ready one
    # without it has lost its artifacts (or cannot reach them), and would report no run.
    if any(f.path == "plan.json" for f in client.list_artifacts(parent_id)):
        with tempfile.TemporaryDirectory() as tmp:
            plan = store.download(client, parent_id, "plan.json", tmp)
            hashes = set(json.loads(Path(plan).read_text())["hashes"])
    elif parent.data.tags.get("sdyn.ready"):
        raise ValueError(
            f"sweep {parent.data.tags.get('sdyn.sweep', name_or_id)!r}: its plan (plan.json) "
            f"is not among the artifacts of its parent run {parent_id}, at "
            f"{parent.info.artifact_uri}"
        )
    attrs = {
        "sweep": parent.data.tags.get("sdyn.sweep", name_or_id),
        "parent_run_id": parent_id,
        "experiment": parent.data.params.get("experiment.name", ""),
        "grid": parent.data.params.get("grid.name", ""),
        "planned": len(hashes),
        # The resolved config the sweep used (parent params, as strings), and what sets it
        # apart from its experiment's defaults (tag sdyn.settings).
        "config": {k: v for k, v in parent.data.params.items() if k.startswith(CONFIG_SECTIONS)},
        "settings": parent.data.tags.get("sdyn.settings", ""),
        "experiment_id": parent.info.experiment_id,
        "stopped": parent.info.status == "KILLED",
        "tracking_uri": mlflow.get_tracking_uri(),
    }
    table = run_table.read_table(client, parent_id)
    table = run_table.one_per_run(table[table["config_hash"].isin(hashes)])
    # A canonical order: the same runs give the same table whatever order they were trained
    # and recorded in.
    table = table.sort_values("config_hash")
    cells = run_table.cell_runs(client, parent.info.experiment_id, parent_id)
    params, tables, scalars = run_table.split_columns(table.columns)
    # Every column first, then one frame: inserting them one by one fragments the frame
    # (pandas' PerformanceWarning once a run table holds about 100 columns).
    columns = {
        "run_id": table["cell"].map({cell: run.info.run_id for cell, run in cells.items()}),
        "config_hash": table["config_hash"],
        "status": table["status"],
        "mlflow_status": table["status"].map(lambda s: "FAILED" if s == FAILED else "FINISHED"),
        "curves_artifact": table["curves"],
        "parent_run_id": table["parent_run_id"],
        "node": table["node"],
        "seed": table["seed"],
    }
    for column in tables:
        columns[f"table_artifact.{column.removeprefix(run_table.TABLE_PREFIX)}"] = table[column]
    columns.update({column: _numeric(table[column]) for column in params})
    columns.update({column: pd.to_numeric(table[column]) for column in scalars})
    out = pd.DataFrame(columns)
    out = out.reset_index(drop=True)
    out.attrs.update(attrs)
    return out


def load_experiment(runs: pd.DataFrame) -> Experiment:
    """The experiment that ran the sweep whose run table is ``runs`` (:func:`load_sweep`): its
    claims and figures are what a report draws.

    Raises:
        PluginError: it cannot be loaded here, e.g. a plugin module not importable from this
            directory (the message names the sweep).
    """
    try:
        return plugins.get(runs.attrs["experiment"])
    except PluginError as exc:
        raise PluginError(f"sweep {runs.attrs['sweep']!r}: {exc}") from None


def load_curves(runs: pd.DataFrame, tracking_uri: str | None = None) -> pd.DataFrame:
    """Full-resolution curves of the runs in ``runs`` (a :func:`load_sweep` frame).

    Downloads each parent's ``curves/`` folder once and reads the Parquet file of every write
    holding one of ``runs``. Returns a long table with ``config_hash``, ``run_id``, ``step`` and
    one column per recorded metric.
    """
    return _load_parquets(runs, "curves_artifact", ["step"], tracking_uri)


def load_table(runs: pd.DataFrame, name: str, tracking_uri: str | None = None) -> pd.DataFrame:
    """The extra per-run table ``name`` (an experiment's ``BundleResult.tables``) of ``runs``.

    Returns a long table with ``config_hash``, ``run_id`` and the table's columns; empty (with
    ``config_hash`` and ``run_id``) when no run recorded such a table.
    """
    return _load_parquets(runs, f"table_artifact.{name}", [], tracking_uri)


def _load_parquets(frame, column: str, columns: list[str], tracking_uri) -> pd.DataFrame:
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    rows = frame.rename(columns={column: "path"})
    table = run_table.read_parquets(MlflowClient(), rows, "path")
    if table.empty:
        return pd.DataFrame(columns=["config_hash", "run_id", *columns])
    ids = frame.set_index("config_hash")["run_id"]
    return table.assign(run_id=table["config_hash"].map(ids)).reset_index(drop=True)
