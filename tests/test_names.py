"""Names and reports carry the configuration: default names spell what differs from the
defaults, every report states the resolved setting, compare keeps the user's order."""

import json
import re
import shutil
import subprocess

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from sdyn import compose, names
from sdyn import report as report_cli
from sdyn.analysis.report import setting
from sdyn.sweep import main


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        (["+grid=width"], "ntk-width-sphere"),
        (
            ["+grid=width", "experiment.activation=relu", "experiment.eps=1e-2"],
            "ntk-width-sphere-relu-eps1e-2",
        ),
        (
            ["+grid=width", "grid.seeds=3", "experiment.steps=2000"],
            "ntk-width-sphere-steps2000-seeds3",
        ),
        (["experiment=score", "+grid=samples"], "score-samples-gmm"),
        (
            ["+grid=width", "data=diabetes", "experiment.lr_scale=0.5"],
            "ntk-width-diabetes-lr_scale0.5",
        ),
    ],
)
def test_default_names_spell_the_settings(overrides, name):
    assert names.default_name(compose.load(overrides)) == name


def test_what_cannot_be_spelled_is_one_stable_digest():
    one = names.default_name(compose.load(["+grid=width", "grid.n=[8,16]", "grid.seeds=2"]))
    assert re.fullmatch(r"ntk-width-sphere-seeds2-[0-9a-f]{6}", one)
    assert one == names.default_name(compose.load(["+grid=width", "grid.seeds=2", "grid.n=[8,16]"]))
    other = names.default_name(compose.load(["+grid=width", "grid.n=[8,32]", "grid.seeds=2"]))
    assert other != one


def test_parent_run_names_lead_with_what_sets_the_sweep_apart():
    # MLflow's runs table shows a run name's first ~20 characters.
    relu = compose.load(["+grid=width", "experiment.activation=relu", "experiment.eps=1e-2"])
    assert names.run_name(names.default_name(relu), relu) == "relu-eps1e-2 (ntk-width-sphere)"
    plain = compose.load(["+grid=width"])
    assert names.run_name(names.default_name(plain), plain) == "ntk-width-sphere"
    assert names.run_name("tiny", relu) == "tiny"  # a name of the user's own stays as it is


TINY = ["+grid=width", "grid.n=[8,16]", "grid.widths=[4,16]", "grid.seeds=2"]
TINY += ["experiment.steps=100", "sweep.progress=false"]


@pytest.mark.slow
def test_reports_state_the_setting_and_compare_keeps_the_users_order(tmp_path, capsys):
    """In the relu sweep every width threshold lies above the widths swept (right-censored):
    width_threshold has no estimate and no finite interval end. Changed rule (issue 41): a
    part where no value resolves is "not measured", without a plot (it was a NaN row with an
    empty plot); the figures compared as SVG are fit_threshold's, measured in both sweeps."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    common = [*TINY, f"tracking.uri={uri}", f"sweep.out_dir={tmp_path}/out"]
    relu = [*common, "experiment.activation=relu"]
    relu_name = names.default_name(compose.load(relu))
    assert relu_name.startswith("ntk-width-sphere-relu-steps100-seeds2-")
    # A sweep that took that name with another plan: the default-named one gets its own.
    assert main([*common, f"sweep.name={relu_name}"]) == 0
    assert main(relu) == 0
    out = capsys.readouterr().out
    unique = re.findall(r"sdyn: sweep (\S+): 8 runs", out)[-1]
    assert unique.startswith(f"{relu_name}-") and len(unique) == len(relu_name) + 7
    assert main(relu) == 0  # the same command finds the same sweep: nothing trained
    assert (
        f"sdyn: sweep {unique}: 8 runs, 8 already recorded, 0 to train" in capsys.readouterr().out
    )

    rep = json.loads((tmp_path / "out" / unique / "report.json").read_text())
    assert "activation=relu" in rep["setting"]["experiment"]
    assert (
        rep["setting"]["differs"]
        == "activation=relu, steps=100, n=[8, 16], widths=[4, 16], seeds=2"
    )
    assert rep["setting"]["budget"] == "100 steps per run, 8 runs (2 seeds per grid point)"
    assert rep["config"]["grid.widths"] == "[4, 16]" and "experiment.m" not in rep["config"]
    md = (tmp_path / "out" / unique / "report.md").read_text()
    assert "## Setting" in md and "- **grid**: width (n=[8, 16]" in md
    tex = (tmp_path / "out" / unique / "report.tex").read_text()
    # The caption names the interval methods of this table's claims, and only those.
    assert "relu" in tex and "Intervals: 95\\% (profile likelihood) unless" in tex

    # Compare in the order given, not sorted: the relu sweep first.
    args = ["--sweep", unique, "--sweep", relu_name, "--tracking-uri", uri, "--no-log"]
    capsys.readouterr()
    assert report_cli.main([*args, "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert f"sdyn: report in {tmp_path}/cmp/{unique}/index.html\n" in out
    assert out.endswith(f"sdyn: comparison in {tmp_path}/cmp/compare/index.html\n")
    compare = (tmp_path / "cmp" / "compare" / "compare.md").read_text()
    header = next(line for line in compare.splitlines() if line.startswith("| claim"))
    assert header.index(unique) < header.index(relu_name + " ")
    assert f"- [1] {unique}: ntk/width/sphere; activation=relu" in compare

    # The store's sweeps, with their runs, status, date and verdicts (tags on each parent).
    assert report_cli.main(["--list", "--tracking-uri", uri]) == 0
    listing = capsys.readouterr().out
    rows = [line for line in listing.splitlines() if line.startswith("| ntk-")]
    assert len(rows) == 2
    assert all(re.search(r"\|\s+8\s+\|\s+FINISHED\s+\|", row) for row in rows), rows
    assert all("outside assumptions" in row for row in rows)
    assert "activation=relu" in next(row for row in rows if row.startswith(f"| {unique} "))
    # An --out that takes no file: one line, exit 2, before fitting (it was a traceback after).
    assert report_cli.main(["--sweep", unique, "--tracking-uri", uri, "--out", "/proc/x"]) == 2
    assert (
        capsys.readouterr().err
        == f"sdyn: error: --out: cannot write /proc/x/{unique}/index.html (at /proc)\n"
    )
    # The MLflow UI opens the experiment on its runs (model development), not GenAI traces.
    experiment = MlflowClient(uri).get_experiment_by_name("sdyn")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    found = MlflowClient(uri).search_runs(
        [experiment.experiment_id], "tags.`sdyn.kind` = 'sweep'"
    )  # fmt: skip
    shown = {run.data.tags["sdyn.sweep"]: run.info.run_name for run in found}
    assert shown[unique] == f"{unique.removeprefix('ntk-width-sphere-')} (ntk-width-sphere)"

    # Both sweeps' tables in one article: distinct labels, no overfull box, figures as SVG too.
    assert not (tmp_path / "out" / unique / "width_threshold.svg").exists()
    for name in (unique, relu_name):
        assert (tmp_path / "out" / name / "fit_threshold.svg").stat().st_size > 0
        tex = (tmp_path / "out" / name / "report.tex").read_text()
        assert f"\\label{{tab:sdyn:{name}}}" in tex
    _two_tables_compile(tmp_path / "out", [unique, relu_name])


def _two_tables_compile(out, sweeps):
    if shutil.which("pdflatex") is None:  # .ci/run installs it; a bare dev machine may not
        pytest.skip("pdflatex not installed")
    inputs = "".join(f"\\input{{{name}/report.tex}}\n" for name in sweeps)
    (out / "doc.tex").write_text(
        "\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
        f"{inputs}\\end{{document}}\n"
    )
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    log = (out / "doc.log").read_text()
    assert "Overfull \\hbox" not in log and "multiply defined" not in log, log[-3000:]


def test_setting_counts_one_seed_and_one_run_in_the_singular():
    """The budget line went into report.tex as "1 runs (1 seeds per grid point)"."""
    runs = pd.DataFrame({"seed": [0]})
    runs.attrs = {"config": {"experiment.steps": "50", "grid.seeds": "1"}, "planned": 1}
    assert setting(runs)["budget"] == "50 steps per run, 1 run (1 seed per grid point)"
