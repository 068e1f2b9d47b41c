"""The wheel, as a user installs it: built from the repository, installed into a fresh virtual
environment outside it, and run from an empty directory: ``--help``, ``--plan`` of a named
sweep of sdyn's, and the example plugin's named sweep (examples/lsq, installed from its own
directory) to its verdicts. sdyn must come from the wheel, not the checkout."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

REPO = Path(__file__).resolve().parent.parent
# What the wheel is built from (pyproject.toml's readme, license-files and packages).
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "sdyn")


def _run(args: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_the_wheel_runs_from_an_empty_directory(tmp_path):
    # The dependencies come from this interpreter's site-packages (--system-site-packages):
    # installing torch, Ray and MLflow again would take minutes. PYTHONPATH would put the
    # checkout first, so it goes; the venv's site-packages come before the system's.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLFLOW_TRACKING_URI")}
    # Copies: building writes build/ and *.egg-info beside the sources.
    skip = shutil.ignore_patterns("__pycache__")
    source, plugin = tmp_path / "source", tmp_path / "lsq"
    source.mkdir()
    for name in SOURCES:
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, source / name, **({"ignore": skip} if copy is shutil.copytree else {}))
    shutil.copytree(REPO / "examples" / "lsq", plugin, ignore=skip)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    _run([*build, "-w", "dist", source, plugin], tmp_path, env)  # the plugin's wheel too
    wheels = sorted((tmp_path / "dist").glob("*.whl"))
    assert [w.name.split("-")[0] for w in wheels] == ["sdyn", "sdyn_lsq"], wheels
    venv = [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", "venv"]
    _run(venv, tmp_path, env)  # this pip installs into it: ensurepip would take 5 s
    venv_python = tmp_path / "venv" / "bin" / "python"
    install = [sys.executable, "-m", "pip", "--python", venv_python, "install", "--no-deps"]
    _run([*install, "--ignore-installed", *wheels], tmp_path, env)

    # The venv inside some repository: its commit is not the wheel's (it was recorded as such).
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    _run([*git, "init", "-q"], tmp_path, env)
    _run([*git, "commit", "-q", "--allow-empty", "-m", "other"], tmp_path, env)
    empty = tmp_path / "empty"
    empty.mkdir()
    where = _run([venv_python, "-c", "import sdyn; print(sdyn.__file__)"], empty, env).stdout
    assert Path(where.strip()).is_relative_to(tmp_path / "venv"), where
    sweep = [venv_python, "-m", "sdyn.sweep"]
    help_text = _run([*sweep, "+grid=width", "--help"], empty, env).stdout
    assert "cluster: address, local" in help_text and "implicit_fig3" in help_text
    assert "experiment: attention_regression, implicit_bias, lsq, ntk, score" in help_text
    plan = _run([*sweep, "--sweep", "implicit_fig3", "--plan"], empty, env).stdout
    assert "nothing was written" in plan and "implicit_fig3" in plan
    assert sorted(p.name for p in empty.iterdir()) == []
    out = _run([*sweep, "--sweep", "lsq_wide", "sweep.progress=false"], empty, env).stdout
    assert "setting: lsq/samples/none; d=2048" in out, out
    assert "verdicts: 3 consistent" in out, out
    assert (empty / "outputs" / "lsq_wide" / "report.json").is_file()
    client = MlflowClient(f"sqlite:///{empty}/mlflow.db")
    sweeps = [client.get_experiment_by_name("sdyn").experiment_id]
    (parent,) = client.search_runs(sweeps, "tags.`sdyn.kind` = 'sweep'")
    assert parent.data.tags["mlflow.source.git.commit"] == "unknown"
