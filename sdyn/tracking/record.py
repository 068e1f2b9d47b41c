"""Recording a sweep's runs: its run table and one MLflow run per grid cell.

    recorder = Recorder(client, experiment_id, lease, "ntk_width", planned, patience, log)
    recorder.start(recorded, reused, todo)     # reused rows copied in, stale cell runs rewritten
    recorder.add(hashes, summaries, curves, tables, node, error)     # each finished bundle
    recorder.finish()

The recorder buffers rows and writes them as one Parquet file per write: when a bundle completes
a cell (every run of the cell that this sweep trains has landed), or FLUSH_S after the oldest
unwritten row, so a kill loses at most that many seconds of results. A cell run is written once
its cell is complete, after the rows it summarises; a kill between the two leaves rows without
their cell run, which the next driver writes (:meth:`Recorder.start`). Each write is idempotent
(the same file names, the same metric timestamps), so it can be retried after an outage.
"""

from __future__ import annotations

import csv
import hashlib
import numbers
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from mlflow.entities import Metric, Param, RunTag
from mlflow.store.artifact.artifact_repo import ArtifactRepository
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
from mlflow.tracking import MlflowClient

from sdyn.api import STATUSES
from sdyn.grid import Planned
from sdyn.tracking import FAILED, store
from sdyn.tracking.sweeps import Lease
from sdyn.tracking.table import TABLE_PREFIX, cell_runs, read_parquets, split_columns

# Seconds a finished result may wait in the buffer for the next write.
FLUSH_S = 10.0
# Curve points per metric a cell run logs for the MLflow UI's plots: each point is a database
# row, and the full-resolution curves are in the Parquet artifacts.
MAX_CURVE_POINTS = 20
# MLflow's log_batch limits: 1000 entities per call, at most 100 params and 100 tags.
BATCH_METRICS, BATCH_PARAMS, BATCH_TAGS = 800, 100, 100
HASHES_PER_TAG = 400  # 17 characters each, within MLflow's 8000 per tag value


def _records(frame: pd.DataFrame) -> list[dict]:
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


def _seed_statistics(rows: list[dict], timestamp: int) -> list[Metric]:
    """``median/<name>``, ``min/<name>`` and ``max/<name>`` of each summary scalar over the
    runs in ``rows`` that did not fail (NaN ignored; scalars no run has are left out)."""
    results = [row for row in rows if row["status"] != FAILED]
    if not results:  # every seed failed: nothing to summarise (numpy's nanmin refuses)
        return []
    scalars = split_columns(dict.fromkeys(k for row in results for k in row))[2]
    values = np.array(
        [[np.nan if row.get(k) is None else row[k] for k in scalars] for row in results], float
    ).reshape(len(results), len(scalars))
    metrics = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a scalar that is NaN for every seed
        for stat, reduce in (("median", np.nanmedian), ("min", np.nanmin), ("max", np.nanmax)):
            for name, value in zip(scalars, reduce(values, axis=0), strict=True):
                if not np.isnan(value):
                    metrics.append(Metric(f"{stat}/{name}", float(value), timestamp, 0))
    return metrics


def _median_curves(held: list[pd.DataFrame], timestamp: int) -> list[Metric]:
    """``curve/<metric>``: the median over runs of each curve in ``held`` (long tables with
    ``step``), at <= MAX_CURVE_POINTS of its steps."""
    if not held:
        return []
    median = pd.concat(held).groupby("step").median(numeric_only=True)
    metrics = []
    for name, column in median.iloc[_decimate(len(median))].items():
        metrics += [
            Metric(f"curve/{name}", float(v), timestamp, int(step))
            for step, v in column.dropna().items()
        ]
    return metrics


def _decimate(n: int) -> list[int]:
    """Indices of at most MAX_CURVE_POINTS of ``n`` (log-spaced) record steps, evenly spread."""
    if n <= MAX_CURVE_POINTS:
        return list(range(n))
    return sorted({round(i * (n - 1) / (MAX_CURVE_POINTS - 1)) for i in range(MAX_CURVE_POINTS)})


class Recorder:
    """Writes a sweep's run table and cell runs (see the module docstring).

    Args:
        lease: this driver's hold on the sweep: each write is fenced by it and marked with its
            driver id (file names, the ``driver`` column, the cell runs' ``sdyn.driver`` tag).
        planned: every run of the plan.
        patience: runs each write, riding out outages of the store.
        events: called as ``events("recorded", runs=[hashes], cells=[cells])`` after each write
            (:class:`sdyn.events.EventLog`); None: nothing is told.
        retrain: the sweep trains its runs again (``sweep.retrain``): each new row supersedes
            the run's earlier ones, a failure included (column ``retrained``).
    """

    def __init__(
        self,
        client: MlflowClient,
        experiment_id: str,
        lease: Lease,
        sweep: str,
        planned: list[Planned],
        patience: store.Patience,
        events: Callable[..., None] | None = None,
        retrain: bool = False,
    ):
        self.client, self.experiment_id, self.lease = client, experiment_id, lease
        self.retrain = retrain
        self.events = events or (lambda event, **fields: None)
        self.sweep, self.patience = sweep, patience
        self.planned = {p.hash: p for p in planned}
        self.members: dict[str, list[str]] = defaultdict(list)  # cell -> its runs' hashes
        for p in planned:
            self.members[p.cell].append(p.hash)
        self.rows: dict[str, dict] = {}  # config hash -> its row (one per run)
        self.pending: Counter = Counter()  # cell -> runs still to land
        self._buffer: list[dict] = []
        self._curves: list[pd.DataFrame] = []
        self._tables: dict[str, list[pd.DataFrame]] = defaultdict(list)
        self._held: dict[str, pd.DataFrame] = {}  # curves of runs whose cell is not yet written
        self._due: dict[str, int] = {}  # cells to write -> their metrics' timestamp (Unix ms)
        self._cells: dict[str, Any] = {}  # cell -> its run's RunInfo
        self._repos: dict[str, ArtifactRepository] = {}  # run id -> its artifact store
        self._parent = client.get_run(lease.parent_id).info
        self._unsure = False  # a cell run's creation failed: it may exist all the same
        self._writes = 0
        self._oldest: float | None = None

    def start(self, recorded: pd.DataFrame, reused: pd.DataFrame, todo: list[str]) -> None:
        """Take stock before training, and write what is owed.

        Args:
            recorded: this parent's run table, one row per run.
            reused: rows other sweeps recorded, copied into this run table.
            todo: hashes of the runs to train now.

        Writes the reused rows, and the cell runs of cells with nothing left to train that are
        missing, left RUNNING, or summarise other rows than the run table holds.
        """
        for row in _records(recorded):
            self._take(row)
        for row in _records(reused):
            self._take(row)
            self._buffer.append(row)
        self.pending = Counter(self.planned[h].cell for h in todo)
        existing = self.patience(cell_runs, self.client, self.experiment_id, self.lease.parent_id)
        self._cells = {cell: run.info for cell, run in existing.items()}
        now = int(time.time() * 1000)
        for cell, hashes in self.members.items():
            if self.pending[cell] or not any(h in self.rows for h in hashes):
                continue
            run = existing.get(cell)
            if (
                run is None
                or run.info.status == "RUNNING"
                or run.data.tags.get("sdyn.table_digest") != self._digest(cell)
            ):
                self._due[cell] = now
        self.flush()

    def expect(self, todo: list[str]) -> None:
        """Runs ``todo`` (hashes) are about to be trained, after :meth:`start` (a threshold
        search's next round): each cell is written again once its runs have landed."""
        self.pending.update(self.planned[h].cell for h in todo)

    def reuse(self, reused: pd.DataFrame) -> None:
        """Copy rows other sweeps recorded into this run table, after :meth:`start` (the probes
        of a search's round found elsewhere); written with the next write, their cells too
        unless runs of them are pending."""
        now = int(time.time() * 1000)
        for row in _records(reused):
            self._take(row)
            self._buffer.append(row)
            if not self.pending[row["cell"]]:
                self._due[row["cell"]] = now

    def add(
        self,
        hashes: list[str],
        summaries: list[dict],
        curves: pd.DataFrame | None,
        tables: dict[str, pd.DataFrame] | None,
        node: str | None,
        error: str | None,
    ) -> None:
        """Record the runs ``hashes`` of one finished bundle.

        Args:
            summaries: per run, its scalars and ``status`` (in the order of ``hashes``).
            curves: long table (``run`` = position in ``hashes``, ``step``, one column per
                metric), or None.
            tables: the experiment's extra long tables by name (each with ``run``), or None.
            error: the formatted traceback when the bundle's task failed.

        Writes when this completes a cell, or when the oldest unwritten row waited FLUSH_S.
        """
        stem = self._stem()
        paths: dict[str, dict[str, str]] = defaultdict(dict)  # hash -> column -> artifact
        for name, table in {"curves": curves, **(tables or {})}.items():
            if table is None or table.empty:
                continue
            table = table.assign(config_hash=[hashes[k] for k in table["run"]]).drop(columns="run")
            if name == "curves":
                column, path = "curves", f"curves/{stem}.parquet"
                self._curves.append(table)
                self._held.update(dict(tuple(table.groupby("config_hash"))))
            else:
                column, path = f"{TABLE_PREFIX}{name}", f"tables/{name}/{stem}.parquet"
                self._tables[name].append(table)
            for key in table["config_hash"].unique():
                paths[key][column] = path
        now = int(time.time() * 1000)
        for key, summary in zip(hashes, summaries, strict=True):
            p = self.planned[key]
            row = {
                "config_hash": key,
                "cell": p.cell,
                "seed": p.seed,
                "status": summary["status"],
                "recorded_at": now,
                "driver": self.lease.driver,
                "node": node,
                "parent_run_id": self.lease.parent_id,
                "curves": None,
                "traceback": error,
                "code_version": p.version,
                "retrained": self.retrain,
                **paths[key],
                **p.params,
                **{  # numbers only: numpy's too (np.float32 is no float); a bool is not one
                    k: float(v)
                    for k, v in summary.items()
                    if isinstance(v, numbers.Real) and not isinstance(v, bool)
                },
            }
            self._take(row)
            self._buffer.append(row)
            self.pending[p.cell] -= 1
            if self.pending[p.cell] == 0:
                self._due[p.cell] = now
        if self._oldest is None:
            self._oldest = time.monotonic()
        if self._due or time.monotonic() - self._oldest >= FLUSH_S:
            self.flush()

    def failed(self) -> int:
        """Runs of the sweep whose row is a failure (:func:`sdyn.tracking.table.one_per_run`'s
        rule): those of earlier commands too."""
        return sum(row["status"] == FAILED for row in self.rows.values())

    def flush(self) -> None:
        """Write the buffered rows (with their curves and tables), then the cell runs due."""
        if not self._buffer and not self._due:
            return
        self.patience(self._write, self._stem())
        self.events(
            "recorded", runs=[row["config_hash"] for row in self._buffer], cells=list(self._due)
        )
        for cell in self._due:
            for key in self.members[cell]:
                self._held.pop(key, None)
        self._buffer, self._curves, self._due, self._oldest = [], [], {}, None
        self._tables = defaultdict(list)
        self._writes += 1

    def finish(self) -> None:
        """Write whatever is buffered (call once every bundle has landed)."""
        self.flush()

    def _stem(self) -> str:
        """File name of the next write: the driver's generation and id, and a counter."""
        driver = self.lease.driver.rsplit(":", 1)[1]
        return f"{self.lease.generation:03d}-{driver}-{self._writes:05d}"

    def _take(self, row: dict) -> None:
        """Hold ``row`` as its run's row, as :func:`sdyn.tracking.table.one_per_run` reads the
        run table: a result or a retrained row replaces the run's row, a failure a failure."""
        old = self.rows.get(row["config_hash"])
        replaces = row["status"] != FAILED or row.get("retrained") is True
        if old is None or old["status"] == FAILED or replaces:
            self.rows[row["config_hash"]] = row

    def _digest(self, cell: str) -> str:
        """Which rows a cell run summarises: recorded on it as ``sdyn.table_digest``."""
        keys = sorted(
            f"{h}:{self.rows[h]['status']}:{self.rows[h]['recorded_at']}"
            for h in self.members[cell]
            if h in self.rows
        )
        return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16]

    def _repo(self, run: Any) -> ArtifactRepository:
        """The artifact store of an MLflow run (from its ``RunInfo``), built once per run:
        MlflowClient.log_artifact would first fetch the whole run, metrics and all."""
        if run.run_id not in self._repos:
            self._repos[run.run_id] = get_artifact_repository(
                run.artifact_uri, tracking_uri=self.client.tracking_uri
            )
        return self._repos[run.run_id]

    def _write(self, stem: str) -> None:
        """One idempotent write: the rows' curves and tables, the rows, then the cells due."""
        self.lease.fence()
        if self._buffer:
            repo = self._repo(self._parent)
            with tempfile.TemporaryDirectory() as tmp:
                data = Path(tmp, "data")
                parts = [("curves", self._curves)]
                parts += [(f"tables/{name}", frames) for name, frames in self._tables.items()]
                for folder, frames in parts:
                    if frames:
                        (data / folder).mkdir(parents=True)
                        pd.concat(frames).to_parquet(data / folder / f"{stem}.parquet", index=False)
                if data.exists():
                    repo.log_artifacts(str(data))
                # The rows last: a row on the store means its curves and tables are there.
                rows = Path(tmp, f"{stem}.parquet")
                columns = dict.fromkeys(k for row in self._buffer for k in row)
                table = {k: [row.get(k) for row in self._buffer] for k in columns}
                pq.write_table(pa.Table.from_pydict(table), rows)
                repo.log_artifact(str(rows), "runs")
        if not self._due:
            return
        if self._unsure:
            found = cell_runs(self.client, self.experiment_id, self.lease.parent_id)
            self._cells = {cell: run.info for cell, run in found.items()}
            self._unsure = False
        keys = [h for cell in self._due for h in self.members[cell] if h in self.rows]
        stored = [h for h in keys if h not in self._held and self.rows[h]["curves"]]
        if stored:  # curves recorded before this driver: resumed, reused or repaired cells
            rows = pd.DataFrame([self.rows[h] for h in stored])
            read = read_parquets(self.client, rows, "curves")
            self._held.update(dict(tuple(read.groupby("config_hash"))))
        for cell, timestamp in sorted(self._due.items()):
            rows = sorted(
                (self.rows[h] for h in self.members[cell] if h in self.rows),
                key=lambda row: row["seed"],
            )
            held = [self._held[k] for k in (row["config_hash"] for row in rows) if k in self._held]
            metrics = _seed_statistics(rows, timestamp) + _median_curves(held, timestamp)
            self._write_cell(cell, rows, metrics)

    def _write_cell(self, cell: str, rows: list[dict], metrics: list[Metric]) -> None:
        """Create (or find) a cell's run and write its status, per-seed table (of its run-table
        ``rows``, in seed order), tracebacks, seed statistics ``metrics``, params and tags.

        The tag ``sdyn.table_digest`` comes last (in the last call): a cell run that has it is
        complete, one that lacks it or is RUNNING is rewritten by the next driver. The status
        comes first: MLflow loads a run's every metric to change its status.
        """
        first = self.planned[self.members[cell][0]]
        run = self._cells.get(cell)
        if run is None:
            identity = {
                "mlflow.parentRunId": self.lease.parent_id,
                "sdyn.kind": "cell",
                "sdyn.sweep": self.sweep,
                "sdyn.cell": cell,
            }
            try:
                created = self.client.create_run(
                    self.experiment_id, run_name=first.cell_name, tags=identity
                )
            except Exception:
                self._unsure = True
                raise
            run = self._cells[cell] = created.info
        counts = Counter(row["status"] for row in rows)
        self.client.set_terminated(run.run_id, "FAILED" if counts[FAILED] else "FINISHED")
        scalars = split_columns(dict.fromkeys(k for row in rows for k in row))[2]
        with tempfile.TemporaryDirectory() as tmp:
            with open(Path(tmp, "seeds.csv"), "w", newline="") as handle:
                columns = ["seed", "config_hash", "status", "node", *scalars]
                table = csv.DictWriter(handle, columns, extrasaction="ignore")
                table.writeheader()
                table.writerows(rows)
            for row in rows:
                if row["traceback"]:
                    Path(tmp, "tracebacks").mkdir(exist_ok=True)
                    Path(tmp, "tracebacks", f"seed-{row['seed']}.txt").write_text(row["traceback"])
            self._repo(run).log_artifacts(tmp)
        hashes = [row["config_hash"] for row in rows]
        tags = [
            RunTag("sdyn.driver", self.lease.driver),
            *(RunTag(f"sdyn.status.{s}", str(counts[s])) for s in STATUSES),
            *(
                RunTag(
                    "sdyn.config_hashes" + (f".{i // HASHES_PER_TAG}" if i else ""),
                    " ".join(hashes[i : i + HASHES_PER_TAG]),
                )
                for i in range(0, len(hashes), HASHES_PER_TAG)
            ),
        ]
        params = [Param(k, v) for k, v in first.params.items()]
        params.append(Param("seeds", str(len(self.members[cell]))))
        batches = max(
            -(-len(metrics) // BATCH_METRICS),
            -(-len(params) // BATCH_PARAMS),
            -(-(len(tags) + 1) // BATCH_TAGS),
        )
        for i in range(batches):
            last = [RunTag("sdyn.table_digest", self._digest(cell))] if i == batches - 1 else []
            self.client.log_batch(
                run.run_id,
                metrics=metrics[i * BATCH_METRICS : (i + 1) * BATCH_METRICS],
                params=params[i * BATCH_PARAMS : (i + 1) * BATCH_PARAMS],
                tags=tags[i * BATCH_TAGS : (i + 1) * BATCH_TAGS] + last,
            )
