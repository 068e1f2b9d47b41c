"""The tutorial "Check your own theorem" (docs/tutorial.md), run as a reader runs it: its bash
blocks in order, in an empty directory, with the example plugin (examples/lsq) installed by its
own command; then its wrong-claim fixture reads *violated*."""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parent.parent
TUTORIAL = REPO / "docs" / "tutorial.md"
SERVERS = ("mlflow ui",)  # long-running: the test reads the store instead


def _commands() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", TUTORIAL.read_text(), flags=re.DOTALL)
    lines = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    return [line for line in lines if not line.startswith(SERVERS)]


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    command = command.replace("examples/lsq", str(REPO / "examples" / "lsq"))
    command = command.replace("python ", f"{sys.executable} ", 1)
    if command.startswith("pip "):
        command = f"{sys.executable} -m {command}"
    # The store is the directory's own (an earlier test's mlflow.set_tracking_uri sets this).
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run(
        command, shell=True, cwd=cwd, capture_output=True, text=True, timeout=600, env=env
    )


def _row(stdout: str, claim: str) -> str:
    (row,) = [line for line in stdout.splitlines() if line.startswith(f"| {claim} ")]
    return row


@pytest.mark.slow
def test_the_tutorial_runs_from_an_empty_directory_to_a_verdict(tmp_path):
    commands = _commands()
    assert commands[0] == "pip install -e examples/lsq"
    out = {}
    for command in commands:
        proc = _run(command, tmp_path)
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
        out[command] = proc.stdout
    help_text = out["python -m sdyn.sweep experiment=lsq +grid=samples --help"]
    assert "experiment.eta_scale = 1.0" in help_text and "the theorem needs <= 1" in help_text
    assert "nothing was written" in out["python -m sdyn.sweep experiment=lsq +grid=samples --plan"]
    sweep = out["python -m sdyn.sweep experiment=lsq +grid=samples"]
    for claim in ("min_norm_rate", "interpolant_norm"):
        assert "| consistent " in _row(sweep, claim), sweep
    assert "largest ratio" in _row(sweep, "min_norm_rate")  # the slack of the bound
    report = tmp_path / "outputs" / "lsq-samples-none"
    for name in ("index.html", "report.json", "min_norm_rate.png", "interpolant_norm.png"):
        assert (report / name).is_file(), name
    assert (report / "distance.png").is_file()  # the experiment's figure
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("sdyn").experiment_id])
    (parent,) = [
        r for r in runs if r.data.tags.get("mlflow.runName", "").endswith("lsq-samples-none")
    ]
    assert parent.data.tags["sdyn.verdict.min_norm_rate"] == "consistent"
    cells = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(cells) == 5  # one child run per n


WRONG = '''
"""The lsq example with one deliberately wrong claim: ||w*|| ~ n^1 (the truth is n^1/2)."""

import dataclasses

from sdyn.api import Claim
from sdyn_lsq import EXPERIMENT as LSQ

WRONG = Claim(id="interpolant_norm_linear", statement="(wrong on purpose) ||w*|| grows like n",
              source="a test fixture", kind="power_law", quantity="interpolant_norm",
              axis="experiment.n", theory=1.0, direction="==", tolerance=0.05)
EXPERIMENT = dataclasses.replace(LSQ, claims=(*LSQ.claims, WRONG))
'''


@pytest.mark.slow
def test_a_deliberately_wrong_claim_reads_violated(tmp_path):
    (tmp_path / "wrong_lsq.py").write_text(textwrap.dedent(WRONG))
    proc = _run("pip install -e examples/lsq", tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = _run("python -m sdyn.sweep experiment=wrong_lsq +grid=samples", tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| violated " in _row(proc.stdout, "interpolant_norm_linear"), proc.stdout
    assert "| consistent " in _row(proc.stdout, "interpolant_norm")
