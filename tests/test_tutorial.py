"""The tutorial "Check your own theorem" (docs/tutorial.md), run as a reader runs it: in an empty
directory, the files the page shows are saved (the files its snippets include), then its bash
blocks run as written, in order, in a virtual environment of the reader's (`pip` and `python`
are its own; sdyn comes from this interpreter's site-packages); its wrong-claim fixture reads
*violated*; and the built site's page holds the files' code."""

import html
import os
import re
import shutil
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


def _shown() -> list[Path]:
    """The files the page shows whole: its snippet includes (pymdownx.snippets)."""
    return [REPO / path for path in re.findall(r'^--8<-- "(.+)"$', TUTORIAL.read_text(), re.M)]


def _env(**extra: str) -> dict:
    # The store is the directory's own (an earlier test's mlflow.set_tracking_uri sets this);
    # a pytest the page runs is not a worker of this one.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PYTEST_"))}
    return {**env, **extra}


def _row(stdout: str, claim: str) -> str:
    (row,) = [line for line in stdout.splitlines() if line.startswith(f"| {claim} ")]
    return row


@pytest.mark.slow
def test_the_tutorial_runs_from_an_empty_directory_to_a_verdict(tmp_path):
    venv, home = tmp_path / "venv", tmp_path / "home"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    home.mkdir()
    for path in _shown():  # the reader saves what the page shows
        shutil.copy2(path, home / path.name)
    assert sorted(p.name for p in home.iterdir()) == [
        "pyproject.toml",
        "sdyn_lsq.py",
        "test_sdyn_lsq.py",
    ]
    (tmp_path / "pytest").mkdir()
    env = _env(
        PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        PYTEST_DEBUG_TEMPROOT=str(tmp_path / "pytest"),  # the page's pytest keeps to tmp_path
    )
    commands = _commands()
    assert commands[0] == "pip install -e ."
    out = {}
    for command in commands:
        proc = subprocess.run(
            command, shell=True, cwd=home, capture_output=True, text=True, timeout=600, env=env
        )
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        out[command] = proc.stdout
    help_text = out["python -m sdyn.sweep experiment=lsq +grid=samples --help"]
    assert "experiment.eta_scale = 1.0" in help_text and "the theorem needs <= 1" in help_text
    assert "nothing was written" in out["python -m sdyn.sweep experiment=lsq +grid=samples --plan"]
    sweep = out["python -m sdyn.sweep experiment=lsq +grid=samples"]
    for claim in ("min_norm_rate", "interpolant_norm"):
        assert "| consistent " in _row(sweep, claim), sweep
    assert "largest ratio" in _row(sweep, "min_norm_rate")  # the slack of the bound
    report = home / "outputs" / "lsq-samples-none"
    for name in ("index.html", "report.json", "min_norm_rate.png", "interpolant_norm.png"):
        assert (report / name).is_file(), name
    assert (report / "distance.png").is_file()  # the experiment's figure
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("sdyn").experiment_id])
    (parent,) = [
        r for r in runs if r.data.tags.get("mlflow.runName", "").endswith("lsq-samples-none")
    ]
    assert parent.data.tags["sdyn.verdict.min_norm_rate"] == "consistent"
    cells = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(cells) == 5  # one child run per n
    wide = out["python -m sdyn.sweep --sweep lsq_wide"]  # the plugin's named sweep
    assert "setting: lsq/samples/none; d=2048" in wide and (home / "outputs" / "lsq_wide").is_dir()
    assert " 1 passed" in out["python -m pytest test_sdyn_lsq.py"]  # sdyn.testing.run_sweep


def test_the_built_tutorial_page_shows_the_plugins_code(tmp_path):
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "--site-dir", site],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**_env(), "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = html.unescape(re.sub(r"<[^>]+>", "", (site / "tutorial" / "index.html").read_text()))
    shown = _shown()
    assert [p.name for p in shown] == ["sdyn_lsq.py", "pyproject.toml", "test_sdyn_lsq.py"]
    for path in shown:
        assert path.read_text().strip() in page, path
    assert "--8<--" not in page and "--8 <" not in page


WRONG = '''
"""The lsq example with one deliberately wrong claim: ||w*|| ~ n^1 (the truth is n^1/2)."""

import dataclasses

from sdyn.analysis.kinds import PowerLaw
from sdyn_lsq import EXPERIMENT as LSQ

WRONG = PowerLaw(id="interpolant_norm_linear", statement="(wrong on purpose) ||w*|| grows like n",
                 source="a test fixture", quantity="interpolant_norm",
                 axis="experiment.n", theory=1.0, direction="==", tolerance=0.05)
EXPERIMENT = dataclasses.replace(LSQ, claims=(*LSQ.claims, WRONG))
'''


@pytest.mark.slow
def test_a_deliberately_wrong_claim_reads_violated(tmp_path):
    # Two modules in the working directory: the example, and the fixture that imports it.
    (tmp_path / "wrong_lsq.py").write_text(textwrap.dedent(WRONG))
    shutil.copy2(REPO / "examples" / "lsq" / "sdyn_lsq.py", tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", "experiment=wrong_lsq", "+grid=samples"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| violated " in _row(proc.stdout, "interpolant_norm_linear"), proc.stdout
    assert "| consistent " in _row(proc.stdout, "interpolant_norm")
