"""Everything that talks to MLflow: the sweep's parent run, one child run per training run, curves.

Layout in the store (one MLflow experiment, ``tracking.experiment``):

- parent run (tag ``sdyn.kind=sweep``, ``sdyn.sweep=<name>``): the resolved config as params and
  ``config.yaml``, ``plan.json`` (the config hashes of every run in the sweep), one Parquet file
  of full curves per bundle under ``curves/``, and the report;
- child runs (tag ``sdyn.kind=run``, ``mlflow.parentRunId``): params = the run's resolved
  hyperparameters, tags ``sdyn.config_hash``, ``sdyn.status``, ``sdyn.curves``; metrics = the
  summary scalars and the curves decimated to MAX_CURVE_POINTS points (``curve/<metric>``);
- an experiment's extra per-run tables (e.g. generated samples), one Parquet file per bundle
  under the parent's ``tables/<name>/``, tagged ``sdyn.table.<name>`` on each child.

The driver is the only writer. A child is created, filled and only then marked FINISHED, so a
crash leaves at most a RUNNING child, which the next sweep marks KILLED and trains again.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import sqlite3
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from filelock import FileLock
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

import sdyn

# Layout of what this module writes (tags, plan.json, curves/); bump on incompatible changes.
STORE_VERSION = 1
STORE_INIT_ATTEMPTS = 6
# sdyn.status values that count as a recorded result; FAILED runs are retried only on request.
DONE = ("converged", "budget_exhausted", "diverged")
FAILED = "failed"
# Curve points per metric sent to MLflow for its UI plots (<= 200); the full-resolution curves
# are in the Parquet artifacts. Each point is a database row: fewer keep tracking cheap.
MAX_CURVE_POINTS = 20
# MLflow's log_batch limits: 1000 metrics, 100 params, 100 tags per call.
BATCH_METRICS, BATCH_PARAMS = 1000, 100


def _sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///FILE`` URI, as written; None for any other URI."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def check_uri(uri: str) -> None:
    """Fail fast, writing nothing, if the tracking store cannot be used.

    ``sqlite:///path`` and ``file:`` / plain paths need an existing, writable parent directory;
    ``http(s)://`` needs a server answering ``/health`` within 5 s.

    Raises:
        ValueError: one-line reason.
    """
    if (database := _sqlite_file(uri)) is not None:
        parent = database.expanduser().resolve().parent
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise ValueError(f"tracking.uri {uri!r}: directory {parent} is missing or read-only")
    elif uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as reply:
                reply.read()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ValueError(f"tracking.uri {uri!r} cannot be reached: {reason}") from None
    elif "://" not in uri or uri.startswith("file:"):
        path = Path(uri.removeprefix("file://").removeprefix("file:")).expanduser().resolve()
        if not (path.is_dir() or path.parent.is_dir()):
            raise ValueError(f"tracking.uri {uri!r}: directory {path.parent} does not exist")
    else:
        raise ValueError(
            f"tracking.uri {uri!r}: unsupported scheme (use sqlite:///FILE, a path, or http(s)://)"
        )


def connect(uri: str, experiment: str) -> tuple[MlflowClient, str]:
    """An MLflow client on ``uri`` and the id of experiment ``experiment`` (created if new).

    An existing experiment must carry this sdyn's store layout version (tag
    ``sdyn.store_version``); it is checked before anything is written.

    Raises:
        ValueError: the experiment was written by an sdyn with another store layout.
    """
    mlflow.set_tracking_uri(uri)
    with _creation_lock(uri):
        for attempt in range(STORE_INIT_ATTEMPTS):
            # Another sweep may be creating this experiment right now (on a tracking server).
            try:
                client = MlflowClient(tracking_uri=uri)
                found = client.get_experiment_by_name(experiment)
                if found is None:
                    tags = {"sdyn.store_version": str(STORE_VERSION)}
                    experiment_id = client.create_experiment(experiment, tags=tags)
                    _write_ahead_log(uri)
                    return client, experiment_id
                break
            except Exception:
                if attempt == STORE_INIT_ATTEMPTS - 1:
                    raise
                time.sleep(0.5 * 2**attempt)
    version = found.tags.get("sdyn.store_version", str(STORE_VERSION))
    if version != str(STORE_VERSION):
        raise ValueError(
            f"tracking experiment {experiment!r} at {uri} was written by an sdyn with store "
            f"layout {version}; this sdyn reads and writes layout {STORE_VERSION} "
            "(use another tracking.experiment or tracking.uri)"
        )
    _write_ahead_log(uri)
    return client, found.experiment_id


def _creation_lock(uri: str) -> FileLock | contextlib.nullcontext:
    """An inter-process lock around a SQLite store's creation (other URIs: none).

    MLflow creates a new SQLite store by running its schema migrations, which are not safe to
    run twice at once: two sweeps starting on one new file could leave it half-migrated
    (``table _alembic_tmp_latest_metrics already exists``). The lock file lives in the temporary
    directory, keyed by the database's absolute path.
    """
    database = _sqlite_file(uri)
    if database is None:
        return contextlib.nullcontext()
    key = hashlib.sha256(str(database.expanduser().resolve()).encode()).hexdigest()[:16]
    return FileLock(Path(tempfile.gettempdir()) / f"sdyn-store-{key}.lock")


def _write_ahead_log(uri: str) -> None:
    """Put a SQLite store in write-ahead-log mode (kept in the file; other URIs: nothing).

    A commit then writes the log once instead of a rollback journal and the database: the three
    commits of each child run cost about 15% less, and readers (the MLflow UI, the report, a
    second sweep) never block the writer.
    """
    if (database := _sqlite_file(uri)) is not None:
        with contextlib.closing(sqlite3.connect(database, timeout=30)) as db:
            db.execute("PRAGMA journal_mode=WAL")


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def open_sweep(
    client: MlflowClient, experiment_id: str, name: str, config: dict, hashes: list[str]
) -> str:
    """The parent run of sweep ``name``: found again when the sweep is resumed, else created.

    Logs the resolved ``config`` (nested dict) as params and ``config.yaml``, and ``plan.json``
    with the config hashes of all its runs. Deletes the RUNNING children a crashed driver left
    half-written (they are trained again), so no run is ever recorded twice.
    Returns the parent run id.
    """
    found = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`sdyn.kind` = 'sweep' and tags.`sdyn.sweep` = '{name}'",
        max_results=1,
    )
    if found:
        run_id = found[0].info.run_id
        client.update_run(run_id, status="RUNNING")
        for stale in client.search_runs(
            [experiment_id],
            filter_string=f"tags.`mlflow.parentRunId` = '{run_id}' "
            "and attributes.status = 'RUNNING'",
        ):
            client.delete_run(stale.info.run_id)
        return run_id
    tags = {
        "sdyn.kind": "sweep",
        "sdyn.sweep": name,
        "sdyn.version": sdyn.__version__,
        "mlflow.source.git.commit": _git_commit(),
    }
    run = client.create_run(experiment_id, run_name=name, tags=tags)
    run_id = run.info.run_id
    params = [Param(k, str(v)[:6000]) for k, v in _flatten(config).items()]
    for i in range(0, len(params), BATCH_PARAMS):
        client.log_batch(run_id, params=params[i : i + BATCH_PARAMS])
    client.log_dict(run_id, config, "config.yaml")
    client.log_dict(run_id, {"hashes": hashes}, "plan.json")
    return run_id


def recorded_runs(experiment_id: str) -> dict[str, tuple[str, list[str]]]:
    """``config hash -> (sdyn.status, run ids)`` of every recorded run in the experiment.

    When a hash was recorded more than once (two sweeps raced), a result beats a failure.
    """
    frame = mlflow.search_runs(
        [experiment_id],
        filter_string="tags.`sdyn.kind` = 'run' and attributes.status != 'RUNNING'",
        max_results=1_000_000,
        output_format="pandas",
    )
    recorded: dict[str, tuple[str, list[str]]] = {}
    if frame.empty:
        return recorded
    columns = ("tags.sdyn.config_hash", "tags.sdyn.status", "run_id")
    for key, status, run_id in zip(*(frame[c] for c in columns), strict=True):
        previous, ids = recorded.get(key, (FAILED, []))
        recorded[key] = (status if status in DONE else previous, [*ids, run_id])
    return recorded


def _decimate(steps: list[int]) -> list[int]:
    """Indices of at most MAX_CURVE_POINTS steps, evenly spread in log step."""
    if len(steps) <= MAX_CURVE_POINTS:
        return list(range(len(steps)))
    pick = {round(i * (len(steps) - 1) / (MAX_CURVE_POINTS - 1)) for i in range(MAX_CURVE_POINTS)}
    return sorted(pick)


def _log_parquet(
    client: MlflowClient, parent_id: str, table: pd.DataFrame, runs: list[dict], path: str
) -> str:
    """Write a long per-run table (``run`` -> ``config_hash``) as ``path``.parquet on the parent."""
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / f"{Path(path).name}.parquet"
        table = table.assign(config_hash=[runs[k]["hash"] for k in table["run"]])
        table.drop(columns="run").to_parquet(file, index=False)
        client.log_artifact(parent_id, str(file), artifact_path=str(Path(path).parent))
    return f"{path}.parquet"


def log_bundle(
    client: MlflowClient,
    experiment_id: str,
    parent_id: str,
    sweep: str,
    runs: list[dict],
    curves: pd.DataFrame | None,
    bundle_id: str,
    tables: dict[str, pd.DataFrame] | None = None,
) -> list[str]:
    """Record one finished bundle: its Parquet curves on the parent, then one child per run.

    Args:
        runs: per run a dict with ``hash``, ``name``, ``params`` (flat), ``summary`` (scalars and
            ``status``), ``node`` (Ray node id or None), and for failures ``traceback`` (text,
            logged as an artifact).
        curves: long table (``run`` = position in ``runs``, ``step``, metric columns), or None.
        tables: extra long tables by name (each with ``run``), logged on the parent as
            ``tables/<name>/<bundle_id>.parquet`` and tagged ``sdyn.table.<name>`` on each child.

    Returns the child run ids.
    """
    artifact = None
    if curves is not None and not curves.empty:
        artifact = _log_parquet(client, parent_id, curves, runs, f"curves/{bundle_id}")
    extra = {
        f"sdyn.table.{name}": _log_parquet(
            client, parent_id, table, runs, f"tables/{name}/{bundle_id}"
        )
        for name, table in (tables or {}).items()
        if not table.empty
    }
    ids = []
    now = int(time.time() * 1000)
    for k, run in enumerate(runs):
        status = run["summary"]["status"]
        tags = {
            "mlflow.parentRunId": parent_id,
            "sdyn.kind": "run",
            "sdyn.sweep": sweep,
            "sdyn.config_hash": run["hash"],
            "sdyn.status": status,
            "sdyn.bundle": bundle_id,
        }
        if artifact:
            tags["sdyn.curves"] = artifact
        if run.get("node"):
            tags["sdyn.node"] = run["node"]
        tags.update(extra)
        child = client.create_run(experiment_id, run_name=run["name"], tags=tags)
        run_id = child.info.run_id
        metrics = [
            Metric(key, float(value), now, 0)
            for key, value in run["summary"].items()
            if isinstance(value, int | float) and not isinstance(value, bool)
        ]
        if curves is not None and not curves.empty:
            mine = curves[curves["run"] == k]
            steps = mine["step"].tolist()
            for column in mine.columns.drop(["run", "step"]):
                values = mine[column].tolist()
                metrics += [
                    Metric(f"curve/{column}", float(values[i]), now, int(steps[i]))
                    for i in _decimate(steps)
                    if math.isfinite(values[i])
                ]
        params = [Param(key, str(value)[:6000]) for key, value in run["params"].items()]
        for i in range(0, max(len(metrics), len(params)), BATCH_METRICS):
            client.log_batch(
                run_id,
                metrics=metrics[i : i + BATCH_METRICS],
                params=params[i : i + BATCH_PARAMS] if i == 0 else [],
            )
        for i in range(BATCH_PARAMS, len(params), BATCH_PARAMS):
            client.log_batch(run_id, params=params[i : i + BATCH_PARAMS])
        if "traceback" in run:
            client.log_text(run_id, run["traceback"], "traceback.txt")
        client.set_terminated(run_id, "FAILED" if status == FAILED else "FINISHED")
        ids.append(run_id)
    return ids


def log_report(client: MlflowClient, parent_id: str, directory: Path, metrics: dict[str, float]):
    """Attach a report directory and the fitted values (as metrics) to the sweep's parent run."""
    client.log_artifacts(parent_id, str(directory), artifact_path="report")
    now = int(time.time() * 1000)
    batch = [Metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(v)]
    for i in range(0, len(batch), BATCH_METRICS):
        client.log_batch(parent_id, metrics=batch[i : i + BATCH_METRICS])


def close_sweep(client: MlflowClient, parent_id: str, failed: int) -> None:
    """Mark the parent FINISHED (or FAILED when runs failed) and tag the failure count."""
    client.set_tag(parent_id, "sdyn.failed_runs", str(failed))
    client.set_terminated(parent_id, "FAILED" if failed else "FINISHED")
