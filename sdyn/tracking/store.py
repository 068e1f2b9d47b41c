"""The tracking store: checking and connecting to it, and riding out its outages.

client, experiment_id = connect("sqlite:///mlflow.db", "sdyn")
patience = Patience(limit_s=600)
patience(client.set_tag, run_id, "key", "value")  # retried while the store is unreachable
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import mlflow
from filelock import FileLock
from mlflow.environment_variables import MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from sdyn import cache_dir, stops
from sdyn.tracking import STORE_VERSION
from sdyn.tracking.uri import sqlite_file

STORE_INIT_ATTEMPTS = 6
# The MLflow 3 UI opens a "custom model development" experiment on its runs, not on GenAI traces.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
# MLflow's own retries of one HTTP request, unless the user set them: short, so that Patience
# (which knows what is being held and says so) decides how long an outage is waited out.
# MLflow's defaults retry one request for about 4 minutes, silently.
HTTP_RETRIES = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
}
# Error codes of a store that may answer again: no connection, 5xx, busy database, throttling.
TRANSIENT = frozenset(
    {
        "INTERNAL_ERROR",
        "TEMPORARILY_UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        "REQUEST_LIMIT_EXCEEDED",
        "RESOURCE_EXHAUSTED",
    }
)
BACKOFF_MAX_S = 30.0
T = TypeVar("T")


def download(client: MlflowClient, run_id: str, path: str, dst: str) -> str:
    """``client.download_artifacts(run_id, path, dst)`` (returns the local path) without
    MLflow's per-artifact "Downloading artifacts" progress bar, which would print one bar per
    file above a notebook's or the terminal's results. A user who set
    ``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR`` gets what they set.
    """
    key = MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR.name
    if key in os.environ:
        return client.download_artifacts(run_id, path, dst)
    os.environ[key] = "false"  # MLflow reads it at each download; there is no argument
    try:
        return client.download_artifacts(run_id, path, dst)
    finally:
        os.environ.pop(key, None)


def connect(uri: str, experiment: str) -> tuple[MlflowClient, str]:
    """An MLflow client on ``uri`` and the id of experiment ``experiment`` (created if new).

    An existing experiment must carry this sdyn's store layout version (tag
    ``sdyn.store_version``); it is checked before anything is written. A new experiment in a
    SQLite store keeps its artifacts beside the file (``mlruns/<experiment>`` in its folder),
    not in the working directory's ``./mlruns`` (MLflow's default): the store is one folder.
    Sets MLflow's HTTP retry variables (:data:`HTTP_RETRIES`) where the environment does not.

    Raises:
        ValueError: the experiment was written by an sdyn with another store layout, or the
            store refused the requests (:func:`refused`).
    """
    for key, value in HTTP_RETRIES.items():
        os.environ.setdefault(key, value)
    mlflow.set_tracking_uri(uri)
    with store_lock(uri):
        for attempt in range(STORE_INIT_ATTEMPTS):
            # Another sweep may be creating this experiment right now (on a tracking server).
            try:
                _create_from_template(uri)
                client = MlflowClient(tracking_uri=uri)
                found = client.get_experiment_by_name(experiment)
                if found is None:
                    tags = {"sdyn.store_version": str(STORE_VERSION), **EXPERIMENT_KIND}
                    experiment_id = client.create_experiment(
                        experiment, artifact_location=_artifact_location(uri, experiment), tags=tags
                    )
                    _write_ahead_log(uri)
                    return client, experiment_id
                break
            except Exception as exc:
                if isinstance(exc, MlflowException) and exc.error_code in REFUSALS:
                    raise refused(exc, uri) from None  # a retry meets it again
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
    if found.tags.get("mlflow.experimentKind") is None:  # an experiment made before the tag
        client.set_experiment_tag(found.experiment_id, *next(iter(EXPERIMENT_KIND.items())))
    _write_ahead_log(uri)
    return client, found.experiment_id


def _artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment ``experiment`` of the store ``uri`` keeps its artifacts: beside a
    SQLite file, ``<folder>/mlruns/<experiment>``, each character but ``A-Za-z0-9._-`` of the
    name made ``_`` (MLflow reads the location as a URI); elsewhere MLflow's default (``None``:
    the tracking server's artifact root)."""
    database = sqlite_file(uri)
    if database is None:
        return None
    folder = re.sub(r"[^A-Za-z0-9._-]", "_", experiment)
    return str(database.resolve().parent / "mlruns" / folder)


# The files SQLite keeps beside a database, which belong to that database alone.
ORPHANS = ("-wal", "-shm", "-journal")


def _create_from_template(uri: str) -> None:
    """Create a new SQLite store as a copy of an empty one MLflow made (its tables and schema
    migrations, no experiment), kept in :func:`sdyn.cache_dir` per MLflow version; other URIs
    and an existing file: nothing. Call under :func:`store_lock`.

    A deleted store's write-ahead log, shared memory and rollback journal left beside it
    (``mlflow.db-wal``, ``-shm``, ``-journal``: ``rm mlflow.db`` leaves them) are removed
    first: SQLite would replay that log into the new file ("database disk image is
    malformed").

    MLflow runs its schema migrations (67 in MLflow 3.17) on every new store, 1.5 s of the
    driver's time on 2 cores; a copy takes milliseconds, and MLflow then opens it as a store it
    made: it finds every table and the latest schema, and adds its default experiment, with its
    artifact location here. A cache that cannot be written leaves the creation to MLflow.
    """
    database = sqlite_file(uri)
    if database is None or database.exists():
        return
    for suffix in ORPHANS:
        database.with_name(database.name + suffix).unlink(missing_ok=True)
    template = cache_dir() / f"mlflow-{mlflow.__version__}-empty.db"
    try:
        if not template.is_file():
            _make_template(template)
    except OSError:
        return
    partial = database.with_name(f".{database.name}.{os.getpid()}.partial")
    shutil.copyfile(template, partial)
    try:
        os.link(partial, database)  # never over a store that appeared meanwhile
    except FileExistsError:
        pass
    finally:
        partial.unlink()


def _make_template(template: Path) -> None:
    """Write an empty store migrated by MLflow to ``template``, atomically (processes may race).

    Raises:
        OSError: ``template``'s directory cannot be written.
    """
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables  # what a new SqlAlchemyStore runs

    template.parent.mkdir(parents=True, exist_ok=True)
    partial = template.with_name(f"{template.name}.{os.getpid()}.partial")
    engine = sqlalchemy.create_engine(f"sqlite:///{partial}")
    try:
        _initialize_tables(engine)
    finally:
        engine.dispose()
    os.replace(partial, template)


def store_lock(uri: str) -> FileLock | contextlib.nullcontext:
    """An inter-process lock on a SQLite store's file (other URIs: none).

    Held around what two processes must not do at once on one machine: MLflow's schema
    migrations of a new SQLite store (run twice at once they could leave it half-migrated:
    ``table _alembic_tmp_latest_metrics already exists``), and finding or creating a sweep's
    parent run. The lock file lives in the temporary directory, keyed by the database's
    absolute path.
    """
    database = sqlite_file(uri)
    if database is None:
        return contextlib.nullcontext()
    key = hashlib.sha256(str(database.resolve()).encode()).hexdigest()[:16]
    return FileLock(Path(tempfile.gettempdir()) / f"sdyn-store-{key}.lock")


def _write_ahead_log(uri: str) -> None:
    """Put a SQLite store in write-ahead-log mode (kept in the file; other URIs: nothing).

    A commit then writes the log once instead of a rollback journal and the database (about
    15% less per commit), and readers (the MLflow UI, the report, a second sweep) never block
    the writer.
    """
    if (database := sqlite_file(uri)) is not None:
        with contextlib.closing(sqlite3.connect(database, timeout=30)) as db:
            db.execute("PRAGMA journal_mode=WAL")


# MLflow's error codes for HTTP 401, 403 and 404: a store that refuses sdyn (its credentials,
# or no MLflow tracking API there), which no retry changes.
REFUSALS = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED", "ENDPOINT_NOT_FOUND"})


def refused(exc: MlflowException, uri: str) -> ValueError:
    """The one-line error for a store that refused a request (:data:`REFUSALS`, or any other
    error that is not :func:`transient`): its HTTP status, where MLflow's message gives one,
    and what to do about it."""
    status = re.search(r"error code (\d{3})", str(exc))
    hint = {
        "401": "it refused the credentials: set MLFLOW_TRACKING_USERNAME and "
        "MLFLOW_TRACKING_PASSWORD, or MLFLOW_TRACKING_TOKEN",
        "403": "the credentials lack the permission",
        "404": "no MLflow tracking API answers there",
    }.get(status[1] if status else "")
    detail = hint or " ".join(str(exc).split())[:200]
    return ValueError(f"tracking.uri {uri}: {detail}" + (f" (HTTP {status[1]})" if status else ""))


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` may pass once the store answers again (no connection, HTTP 5xx, a busy
    database, throttling), as opposed to a refusal that a retry would meet again."""
    return isinstance(exc, MlflowException) and exc.error_code in TRANSIENT


class Unreachable(Exception):
    """The store stayed unreachable for longer than the sweep waits (``tracking.outage_s``)."""


class Patience:
    """Calls writes until the store takes them, while it is unreachable for up to ``limit_s``.

    A write must be idempotent (the same call twice leaves what one call leaves): it is called
    again, with backoff from 1 s to 30 s, while it fails with a :func:`transient` error. The
    sweep meanwhile holds its finished results: the driver waits in the write, and the results
    that land wait in Ray's object store (bounded, spilling to disk). One line on stderr says so
    when the store goes away, one when it is back. ``seconds`` sums the time spent in writes,
    waits included.

    Raises (from a call):
        Unreachable: the store did not answer for ``limit_s`` seconds, or a stop (SIGINT,
            SIGTERM: :data:`sdyn.stops.STOPS`) came while it did not.
        Exception: the write's own error when it is not transient.
    """

    def __init__(self, limit_s: float):
        self.limit_s = limit_s
        self.seconds = 0.0

    def __call__(self, write: Callable[..., T], *args: Any) -> T:
        started = time.perf_counter()
        down_since, delay = None, 1.0
        try:
            while True:
                try:
                    result = write(*args)
                except Exception as exc:
                    if not transient(exc):
                        raise
                    now = time.monotonic()
                    if down_since is None:
                        down_since = now
                        reason = " ".join(str(exc).split())[:160]
                        _say(
                            f"tracking store unreachable ({reason}); holding finished results, "
                            f"retrying for up to {self.limit_s:.0f} s"
                        )
                    waited = now - down_since
                    if waited >= self.limit_s:
                        raise Unreachable(
                            f"tracking store unreachable for {waited:.0f} s (tracking.outage_s)"
                        ) from exc
                    if stops.STOPS.requested():  # Ctrl-C does not wait for the store's return
                        name = signal.Signals(stops.STOPS.signum).name
                        raise Unreachable(
                            f"{name} came while the tracking store was unreachable ({waited:.0f} s)"
                        ) from exc
                    _sleep(min(delay, self.limit_s - waited))
                    delay = min(2 * delay, BACKOFF_MAX_S)
                else:
                    if down_since is not None:
                        _say(f"tracking store back after {time.monotonic() - down_since:.0f} s")
                    return result
        finally:
            self.seconds += time.perf_counter() - started


def _sleep(seconds: float) -> None:
    """Sleep ``seconds``, or until a stop is requested (:data:`sdyn.stops.STOPS`)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not stops.STOPS.requested():
        time.sleep(min(0.2, end - time.monotonic()))


def _say(line: str) -> None:
    print(f"sdyn: {line}", file=sys.stderr, flush=True)
