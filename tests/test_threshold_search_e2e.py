"""``+grid=threshold`` end to end: real embedded Ray, real SQLite MLflow, real training."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys

import harness
import mlflow
import pandas as pd
import pytest

from sdyn.analysis.load import load_sweep
from sdyn.sweep import main

pytestmark = pytest.mark.slow

SEARCH = [
    "+grid=threshold",
    "grid.n=[8,16]",
    "grid.seeds=2",
    "grid.width_min=4",
    "grid.width_max=64",
    "grid.resolution=1.4142135623730951",
    "experiment.steps=300",
    "sweep.progress=false",
    "tracking.lease_s=2",
]


def _args(where, name, *extra):
    uri = f"sqlite:///{where}/mlflow.db"
    return [*SEARCH, f"tracking.uri={uri}", f"sweep.out_dir={where}/out", f"sweep.name={name}",
            *extra]  # fmt: skip


def _rounds(out: str) -> list[tuple[int, int]]:
    """(probes, to train) of each round the driver printed."""
    found = re.findall(r"round \d+: (\d+) probes?, \d+ already recorded, (\d+) to train", out)
    return [(int(a), int(b)) for a, b in found]


def _probes(where, name) -> pd.DataFrame:
    runs = load_sweep(name, f"sqlite:///{where}/mlflow.db")
    return runs.sort_values("config_hash").reset_index(drop=True)


def test_a_killed_search_resumes_with_the_same_decisions_and_a_rerun_trains_nothing(
    tmp_path, capsys, monkeypatch
):
    # Uninterrupted, in its own store: the reference decisions.
    clean = tmp_path / "clean"
    clean.mkdir()
    assert main(_args(clean, "search")) == 0
    out = capsys.readouterr().out
    reference = _rounds(out)
    assert len(reference) >= 3 and "threshold search search" in out
    # Each round bounds the probes the search has left, from what the rounds before it saw.
    found = re.findall(r"to train; (\d+)(?:-(\d+))? probes? left in the search", out)
    left = [(int(fewest), int(most or fewest)) for fewest, most in found]
    assert len(left) == len(reference)
    for r, (fewest, most) in enumerate(left):
        assert fewest <= sum(n for n, _ in reference[r:]) <= most
    assert left[-1][1] - left[-1][0] < left[0][1] - left[0][0]  # they narrow
    probes = _probes(clean, "search")
    assert len(probes) == sum(n for n, _ in reference) < probes.attrs["planned"] == 2 * 2 * 9
    report = json.loads((clean / "out" / "search" / "report.json").read_text())
    claims = {c["claim"]: c for c in report["claims"]}
    assert claims["width_threshold"]["points"] == 4  # an interval per (n, seed)
    assert claims["fit_threshold"]["points"] == 4
    md = (clean / "out" / "search" / "report.md").read_text()
    assert "against 36 for the fixed grid at the same resolution" in md
    assert "first success" in md  # the per-(n, seed) intervals
    # A cell run per (n, m) probed, rewritten when a later round probed more seeds of it.
    mlflow.set_tracking_uri(f"sqlite:///{clean}/mlflow.db")
    cells = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.`sdyn.kind` = 'cell'"
    )
    assert set(cells["status"]) == {"FINISHED"} and cells["tags.sdyn.cell"].is_unique
    hashes = [h for tag in cells["tags.sdyn.config_hashes"] for h in tag.split()]
    assert sorted(hashes) == sorted(probes["config_hash"])

    # Killed (kill -9) once its first round is recorded, then resumed by the same command.
    killed = tmp_path / "killed"
    killed.mkdir()
    proc = subprocess.Popen(
        [sys.executable, harness.KILL_AT, "round_recorded"] + _args(killed, "search"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):  # its embedded Ray
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL, stderr
    assert _rounds(stdout) == reference[:1]
    assert main(_args(killed, "search")) == 0
    resumed = _rounds(capsys.readouterr().out)
    assert [n for n, _ in resumed] == [n for n, _ in reference]
    assert resumed[0][1] == 0 and [t for _, t in resumed[1:]] == [t for t, _ in reference[1:]]
    again = _probes(killed, "search")
    assert list(again["config_hash"]) == list(probes["config_hash"])
    assert list(again["ntk_margin"]) == pytest.approx(list(probes["ntk_margin"]))

    # Once complete, the same command replays every round without training.
    assert main(_args(killed, "search")) == 0
    assert [t for _, t in _rounds(capsys.readouterr().out)] == [0] * len(reference)

    # A stop while it replays ends it at the next round (it went on through every round).
    from sdyn import driver, stops

    replay = driver.train_and_record

    def interrupted(*args, **kwargs):
        result = replay(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C during the first round's replay
        return result

    monkeypatch.setattr(driver, "train_and_record", interrupted)
    monkeypatch.setattr(stops.STOPS, "signum", None)  # this process runs other sweeps after
    assert main(_args(killed, "search")) == 130
    assert len(_rounds(capsys.readouterr().out)) == 1


def test_a_search_reuses_the_runs_a_grid_sweep_recorded(tmp_path, capsys):
    grid = [
        "+grid=width",
        "grid.n=[8,16]",
        "grid.seeds=2",
        "grid.widths=[4,8,16,32,64]",
        "experiment.steps=300",
        "sweep.progress=false",
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"sweep.out_dir={tmp_path}/out",
        "sweep.name=grid",
    ]
    assert main(grid) == 0
    capsys.readouterr()
    # Resolution 2 on [4, 64]: the ladder is the grid's widths, so every probe is recorded.
    assert main(_args(tmp_path, "search", "grid.resolution=2.0")) == 0
    out = capsys.readouterr().out
    rounds = _rounds(out)
    assert rounds and all(t == 0 for _, t in rounds)
    assert "trained 0 runs" in out
    probes = _probes(tmp_path, "search")
    assert len(probes) == sum(n for n, _ in rounds) < 20
    assert probes["parent_run_id"].nunique() == 1  # copied from the grid sweep's parent
    assert (
        probes["parent_run_id"].iloc[0]
        == load_sweep("grid", f"sqlite:///{tmp_path}/mlflow.db")["parent_run_id"].iloc[0]
    )
    # A search of m*'s criterion alone does not bracket m_fit: its report says so, and
    # fit_threshold is not measured (the widths it probed say nothing of m_fit's threshold).
    assert (
        main(_args(tmp_path, "m-star", "grid.resolution=2.0", "grid.claims=[width_threshold]")) == 0
    )
    report = json.loads((tmp_path / "out" / "m-star" / "report.json").read_text())
    absent = {c["claim"]: c["reason"] for c in report["not_measured"]}
    assert (
        "not searched" in absent["fit_threshold"] and "fit_margin <= 1" in absent["fit_threshold"]
    )
    assert {c["claim"] for c in report["claims"]} >= {"width_threshold", "width_threshold_lambda"}
