"""Clean stops: a real sweep (subprocess, embedded Ray, SQLite MLflow) sent SIGINT or SIGTERM
while it trains exits 130 or 143 with one line, its parent run KILLED, no cell run left
RUNNING, and no Ray process it started alive after it."""

import signal
import sqlite3
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

# Long enough to be training when the signal comes (30,000 GD steps at n = 64, m = 1024).
LONG = ["+grid=width", "grid.n=[8,16,32,64]", "grid.widths=[4,64,1024]", "grid.seeds=2"]
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
