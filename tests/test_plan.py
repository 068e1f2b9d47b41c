"""``--plan``: runs, cells, bundles, what is recorded, device, estimated time and memory; nothing
written. The real command, before and after a real tiny sweep."""

import sqlite3
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

TINY = ["+grid=width", "grid.n=[8,16]", "grid.widths=[4,16]", "grid.seeds=2"]
TINY += ["experiment.steps=100", "sweep.name=tiny", "sweep.progress=false"]


def _sweep(cwd, *extra):
    return subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *TINY, *extra],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _runs(db):
    with sqlite3.connect(db) as con:
        return con.execute("select count(*) from runs").fetchone()[0]


def test_plan_says_what_a_sweep_would_do_and_writes_nothing(tmp_path):
    plan = _sweep(tmp_path, "--plan")
    assert plan.returncode == 0, plan.stderr[-2000:]
    out = plan.stdout
    assert "runs: 8 = 4 cells x 2 seeds" in out
    assert "0 already recorded, 8 to train" in out
    assert "grid: 8 runs to train in " in out and " bundles" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert rows and all("cpu" in row for row in rows)  # the device of each bundle
    assert "estimate: " in out and "peak memory" in out and "cost model (probe of" in out
    assert list(tmp_path.iterdir()) == [], "--plan must write nothing"

    assert _sweep(tmp_path).returncode == 0
    before = _runs(tmp_path / "mlflow.db")
    again = _sweep(tmp_path, "--plan")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "8 already recorded, 0 to train" in again.stdout
    assert "estimate" not in again.stdout  # nothing to train, nothing to probe
    assert _runs(tmp_path / "mlflow.db") == before
