"""Clean stops: a real sweep (subprocess, embedded Ray, SQLite MLflow) sent SIGINT or SIGTERM
while it trains exits 130 or 143 with one line, its parent run KILLED, no cell run left
RUNNING, and no Ray process it started alive after it."""

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

# Long enough to be training when the signal comes: 144 runs up to n = 256, m = 4096 (about
# 60 s of training on a 2-core machine; the signal comes after 8 s).
LONG = ["+grid=width", "grid.n=[64,128,256]", "grid.widths=[1024,4096]", "grid.seeds=24"]
LONG += ["sweep.progress=false", "sweep.name=long"]


def _ray_processes_of(pid: int) -> list[str]:
    """Command lines of live processes of the Ray session a driver ``pid`` started: the
    session directory's name ends in the driver's pid."""
    ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if "session_" in line and f"_{pid}" in line]


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_stops_the_sweep_cleanly(tmp_path, signum, status):
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "sdyn.sweep", *LONG],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:  # the sweep has its parent and is about to start Ray
        if "to train" in line:
            break
    deadline = time.time() + 60
    while not _ray_processes_of(proc.pid) and time.time() < deadline:
        time.sleep(0.5)
    assert _ray_processes_of(proc.pid), "the sweep started no Ray processes"
    time.sleep(8)  # into the training
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err[-3000:]
    assert "sdyn: trained" not in out, "the signal came after the training"
    assert "Traceback" not in err, err[-3000:]
    lines = err.strip().splitlines()
    assert lines[-1].startswith(f"sdyn: stopped by {signal.Signals(signum).name}"), err[-3000:]
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        runs = db.execute("select name, status from runs").fetchall()
        stopped = db.execute("select value from tags where key = 'sdyn.stopped'").fetchall()
    assert ("long", "KILLED") in runs
    assert all(status != "RUNNING" for _, status in runs), runs
    assert stopped == [(signal.Signals(signum).name,)]
    deadline = time.time() + 20  # ray.shutdown has ended them; ps may lag a moment
    while _ray_processes_of(proc.pid) and time.time() < deadline:
        time.sleep(0.5)
    assert _ray_processes_of(proc.pid) == []


def test_a_signal_while_reporting_lets_the_report_finish(tmp_path):
    """A stop that comes while the report is drawn waits for it (a plot cut short leaves
    half-built matplotlib state whose clean-up prints a traceback), then stops as in training."""
    short = ["+grid=width", "grid.n=[8,16]", "grid.widths=[4,64]", "grid.seeds=1"]
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "sdyn.sweep", *short, "sweep.name=short"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stdout:
        if line.startswith("sdyn: trained"):
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("sdyn: stopped by SIGTERM"), err[-3000:]
    report = tmp_path / "outputs" / "short"
    assert json.loads((report / "report.json").read_text())["claims"]
    assert sorted(p.name for p in report.glob("*.png"))  # the figures were drawn
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        runs = db.execute("select name, status from runs").fetchall()
    assert ("short", "KILLED") in runs
