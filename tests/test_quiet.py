"""Quiet output: nothing above the results that the user need not act on.

A real sweep (subprocess, real Ray, SQLite MLflow) with ``sweep.quiet=true`` prints nothing;
the loaders, used as a notebook would use them (a fresh interpreter that never imported
``sdyn.sweep``), print no MLflow progress bar and no pandas warning.
"""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

TINY = [
    "+grid=width",
    "grid.n=[8,16]",
    "grid.widths=[4,16]",
    "grid.seeds=2",
    "experiment.steps=100",
    "sweep.name=tiny",
]

NOTEBOOK = """
from sdyn.analysis.load import load_curves, load_sweep
runs = load_sweep("tiny", "sqlite:///mlflow.db")
curves = load_curves(runs)
print(len(runs), curves["config_hash"].nunique())
"""


def test_quiet_sweep_and_notebook_loaders_print_nothing_extra(tmp_path):
    sweep = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *TINY, "sweep.quiet=true"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert sweep.stdout == "" and sweep.stderr == "", sweep.stdout + sweep.stderr
    assert (tmp_path / "outputs" / "tiny" / "report.md").stat().st_size > 0

    # Without quiet, a sweep that trains (a third seed: Ray starts) prints on stderr only its
    # progress bar: no library notice (Ray 2.60 announced its default token authentication,
    # and a new MLflow store its table creation, here).
    more = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *TINY[:3], "grid.seeds=3", *TINY[4:-1]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert more.returncode == 0, more.stderr[-2000:]
    lines = [line for line in more.stderr.replace("\r", "\n").splitlines() if line.strip()]
    assert lines and all(line.startswith("training:") for line in lines), more.stderr[-2000:]
    # Run again with every run recorded, it prints nothing on stderr: no bar, no Ray.
    again = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *TINY],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0 and again.stderr == "", again.stderr[-2000:]

    notebook = subprocess.run(
        [sys.executable, "-c", NOTEBOOK], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert notebook.returncode == 0, notebook.stderr[-2000:]
    assert notebook.stdout.split() == ["8", "8"]
    assert "Downloading artifacts" not in notebook.stderr, notebook.stderr[-500:]
    assert notebook.stderr == "", notebook.stderr[-2000:]  # no PerformanceWarning either
