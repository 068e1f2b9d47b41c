"""What a tracking URI names, and whether it can be used; no MLflow import, so that a sweep checks
its store before it starts Ray (:mod:`sdyn.start`).

    check("sqlite:///mlflow.db")  # ValueError with a one-line reason if it cannot be used
    exists("sqlite:///mlflow.db")  # False until the first sweep creates the file
"""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.error
import urllib.request
from pathlib import Path

from sdyn.errors import check_writable

# Tracking URIs that name a server (with a UI to link to), not a store file.
SERVER_SCHEMES = ("http://", "https://")


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///FILE`` URI, as written; None for any other URI."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def exists(uri: str) -> bool:
    """Whether the store may hold anything: False for a SQLite file not yet created, or empty
    (0 bytes: MLflow would make it a store)."""
    database = sqlite_file(uri)
    return database is None or (database.is_file() and database.stat().st_size > 0)


def check(uri: str) -> None:
    """Fail fast, writing nothing, if the tracking store cannot be used.

    ``sqlite:///FILE`` needs FILE to be a file (no ``:memory:``, no ``?query``; a plain file,
    not a directory or a device), its directory to exist, FILE to be writable
    (:func:`sdyn.errors.check_writable`) and, if it holds anything, to be an MLflow store
    (:func:`_check_store`); ``http(s)://`` needs a server answering
    ``/health`` within 5 s. (A plain path reaches here as ``sqlite:///``:
    :func:`sdyn.config.sqlite_for_path`.)

    Raises:
        ValueError: one-line reason (also for ``file:``, MLflow's file store, which MLflow 3
            refuses, and any other scheme).
    """
    if (database := sqlite_file(uri)) is not None:
        if "?" in uri or database.name == ":memory:":
            raise ValueError(
                f"tracking.uri {uri!r}: give the store's file alone (sqlite:///FILE): a sweep "
                "writes its runs there, to keep"
            )
        database = database.resolve()
        if database.is_dir():
            raise ValueError(f"tracking.uri {uri!r}: {database} is a directory, not a database")
        if database.exists() and not database.is_file():
            raise ValueError(f"tracking.uri {uri!r}: {database} is not a regular file")
        if not database.parent.is_dir():
            raise ValueError(f"tracking.uri {uri!r}: directory {database.parent} is missing")
        check_writable(database, "tracking.uri")
        _check_store(uri, database)
    elif uri.startswith(SERVER_SCHEMES):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=5) as reply:
                reply.read()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ValueError(f"tracking.uri {uri!r} cannot be reached: {reason}") from None
    else:
        raise ValueError(
            f"tracking.uri {uri!r}: unsupported scheme (use sqlite:///FILE, a database file's "
            "path, or http(s)://)"
        )


def _check_store(uri: str, database: Path) -> None:
    """Refuse a file that is not a SQLite database (MLflow failed on it with a traceback), or
    a database with tables but not MLflow's (MLflow would add its own to another program's
    data). An empty file, or none yet, is a new store."""
    if not database.is_file() or database.stat().st_size == 0:
        return
    with database.open("rb") as file:
        if file.read(16) != b"SQLite format 3\x00":
            raise ValueError(f"tracking.uri {uri!r}: {database} is not a SQLite database")
    try:
        with contextlib.closing(sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True)) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.Error as exc:  # a damaged file behind a valid header
        raise ValueError(f"tracking.uri {uri!r}: {database} cannot be read: {exc}") from None
    if tables and not {"alembic_version", "experiments"} <= tables:
        raise ValueError(
            f"tracking.uri {uri!r}: {database} is a SQLite database but not an MLflow store"
        )


def mlflow_url(uri: str, experiment_id: str, run_id: str | None = None) -> str | None:
    """The MLflow UI's page of an experiment (or of one of its runs, ``run_id``) on the tracking
    server ``uri`` (``http(s)://``), in its model-training view (MLflow 3's UI opens on its
    GenAI view unless asked); None for a store without a server (SQLite)."""
    if not uri.startswith(SERVER_SCHEMES):
        return None
    page = f"{uri.rstrip('/')}/#/experiments/{experiment_id}"
    return f"{page}{f'/runs/{run_id}' if run_id else ''}?workflowType=machine_learning"
