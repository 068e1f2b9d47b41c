"""The sweep's parent run in a real MLflow store (SQLite file, local artifacts)."""

import http.server
import json
import shutil
import signal
import sqlite3
import threading
import time
from pathlib import Path

import mlflow
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from sdyn import report as report_cli
from sdyn import stops
from sdyn.tracking import store, sweeps


def test_a_parent_whose_artifacts_were_deleted_gets_its_plan_again(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("sdyn", artifact_location=str(tmp_path / "mlruns"))
    parent = client.create_run(experiment_id).info.run_id
    config = {"experiment": {"name": "ntk", "m": 8}}
    hashes = ["a" * 16, "b" * 16]
    sweeps.complete_parent(client, parent, config, hashes)
    assert client.get_run(parent).data.tags["sdyn.ready"] == "1"

    # The database is kept, the artifact root deleted: the next driver writes the plan again,
    # so that the report still knows which runs the sweep planned.
    shutil.rmtree(tmp_path / "mlruns")
    sweeps.complete_parent(client, parent, config, hashes)
    plan = json.loads(
        Path(client.download_artifacts(parent, "plan.json", str(tmp_path))).read_text()
    )
    assert plan == {"hashes": hashes}
    assert client.get_run(parent).data.params["experiment.m"] == "8"


def _layout(database: Path) -> tuple:
    """A SQLite store's schema, MLflow schema version and experiments (name, artifact location)."""
    with sqlite3.connect(database) as db:
        # Each statement's lines as a set: MLflow's own migrations write the runs table's CHECK
        # constraints in an order that differs from one process to the next.
        schema = sorted(
            (kind, name, sorted((sql or "").splitlines()))
            for kind, name, sql in db.execute("SELECT type, name, sql FROM sqlite_master")
        )
        version = db.execute("SELECT version_num FROM alembic_version").fetchall()
        experiments = db.execute("SELECT name, artifact_location FROM experiments").fetchall()
    return schema, version, experiments


def test_a_new_store_copied_from_the_template_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    monkeypatch.setenv("SDYN_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)  # MLflow's default artifact root: ./mlruns of the process
    made = tmp_path / "mlflow-made.db"
    MlflowClient(f"sqlite:///{made}").search_experiments()  # MLflow creates and migrates it
    template = tmp_path / "cache" / f"mlflow-{mlflow.__version__}-empty.db"
    for name in ("cold.db", "warm.db"):  # the first makes the template, the second copies it
        uri = f"sqlite:///{tmp_path / name}"
        client, experiment_id = store.connect(uri, "sdyn")
        assert template.is_file()
        schema, version, experiments = _layout(tmp_path / name)
        assert (schema, version) == _layout(made)[:2]
        assert experiments[0] == _layout(made)[2][0] == ("Default", f"{tmp_path}/mlruns/0")
        run = client.create_run(experiment_id).info.run_id
        client.log_metric(run, "loss", 0.5)
        assert client.get_run(run).data.metrics == {"loss": 0.5}
    # MLflow's migrations now ran once, for the template; the stores hold no trace of it
    assert list((tmp_path / "cache").iterdir()) == [template]
    assert not list(tmp_path.glob(".*.partial"))


def test_a_store_made_where_one_was_deleted_ignores_the_log_it_left(tmp_path):
    """`rm mlflow.db` leaves its write-ahead log when a process left it uncheckpointed: SQLite
    would replay it into the new store, which would then be malformed."""
    database = tmp_path / "mlflow.db"
    with sqlite3.connect(database) as db:  # the old store, its log open: nothing merged yet
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute("CREATE TABLE runs (x)")
        db.executemany("INSERT INTO runs VALUES (?)", [(b"x" * 1000,)] * 500)
        db.commit()
        left = {s: Path(f"{database}{s}").read_bytes() for s in ("-wal", "-shm")}
    database.unlink()
    for suffix, data in left.items():
        Path(f"{database}{suffix}").write_bytes(data)
    client, experiment_id = store.connect(f"sqlite:///{database}", "new")
    run = client.create_run(experiment_id).info.run_id
    client.log_metric(run, "loss", 0.5)
    assert client.get_run(run).data.metrics == {"loss": 0.5}
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_sqlite_store_keeps_its_artifacts_beside_its_file(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    database = tmp_path / "store" / "mlflow.db"
    database.parent.mkdir()
    client, experiment_id = store.connect(f"sqlite:///{database}", "a/b sweep")
    run = client.create_run(experiment_id).info.run_id
    client.log_text(run, "x", "note.txt")
    artifacts = database.parent / "mlruns" / "a_b_sweep" / run / "artifacts"
    assert (artifacts / "note.txt").read_text() == "x"
    assert not list((tmp_path / "elsewhere").iterdir())  # nothing in the working directory


def test_a_cache_that_cannot_be_written_leaves_the_new_store_to_mlflow(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("SDYN_CACHE", str(tmp_path / "file" / "cache"))  # not a directory
    client, experiment_id = store.connect(f"sqlite:///{tmp_path / 'mlflow.db'}", "sdyn")
    assert client.get_experiment(experiment_id).name == "sdyn"
    assert _layout(tmp_path / "mlflow.db")[1]  # migrated, by MLflow itself


def test_a_stop_while_the_store_is_away_ends_the_wait(monkeypatch):
    # Ctrl-C waited for the store's return, up to tracking.outage_s (900 s by default).
    def away():
        raise MlflowException("connection refused", error_code="TEMPORARILY_UNAVAILABLE")

    monkeypatch.setattr(stops.STOPS, "signum", None)
    threading.Timer(0.5, lambda: setattr(stops.STOPS, "signum", signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(store.Unreachable, match="SIGINT came while the tracking store was un"):
        store.Patience(900.0)(away)
    assert time.monotonic() - started < 3  # within a poll of the stop, not the 1-30 s backoff


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A server whose /health answers and whose every other path answers ``status``."""

    status = 401

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/health" else self.status)
        self.end_headers()
        self.wfile.write(b"OK" if self.path == "/health" else b"no")

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (401, "it refused the credentials: set MLFLOW_TRACKING_USERNAME"),
        (404, "no MLflow tracking"),
    ],
)
def test_a_server_that_refuses_or_is_not_mlflow_is_one_line(status, says, tmp_path, monkeypatch):
    # A traceback (MlflowException: ... failed with error code 401 != 200), exit 1.
    handler = type("Refusing", (_Refusing,), {"status": status})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ValueError, match=f"^tracking.uri {uri}: {says}.* \\(HTTP {status}\\)$"):
            store.connect(uri, "sdyn")
        monkeypatch.chdir(tmp_path)
        assert report_cli.main(["--list", "--tracking-uri", uri]) == 2
    finally:
        server.shutdown()
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_taken_on_again_loses_its_stop_tag(tmp_path):
    # A sweep resumed to its end kept sdyn.stopped=SIGINT beside its FINISHED status.
    client, experiment_id = store.connect(f"sqlite:///{tmp_path}/mlflow.db", "sdyn")
    parent = client.create_run(experiment_id, tags={"sdyn.stopped": "SIGINT"}).info.run_id
    sweeps.resume(client, parent)
    assert "sdyn.stopped" not in client.get_run(parent).data.tags
    sweeps.resume(client, parent)  # a sweep never stopped: nothing to remove
