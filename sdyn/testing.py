"""Testing a plugin, in the spirit of pytest's ``pytester``: one call runs a sweep as a user runs
it and returns its verdicts.

::

    from sdyn.testing import run_sweep

    def test_my_theorem(tmp_path):
        verdicts = run_sweep(["experiment=my_theorem", "+grid=small", "grid.seeds=3"], tmp_path)
        assert verdicts.loc["my_claim", "verdict"] == "consistent"

Nothing is mocked: ``python -m sdyn.sweep`` runs in a new process, with real Ray and a real
MLflow store, and the verdicts are read from the report the sweep wrote (``report.json``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd


def run_sweep(overrides: list[str], tmp_path: Path, timeout: float = 600) -> pd.DataFrame:
    """Run ``python -m sdyn.sweep OVERRIDES`` in ``tmp_path`` and return its verdict table.

    ``overrides``: the command line's arguments, Hydra overrides (``+grid=NAME``,
    ``grid.seeds=3``) or a named sweep (``--sweep NAME``).

    The sweep runs in ``tmp_path`` (its store ``mlflow.db``, its report under ``outputs/``),
    with this process's import path, so an experiment the test can import (an installed plugin,
    or a module named by path, ``experiment=my_module``) trains there too; the progress bar is
    off. Keep the grid tiny: every run trains.

    Returns:
        One row per claim (index ``claim``, its label: the claim's id, or ``id[value]`` for
        each value of its ``by``, a ``PairedRatio`` always): ``verdict``, ``value``,
        ``ci_low``, ``ci_high`` (the fitted value and its 95% interval), ``theory``,
        ``direction``, ``reason``, ``slack``, ``runs`` and the rest of ``report.json``'s fields
        for a claim; a claim not measured has the verdict
        ``"not measured"`` and its reason, the other fields NaN.

    Raises:
        AssertionError: the sweep exited non-zero (bad input, a broken plugin, failed runs):
            the message holds its exit status and the end of its stderr; or it wrote no
            report (``--plan``, ``--cfg``, ``--help``).
    """
    path = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    env = {**os.environ, "PYTHONPATH": path}
    env.pop("MLFLOW_TRACKING_URI", None)  # the store is tmp_path's own
    command = [sys.executable, "-m", "sdyn.sweep", *overrides, "sweep.progress=false"]
    proc = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"python -m sdyn.sweep {' '.join(overrides)} exited {proc.returncode}:\n"
            f"{proc.stderr[-3000:]}"
        )
    written = sorted((tmp_path / "outputs").glob("*/report.json"), key=os.path.getmtime)
    if not written:
        raise AssertionError(f"python -m sdyn.sweep {' '.join(overrides)} wrote no report")
    report = json.loads(written[-1].read_text())
    skipped = [{**row, "verdict": "not measured"} for row in report["not_measured"]]
    return pd.DataFrame([*report["claims"], *skipped]).set_index("claim")
