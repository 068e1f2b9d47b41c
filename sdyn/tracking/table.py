"""The run table: a row per training run of a sweep, Parquet files under its parent run's
``runs/``; what resume and analysis read.

    table = one_per_run(read_table(client, parent_id))   # a row per recorded training run
    curves = read_parquets(client, table, "curves")       # their full-resolution curves
    cells = cell_runs(client, experiment_id, parent_id)   # the cell runs, by cell hash

Columns: :data:`META` (what the row records), the run's params (``experiment.<key>``,
``data.<key>``), ``table.<name>`` (where an experiment's extra table for the run lies), and one
column per summary scalar. :mod:`sdyn.tracking.record` writes it.
"""

from __future__ import annotations

import posixpath
import re
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.tracking import MlflowClient

from sdyn.grid import Planned
from sdyn.tracking import FAILED, store

# Run-table columns that describe the record rather than the run's config or results.
META = (
    "config_hash",
    "cell",
    "seed",
    "status",
    "recorded_at",  # Unix ms: a hash recorded twice keeps its latest result
    "driver",  # the driver that trained and wrote the run
    "node",  # the Ray node that trained it
    "parent_run_id",  # the parent whose artifacts hold its curves and tables
    "curves",  # artifact path of its curves on that parent
    "traceback",  # why it failed
    "code_version",  # the experiment's version that trained it (sdyn.api.Experiment.version)
    "retrained",  # trained by sweep.retrain: the run's earlier rows no longer count
)
PARAM_PREFIXES = ("experiment.", "data.")
TABLE_PREFIX = "table."
SEARCH_PAGE = 1000


# The names MLflow takes for a metric (its rule: alphanumerics, _ - . space : /, at most 250
# characters): each summary scalar is logged as ``median/<key>``, each curve as ``curve/<key>``.
METRIC_NAME = re.compile(r"[\w\-. :/]+")
MAX_METRIC_NAME = 250


def unrecordable(
    summaries: list[dict], curves: pd.DataFrame | None, tables: dict[str, pd.DataFrame]
) -> str | None:
    """Why a bundle's result cannot be recorded as it is, or None when it can: a summary key
    that is a column the run table holds itself (:data:`META` but ``status``, a param, a
    table path), which would overwrite it; a summary key or curve column MLflow refuses as a
    metric's name; a table name that is no plain file name (it names a folder).

    Args:
        summaries: one dict per run; curves: a long table (``run``, ``step``, a column per
            curve) or None; tables: name -> table.
    """
    own = set(META) - {"status"}
    for key in dict.fromkeys(k for summary in summaries for k in summary):
        if key in own or str(key).startswith((*PARAM_PREFIXES, TABLE_PREFIX)):
            return f"a summary key {key!r}, a column of sdyn's run table: name it otherwise"
    columns = [] if curves is None else [c for c in curves.columns if c not in ("run", "step")]
    for key in dict.fromkeys([*(k for summary in summaries for k in summary), *columns]):
        name = f"median/{key}"
        if (
            not isinstance(key, str)
            or not METRIC_NAME.fullmatch(key)
            or len(name) > MAX_METRIC_NAME
            or posixpath.normpath(name) != name
        ):
            return (
                f"{key!r} as a summary key or curve, which MLflow refuses as a metric name: "
                "give letters, digits, _ - . : / and spaces, a relative path, at most "
                f"{MAX_METRIC_NAME - len('median/')} characters"
            )
    for name in tables:
        if not isinstance(name, str) or not re.fullmatch(r"[\w\-.]+", name) or name in (".", ".."):
            return f"a table named {name!r}: give letters, digits, _ - and ."
    return None


def split_columns(columns) -> tuple[list[str], list[str], list[str]]:
    """A run table's columns as (params, extra-table paths ``table.<name>``, summary scalars)."""
    params = [c for c in columns if c.startswith(PARAM_PREFIXES)]
    tables = [c for c in columns if c.startswith(TABLE_PREFIX)]
    scalars = [c for c in columns if c not in META and c not in params and c not in tables]
    return params, tables, scalars


def read_table(client: MlflowClient, parent_id: str) -> pd.DataFrame:
    """Every row of a parent's run table (its ``runs/*.parquet``), duplicates included.

    A file that cannot be read (cut short by a kill) is skipped: its runs are not recorded.
    Returns an empty frame with the :data:`META` columns when there is none.
    """
    if not client.list_artifacts(parent_id, "runs"):
        return pd.DataFrame(columns=list(META))
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(store.download(client, parent_id, "runs", tmp))
        for file in sorted(local.glob("*.parquet")):
            try:
                frames.append(pd.read_parquet(file))
            except (OSError, ValueError):
                continue
    if not frames:
        return pd.DataFrame(columns=list(META))
    return pd.concat(frames, ignore_index=True)


def one_per_run(table: pd.DataFrame) -> pd.DataFrame:
    """One row per config hash: of the rows since its latest ``retrained`` one (all, when none
    is), a result beats a failure, then the latest recorded. A retrain that fails thus shows
    the failure, not the result of the code it was asked to replace."""
    if table.empty:  # pandas 3 maps an empty str column to str, which < cannot compare
        return table.reset_index(drop=True)
    if "retrained" in table:  # run tables written before the column lack it
        since = table[table["retrained"].eq(True)].groupby("config_hash")["recorded_at"].max()
        table = table[~(table["recorded_at"] < table["config_hash"].map(since))]
    failed = table["status"] == FAILED
    order = table.assign(_failed=failed).sort_values(
        ["_failed", "recorded_at"], ascending=[True, False], kind="stable"
    )
    return order.drop_duplicates("config_hash").drop(columns="_failed").reset_index(drop=True)


def recorded_elsewhere(
    client: MlflowClient, experiment_id: str, parent_id: str, experiment: str, data: str
) -> pd.DataFrame:
    """Every row (duplicates included) that the sweeps of the same experiment and data set but
    ``parent_id`` recorded: a new sweep reuses the runs it plans (:func:`one_per_run` of those
    with its config hashes) instead of training them again."""
    others = _search(
        client,
        experiment_id,
        f"tags.`sdyn.kind` = 'sweep' and params.`experiment.name` = '{experiment}' "
        f"and params.`data.name` = '{data}'",
    )
    tables = [read_table(client, r.info.run_id) for r in others if r.info.run_id != parent_id]
    return pd.concat([t for t in tables if not t.empty] or [pd.DataFrame(columns=list(META))])


def other_code(rows: pd.DataFrame, planned: list[Planned]) -> pd.DataFrame:
    """The rows that record a run of ``planned`` (the same params and seed) under another config
    hash: trained by another version of the experiment's code (column ``code_version``; null
    for rows recorded before the run key held it), so not reused. Adds ``planned_hash``, the
    config hash of the run each row records."""
    params = [c for c in rows.columns if c.startswith(PARAM_PREFIXES)]

    def config(values: dict, seed: int) -> frozenset:
        # Params are recorded as the plan's strings; a key another sweep's rows lack is null.
        return frozenset(
            {("seed", seed)} | {(k, v) for k, v in values.items() if isinstance(v, str)}
        )

    wanted = {config(p.params, p.seed): p.hash for p in planned}
    records = rows[[*params, "seed"]].to_dict("records")
    found = [wanted.get(config(row, int(row["seed"]))) for row in records]
    rows = rows.assign(planned_hash=found).dropna(subset=["planned_hash"])
    return rows[rows["planned_hash"] != rows["config_hash"]]


def cell_runs(client: MlflowClient, experiment_id: str, parent_id: str) -> dict[str, Any]:
    """The cell runs under a parent (MLflow ``Run`` objects) by cell hash."""
    found = _search(
        client,
        experiment_id,
        f"tags.`mlflow.parentRunId` = '{parent_id}' and tags.`sdyn.kind` = 'cell'",
        order_by=["attributes.start_time DESC"],
    )
    return {run.data.tags["sdyn.cell"]: run for run in found}  # a cell's oldest run last wins


def _search(client: MlflowClient, experiment_id: str, where: str, order_by=None) -> list:
    """Every run of the experiment matching ``where``, page by page."""
    found, token = [], None
    while True:
        page = client.search_runs(
            [experiment_id], where, max_results=SEARCH_PAGE, order_by=order_by, page_token=token
        )
        found += page
        token = page.token
        if not token:
            return found


def read_parquets(client: MlflowClient, rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """The long tables that run-table ``rows`` point to in ``column`` (``curves`` or
    ``table.<name>``: a Parquet artifact on the row's ``parent_run_id``), each cut to the runs
    whose row points to it.

    Downloads each parent's folder once: a call per file costs more than the file. Returns
    ``config_hash`` and the tables' columns; only ``config_hash`` when no row has such a table.
    """
    wanted = rows.dropna(subset=[column]) if column in rows else rows.iloc[:0]
    wanted = wanted.assign(folder=wanted[column].map(lambda a: str(Path(a).parent)))
    tables = []
    with tempfile.TemporaryDirectory() as tmp:
        for (parent, folder), files in wanted.groupby(["parent_run_id", "folder"]):
            local = Path(store.download(client, parent, folder, f"{tmp}/{parent}"))
            for artifact, mine in files.groupby(column):
                table = pd.read_parquet(local / Path(artifact).name)
                tables.append(table[table["config_hash"].isin(mine["config_hash"])])
    if not tables:
        return pd.DataFrame(columns=["config_hash"])
    return pd.concat(tables, ignore_index=True)
