"""``python -m sdyn.report`` on a recorded sweep (real Ray, a real SQLite MLflow store in a temp
dir): what it logs on the parent run is the report and nothing else, it reads only sweeps, and
it draws every sweep of a comparison."""

import json
import shutil

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from sdyn import report as report_cli
from sdyn.analysis import figures, kept, tables
from sdyn.analysis import report as report_mod
from sdyn.api import Figure, Panel
from sdyn.sweep import main

SWEEP = ["+grid=width", "grid.n=[8,16,32]", "grid.widths=[4,16,64]", "grid.seeds=2"]
SWEEP += ["experiment.steps=200", "sweep.progress=false", "sweep.name=tiny"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A small sweep ``tiny`` and its store; its report lies in ``out/tiny``."""
    tmp = tmp_path_factory.mktemp("report")
    uri = f"sqlite:///{tmp}/mlflow.db"
    assert main([*SWEEP, f"tracking.uri={uri}", f"sweep.out_dir={tmp}/out"]) == 0
    parent = MlflowClient(uri).search_runs(["1"], "tags.`sdyn.kind` = 'sweep'")[0].info.run_id
    return {"tmp": tmp, "uri": uri, "parent": parent}


def _report(store, *args: str) -> int:
    return report_cli.main(["--tracking-uri", store["uri"], *args])


@pytest.mark.slow
def test_a_report_logs_its_own_files_replaces_its_verdicts_and_logs_a_value_once(store, capsys):
    # The folder held another sweep's files (a sweep of the same name in another store), which
    # were logged on this sweep's parent; a verdict tag of a claim no longer reported stayed.
    client, parent, out = MlflowClient(store["uri"]), store["parent"], store["tmp"] / "redo"
    (out / "tiny").mkdir(parents=True)
    (out / "tiny" / "alignment_rate.png").write_bytes(b"another sweep's plot")
    client.set_tag(parent, "sdyn.verdict.gone", "consistent")
    assert _report(store, "--sweep", "tiny", "--out", str(out)) == 0
    assert _report(store, "--sweep", parent, "--out", str(out)) == 0  # reused, by its run id
    files = json.loads((out / "tiny" / kept.REUSE_FILE).read_text())["files"]
    logged = {f.path.removeprefix("report/") for f in client.list_artifacts(parent, "report")}
    assert logged == set(files) and "index.html" in logged
    assert "alignment_rate.png" not in logged and "events.jsonl" not in logged
    tags = client.get_run(parent).data.tags
    assert "sdyn.verdict.gone" not in tags and "sdyn.verdict.width_threshold" in tags
    history = client.get_metric_history(parent, "width_threshold.value")
    assert len(history) == 1  # the sweep's report, then two equal values: not logged again
    assert not (out / parent).exists()  # the folder is named after the sweep, not the id
    capsys.readouterr()


@pytest.mark.slow
def test_a_report_reads_only_a_sweep_whose_plan_it_can_read(store, capsys):
    client, tmp = MlflowClient(store["uri"]), store["tmp"]
    cell = client.search_runs(["1"], "tags.`sdyn.kind` = 'cell'")[0].info.run_id
    unknown = "0123456789abcdef0123456789abcdef"
    for sweep, err in [
        (cell, f"sdyn: error: run {cell} is not a sweep's parent run\n"),
        (unknown, f"sdyn: error: no sweep named {unknown!r} in {store['uri']}\n"),
    ]:
        assert _report(store, "--sweep", sweep, "--out", str(tmp / "none")) == 2
        assert capsys.readouterr().err == err
    # The artifacts out of reach: the report counted no run, and logged that as its verdicts.
    artifacts = tmp / "mlruns"
    shutil.move(artifacts, tmp / "moved")
    try:
        assert _report(store, "--sweep", "tiny", "--out", str(tmp / "none")) == 2
    finally:
        shutil.move(tmp / "moved", artifacts)
    err = capsys.readouterr().err
    assert err.startswith("sdyn: error: sweep 'tiny': its plan (plan.json) is not among the ")
    assert not (tmp / "none").exists()
    # A sweep's folder that is a file: refused before any report is written.
    (tmp / "busy").mkdir()
    (tmp / "busy" / "tiny").write_text("a file")
    assert _report(store, "--sweep", "tiny", "--out", str(tmp / "busy")) == 2
    assert "cannot write" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp / "busy").iterdir()) == ["tiny"]
    # A sweep of that name in another MLflow experiment of the store: which is meant is asked,
    # not taken to be the newest (whose report then went on the other's folder).
    other = client.create_experiment("other")
    tags = {"sdyn.kind": "sweep", "sdyn.sweep": "tiny"}
    twin = client.create_run(other, tags=tags).info.run_id
    try:
        assert _report(store, "--sweep", "tiny", "--out", str(tmp / "none")) == 2
    finally:
        client.delete_run(twin)
    assert capsys.readouterr().err == (
        "sdyn: error: sweeps named 'tiny' are in 2 MLflow experiments (other, sdyn): give the "
        "parent run id of the one to report\n"
    )
    assert not (tmp / "none").exists()


@pytest.mark.slow
def test_a_comparison_draws_each_sweeps_fit_and_a_sweep_that_measured_nothing(store, tmp_path):
    rep = report_mod.build("tiny", store["uri"], tmp_path / "tiny")
    (threshold,) = [r for r in rep.results if r.label == "width_threshold"]
    fig, ax = plt.subplots()
    threshold.claim.draw(ax, [("[1]", threshold), ("[2]", threshold)])
    fits = [h.get_label() for h in ax.get_lines() if "fit: slope" in h.get_label()]
    plt.close(fig)
    assert [label[:3] for label in fits] == ["[1]", "[2]"]  # was [1] alone
    # A sweep whose runs all failed measured no claim: its column says so (was a KeyError,
    # or the sweep was left out of the table).
    empty = [kept.Report(name, "", {}, {}, [], rep.runs, []) for name in ("failed", "failed2")]
    text = report_cli.compare(empty, tmp_path / "compare")
    header = next(line for line in text.splitlines() if line.startswith("| claim"))
    assert [cell.strip() for cell in header.split("|")[3:5]] == ["failed", "failed2"]
    text = report_cli.compare([rep, empty[0]], tmp_path / "compare", ("png", "svg", "pdf"))
    row = next(line for line in text.splitlines() if line.startswith("| width_threshold "))
    assert row.replace(" ", "").endswith("|notmeasured|")
    assert (tmp_path / "compare" / "width_threshold.pdf").is_file()  # --format pdf too


def test_a_figure_line_whose_runs_all_failed_is_left_out():
    # Its runs recorded no curve: an argmax of an empty sequence, after training.
    runs = pd.DataFrame({"config_hash": ["a", "b"], "opt": ["gd", "sgd"], "seed": [0, 0]})
    curves = pd.DataFrame({"config_hash": ["a"] * 3, "step": [0, 1, 2], "loss": [1.0, 0.5, 0.2]})
    figure = Figure("f", "F", (Panel("loss", "L"),), "opt")
    (line,) = figures.figure_lines(figure, runs, curves)["loss"]
    assert line.value == "gd"
    assert np.allclose(line.curve["median"], [1.0, 0.5, 0.2])


def test_a_stopped_sweep_says_so_with_its_setting_and_latex_escapes_angles():
    runs = pd.DataFrame({"status": ["converged"] * 3})
    runs.attrs = {"planned": 8, "config": {"grid.seeds": 2}, "stopped": True}
    assert report_mod.setting(runs)["budget"] == (
        "steps per run as the grid sets them, 8 runs (2 seeds per grid point); the sweep was "
        "stopped: 3 runs recorded"
    )
    assert tables.latex_escape("a<b>|c") == r"a\textless{}b\textgreater{}\textbar{}c"
