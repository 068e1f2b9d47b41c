"""Reliability: kill -9 and resume, failure isolation, retries, store versions, concurrency.

Every sweep here is the real command in its own process (its own embedded Ray), as a user runs it.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import mlflow
import pytest

from sdyn.analysis.load import load_sweep
from sdyn.sweep import main, plan

pytestmark = pytest.mark.slow

GRID = ["+grid=width", "grid.n=[8,16,32]", "grid.widths=[4,16,64,256]", "grid.seeds=3"]


def _args(tmp_path, name, *extra):
    return [
        *GRID,
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"sweep.out_dir={tmp_path}/out",
        f"sweep.name={name}",
        "sweep.progress=false",
        *extra,
    ]


@pytest.fixture(autouse=True)
def _reap():
    """Kill every sweep a test started (and its embedded Ray), whatever the test's outcome."""
    yield
    for proc in STARTED:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    STARTED.clear()


STARTED: list[subprocess.Popen] = []


def _sweep(tmp_path, args, env=None, **kw):
    proc = subprocess.Popen(
        [sys.executable, "-m", "sdyn.sweep", *args],
        cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,
    )
    STARTED.append(proc)
    return proc


def _children(tmp_path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    return mlflow.search_runs(search_all_experiments=True, filter_string="tags.`sdyn.kind` = 'run'")


def _claims(tmp_path, name):
    report = json.loads((tmp_path / "out" / name / "report.json").read_text())
    return {
        c["claim"]: (c["value"], c["ci_low"], c["ci_high"], c["verdict"]) for c in report["claims"]
    }


def test_kill_9_then_resume_equals_an_uninterrupted_sweep(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    args = _args(tmp_path / "a", "resume", "sweep.bundle_size=1")
    driver = _sweep(tmp_path / "a", args)
    first = driver.stdout.readline()
    assert first.startswith("sdyn: sweep resume:"), first + driver.stderr.read()  # store exists
    deadline = time.time() + 240
    while time.time() < deadline:
        time.sleep(0.5)
        if len(_children(tmp_path / "a").query("status == 'FINISHED'")) >= 6:
            break
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait(timeout=60)
    os.killpg(driver.pid, signal.SIGKILL)  # the embedded Ray it started, if still alive
    before = _children(tmp_path / "a")
    done_before = int((before["status"] == "FINISHED").sum())
    assert 6 <= done_before < 36, "the kill must land mid-sweep"

    again = _sweep(tmp_path / "a", args)
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert f"{36 - done_before} to train" in out
    after = _children(tmp_path / "a")
    assert len(after) == 36 and after["tags.sdyn.config_hash"].is_unique
    assert set(after["status"]) == {"FINISHED"}

    clean = _sweep(tmp_path / "b", _args(tmp_path / "b", "resume", "sweep.bundle_size=1"))
    _, err = clean.communicate(timeout=600)
    assert clean.returncode == 0, err
    assert _claims(tmp_path / "a", "resume") == _claims(tmp_path / "b", "resume")


def test_a_raising_run_fails_alone_and_retry_failed_trains_only_it(tmp_path):
    bad = plan(_args(tmp_path, "faults")).hashes[5]
    proc = _sweep(tmp_path, _args(tmp_path, "faults"), {"SDYN_FAULT_INJECTION": f"raise:{bad}"})
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err  # a failed run fails the sweep unless allowed
    assert "(1 failed)" in out
    runs = _children(tmp_path)
    assert len(runs) == 36
    failed = runs[runs["status"] == "FAILED"]
    assert list(failed["tags.sdyn.config_hash"]) == [bad]
    assert (runs[runs["status"] != "FAILED"]["tags.sdyn.status"] != "failed").all()
    trace = mlflow.artifacts.load_text(f"runs:/{failed['run_id'].iloc[0]}/traceback.txt")
    assert "fault injected" in trace

    proc = _sweep(tmp_path, _args(tmp_path, "faults", "sweep.allow_failures=true"))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "0 to train" in out, err

    proc = _sweep(tmp_path, _args(tmp_path, "faults", "sweep.retry_failed=true"))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "1 to train" in out, err
    runs = _children(tmp_path)
    assert len(runs) == 36 and set(runs["status"]) == {"FINISHED"}  # the failure was replaced


def test_a_worker_that_dies_every_time_fails_only_its_run(tmp_path):
    bad = plan(_args(tmp_path, "exits")).hashes[0]
    env = {"SDYN_FAULT_INJECTION": f"exit:{bad}"}
    proc = _sweep(tmp_path, _args(tmp_path, "exits", "sweep.allow_failures=true"), env)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    runs = _children(tmp_path)
    assert len(runs) == 36
    assert list(runs[runs["status"] == "FAILED"]["tags.sdyn.config_hash"]) == [bad]


def test_a_worker_killed_once_is_retried_by_ray(tmp_path):
    args = _args(
        tmp_path,
        "killed",
        "grid.n=[256]",
        "grid.widths=[4096]",
        "grid.seeds=1",
        "experiment.eps=1e-9",
        "experiment.steps=20000",
    )
    proc = _sweep(tmp_path, args)
    deadline, killed = time.time() + 300, False
    while time.time() < deadline and not killed:
        time.sleep(0.5)
        found = subprocess.run(
            ["pgrep", "-f", "ray::_train_bundle"], capture_output=True, text=True
        )
        if found.stdout.split():
            time.sleep(1.0)
            os.kill(int(found.stdout.split()[0]), signal.SIGKILL)
            killed = True
    assert killed
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, err
    runs = _children(tmp_path)
    assert len(runs) == 1 and runs["status"].iloc[0] == "FINISHED"


def test_a_store_of_another_layout_version_is_refused_untouched(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = mlflow.tracking.MlflowClient(uri)
    client.create_experiment("sdyn", tags={"sdyn.store_version": "999"})
    capsys.readouterr()  # MLflow's own messages while it created the store
    status = main(_args(tmp_path, "old"))
    err = capsys.readouterr().err.strip()
    assert status == 2 and "store layout 999" in err and len(err.splitlines()) == 1
    assert client.search_runs([client.get_experiment_by_name("sdyn").experiment_id]) == []
    assert not (tmp_path / "out").exists()


_CONNECT_AT = """
import sys, time
from sdyn import tracking
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
print(tracking.connect(sys.argv[1], "sdyn")[1])
"""


def test_sweeps_creating_one_new_store_at_once_all_connect(tmp_path):
    # MLflow's schema migrations of a new SQLite file, run by three processes at the same moment;
    # unserialised, two of three failed ("table _alembic_tmp_latest_metrics already exists").
    uri, start = f"sqlite:///{tmp_path}/mlflow.db", str(time.time() + 8)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONNECT_AT, uri, start], stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    ids = {proc.communicate(timeout=300)[0].strip() for proc in procs}
    assert [proc.returncode for proc in procs] == [0, 0, 0]
    assert len(ids) == 1  # one experiment, found by the two that did not create it
    found = mlflow.tracking.MlflowClient(uri).get_experiment_by_name("sdyn")
    assert found.experiment_id in ids and found.tags["sdyn.store_version"] == "1"


def test_two_sweeps_writing_one_store_at_once_lose_nothing(tmp_path):
    a = _sweep(tmp_path, _args(tmp_path, "first", "sweep.bundle_size=1"))
    b = _sweep(tmp_path, _args(tmp_path, "second", "grid.seeds=4", "sweep.bundle_size=1"))
    for proc in (a, b):
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err
    runs = _children(tmp_path)
    first = set(plan(_args(tmp_path, "first")).hashes)
    second = set(plan(_args(tmp_path, "second", "grid.seeds=4")).hashes)
    recorded = set(runs[runs["status"] == "FINISHED"]["tags.sdyn.config_hash"])
    assert first | second <= recorded
    for name, hashes in (("first", first), ("second", second)):
        assert set(load_sweep(name, f"sqlite:///{tmp_path}/mlflow.db")["config_hash"]) == hashes
