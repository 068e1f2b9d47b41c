"""Pull a sweep back out of MLflow: one row per run, and the full curves from Parquet.

Reads only what :mod:`sdyn.tracking` wrote, so a report can be rebuilt on another machine after
the sweep process has exited.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.tracking import MlflowClient

RUN_ID = re.compile(r"^[0-9a-f]{32}$")


def find_sweep(client: MlflowClient, name_or_id: str):
    """The parent run of a sweep, by MLflow run id or by sweep name (newest first).

    Raises:
        ValueError: no such sweep in the store.
    """
    if RUN_ID.match(name_or_id):
        return client.get_run(name_or_id)
    found = mlflow.search_runs(
        search_all_experiments=True,
        filter_string=f"tags.`sdyn.kind` = 'sweep' and tags.`sdyn.sweep` = '{name_or_id}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
        output_format="list",
    )
    if not found:
        raise ValueError(f"no sweep named {name_or_id!r} in {mlflow.get_tracking_uri()}")
    return found[0]


def _numeric(series: pd.Series) -> pd.Series:
    converted = pd.to_numeric(series, errors="coerce")
    return converted if converted.notna().sum() == series.notna().sum() else series


def load_sweep(name_or_id: str, tracking_uri: str | None = None) -> pd.DataFrame:
    """One row per planned run of a sweep that reached a final state.

    Columns: ``run_id``, ``config_hash``, ``status`` (sdyn status: converged, budget_exhausted,
    diverged, failed), ``mlflow_status``, every param under its own name (``experiment.n``,
    ``seed``, ...; numbers converted back to numbers), every summary metric by name, and
    ``table_artifact.<name>`` per extra table the experiment recorded. Runs of
    the plan recorded by an earlier sweep (skipped here) are included; a hash recorded twice
    keeps one row (a result beats a failure, then the earliest).
    ``frame.attrs`` holds ``sweep``, ``parent_run_id``, ``experiment``, ``grid`` and ``planned``.

    Raises:
        ValueError: no such sweep.
    """
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    client = MlflowClient()
    parent = find_sweep(client, name_or_id)
    experiment_id = parent.info.experiment_id
    with tempfile.TemporaryDirectory() as tmp:
        plan = mlflow.artifacts.load_dict(
            client.download_artifacts(parent.info.run_id, "plan.json", tmp)
        )
    hashes = set(plan["hashes"])
    frame = mlflow.search_runs(
        [experiment_id],
        filter_string="tags.`sdyn.kind` = 'run' and attributes.status != 'RUNNING' "
        "and attributes.status != 'KILLED'",
        max_results=1_000_000,
        order_by=["attributes.start_time ASC"],
    )
    attrs = {
        "sweep": parent.data.tags.get("sdyn.sweep", name_or_id),
        "parent_run_id": parent.info.run_id,
        "experiment": parent.data.params.get("experiment.name", ""),
        "grid": parent.data.params.get("grid.name", ""),
        "planned": len(hashes),
    }
    if frame.empty:
        out = pd.DataFrame(columns=["run_id", "config_hash", "status", "mlflow_status"])
        out.attrs.update(attrs)
        return out
    frame = frame[frame["tags.sdyn.config_hash"].isin(hashes)].copy()
    frame["_failed"] = frame["tags.sdyn.status"] == "failed"
    frame = frame.sort_values(["_failed", "start_time"]).drop_duplicates("tags.sdyn.config_hash")
    # A canonical order: the same runs give the same table (and the same bootstrap draws)
    # whatever order they were trained and recorded in.
    frame = frame.sort_values("tags.sdyn.config_hash")
    out = pd.DataFrame(
        {
            "run_id": frame["run_id"],
            "config_hash": frame["tags.sdyn.config_hash"],
            "status": frame["tags.sdyn.status"],
            "mlflow_status": frame["status"],
            "curves_artifact": frame.get("tags.sdyn.curves"),
            "parent_run_id": frame["tags.mlflow.parentRunId"],
        }
    )
    for column in frame.columns:
        if column.startswith("tags.sdyn.table."):
            out[f"table_artifact.{column.removeprefix('tags.sdyn.table.')}"] = frame[column]
        elif column.startswith("params."):
            out[column.removeprefix("params.")] = _numeric(frame[column])
        elif column.startswith("metrics.") and not column.startswith("metrics.curve/"):
            out[column.removeprefix("metrics.")] = frame[column]
    out = out.reset_index(drop=True)
    out.attrs.update(attrs)
    return out


def load_curves(runs: pd.DataFrame, tracking_uri: str | None = None) -> pd.DataFrame:
    """Full-resolution curves of the runs in ``runs`` (a :func:`load_sweep` frame).

    Downloads each parent's ``curves/`` folder once and reads the Parquet file of every bundle
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


def _load_parquets(runs, column: str, columns: list[str], tracking_uri) -> pd.DataFrame:
    if tracking_uri:
        mlflow.set_tracking_uri(tracking_uri)
    client = MlflowClient()
    wanted = runs.dropna(subset=[column]) if column in runs else runs.iloc[:0]
    tables = []
    with tempfile.TemporaryDirectory() as tmp:
        # One download per parent and folder (e.g. ``curves/``): a call per file costs more
        # than the file.
        wanted = wanted.assign(folder=wanted[column].map(lambda a: str(Path(a).parent)))
        for (parent, folder), files in wanted.groupby(["parent_run_id", "folder"]):
            local = Path(client.download_artifacts(parent, folder, f"{tmp}/{parent}"))
            for artifact in sorted(files[column].unique()):
                tables.append(pd.read_parquet(local / Path(artifact).name))
    if not tables:
        return pd.DataFrame(columns=["config_hash", "run_id", *columns])
    table = pd.concat(tables, ignore_index=True)
    ids = wanted.set_index("config_hash")["run_id"]
    table = table[table["config_hash"].isin(ids.index)]
    return table.assign(run_id=table["config_hash"].map(ids)).reset_index(drop=True)
