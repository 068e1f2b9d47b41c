"""``--plan``: runs, cells, bundles, what is recorded, device, estimated time and memory; nothing
written. The real command, before and after a real tiny sweep."""

import re
import sqlite3
import subprocess
import sys

import pytest
import yaml

from sdyn import sweep

pytestmark = pytest.mark.slow

TINY = ["+grid=width", "grid.n=[8,16]", "grid.widths=[4,16]", "grid.seeds=2"]
TINY += ["experiment.steps=100", "sweep.name=tiny", "sweep.progress=false"]


def _sweep(cwd, *extra, grid=TINY):
    return subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *grid, *extra],
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
    assert "each run to the step its experiment forecasts it stops at" in out  # not its budget
    assert list(tmp_path.iterdir()) == [], "--plan must write nothing"

    assert _sweep(tmp_path).returncode == 0
    before = _runs(tmp_path / "mlflow.db")
    again = _sweep(tmp_path, "--plan")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "8 already recorded, 0 to train" in again.stdout
    assert "estimate" not in again.stdout  # nothing to train, nothing to probe
    assert _runs(tmp_path / "mlflow.db") == before


def test_cfg_shows_the_expanded_grid_and_the_run_count(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert sweep.main(["+grid=width", "grid.n=[8,32]", "grid.widths=[64,4,16]", "--cfg"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["grid"]["n"] == [8, 32]  # still valid YAML: the rest is comments
    assert "# expands to 30 runs = 6 cells x 5 seeds" in out
    assert "#   experiment.n: 2 values, 8, 32" in out
    assert "#   experiment.m: 3 values, 4, 16, 64" in out  # by value, not as text
    assert list(tmp_path.iterdir()) == []
    one = ["+grid=width", "grid.n=[8]", "grid.widths=[4]", "grid.seeds=1"]
    assert sweep.main([*one, "--cfg"]) == 0
    assert "# expands to 1 run = 1 cell x 1 seed\n" in capsys.readouterr().out
    assert sweep.main([*one, "--plan"]) == 0
    out = capsys.readouterr().out
    assert "runs: 1 = 1 cell x 1 seed" in out and ": 1 run to train in 1 bundle" in out


def test_help_lists_the_fields_the_overrides_choose(capsys):
    assert sweep.main(["experiment=score", "grid.seeds=3", "+grid=samples", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: python -m sdyn.sweep" in out and "--plan" in out
    assert "fields of experiment=score:" in out and "fields of data=gmm:" in out
    # the value after the overrides, with the note from the schema's source
    assert re.search(r"experiment\.T0 = 0\.02 +# start of the training/evaluation window", out)
    grid = r"fields of \+grid=samples:\n  grid\.n = \[1024,1448,2048,2896,4096\].*\n"
    grid += r"  grid\.seeds = 3"
    assert re.search(grid, out)
    assert "fields of +grid=samples_tied:" in out  # every grid of the experiment, with defaults
    assert "experiment.eps" not in out  # the NTK experiment's fields are not the score's


def test_help_with_a_typo_is_one_line_and_exit_2(capsys):
    assert sweep.main(["+grid=width", "grid.widht=3", "--help"]) == 2
    err = capsys.readouterr().err
    assert err == "sdyn: error: unknown key grid.widht; did you mean grid.widths?\n"


def test_a_search_plan_bounds_its_cost_from_both_sides(tmp_path):
    search = ["+grid=threshold", "grid.n=[8,16]", "grid.width_min=4", "grid.width_max=256"]
    plan = _sweep(tmp_path, "experiment.steps=2000", "--plan", grid=search)
    assert plan.returncode == 0, plan.stderr[-2000:]
    upper = re.search(r"for the (\d+) of them that may cost the most", plan.stdout)
    lower = re.search(
        r"at least \(the probes of the cheapest threshold positions, (\d+) runs\): "
        r"\d+ (s|min) on \d+ CPUs",
        plan.stdout,
    )
    assert upper and lower, plan.stdout
    # Every condition's search probes at least its ladder's middle rung; none probes them all.
    assert 2 <= int(lower[1]) < int(upper[1])
    assert list(tmp_path.iterdir()) == [], "--plan must write nothing"

    # Once a sweep searched n 8, the plan replays its outcomes: n 8's search is over.
    n8 = [*search[:1], "grid.n=[8]", *search[2:]]
    done = _sweep(tmp_path, "experiment.steps=2000", grid=n8)
    assert done.returncode == 0, done.stderr[-2000:]
    over = _sweep(tmp_path, "experiment.steps=2000", "--plan", grid=n8)
    assert "end every condition's search: it trains nothing more" in over.stdout, over.stdout
    again = _sweep(tmp_path, "experiment.steps=2000", "--plan", grid=search)
    assert again.returncode == 0, again.stderr[-2000:]
    assert re.search(
        r"costliest threshold positions that the \d+ recorded outcomes allow", again.stdout
    )
    shapes = [
        line.split()[2] for line in again.stdout.splitlines() if re.match(r" +\d+ +\d+ +n=", line)
    ]
    assert shapes and set(shapes) == {"n=16"}, again.stdout
