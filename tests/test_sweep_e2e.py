"""End to end through real embedded Ray and a real SQLite MLflow store in a temp dir."""

import json
import shutil
import subprocess

import mlflow
import pandas as pd
import pytest

from sdyn.analysis.load import load_curves, load_sweep
from sdyn.analysis.verdict import VERDICTS
from sdyn.experiments import ntk
from sdyn.sweep import main

pytestmark = pytest.mark.slow


def _children(uri):
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(search_all_experiments=True, filter_string="tags.`sdyn.kind` = 'run'")


def test_tiny_width_sweep_records_reports_and_resumes(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = [
        "+grid=width",
        "grid.n=[8,16,32]",
        "grid.widths=[4,16,64,256]",
        "grid.seeds=2",
        "experiment.steps=300",
        f"tracking.uri={uri}",
        f"sweep.out_dir={tmp_path}/out",
        "sweep.name=tiny",
        "sweep.progress=false",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "24 to train" in out and "width_threshold" in out

    children = _children(uri)
    assert len(children) == 3 * 4 * 2
    assert set(children["status"]) == {"FINISHED"}
    assert children["tags.sdyn.config_hash"].is_unique
    assert children["tags.mlflow.parentRunId"].nunique() == 1
    assert (children["metrics.lambda_min"] > -1e-9).all()  # H(0) is PSD
    assert (children["metrics.lambda_max"] > 0).all()

    report = json.loads((tmp_path / "out" / "tiny" / "report.json").read_text())
    claims = {c["claim"]: c for c in report["claims"]}
    absent = {c["claim"]: c["reason"] for c in report["not_measured"]}
    assert set(claims) | set(absent) == {c.id for c in ntk.CLAIMS}
    assert {"width_threshold", "fit_threshold", "weight_movement", "linear_rate"} <= set(claims)
    for c in claims.values():
        assert c["verdict"] in VERDICTS[:4] and c["reason"]
    # 300 steps are below Thm 4.2's step count at n = 32: no threshold verdict on the theorem.
    assert claims["width_threshold"]["verdict"] == "outside assumptions"
    assert "budget" in claims["width_threshold"]["reason"]
    assert report["evidence_rule"] and "not measured" in report["verdict_legend"]
    for name in ("report.md", "report.tex", "width_threshold.png", "curves.png"):
        assert (tmp_path / "out" / "tiny" / name).stat().st_size > 0
    _compiles_in_a_minimal_latex_document(tmp_path / "out" / "tiny" / "report.tex")

    runs = load_sweep("tiny", uri)
    assert len(runs) == 24 and set(runs["experiment.n"]) == {8, 16, 32}
    curves = load_curves(runs, uri)
    assert set(curves["config_hash"]) == set(runs["config_hash"])
    assert {"step", "rel_loss", "kernel_drift"} <= set(curves.columns)

    # The same command again trains nothing and records nothing twice.
    assert main(args) == 0
    assert "0 to train" in capsys.readouterr().out
    assert len(_children(uri)) == 24

    # A sweep sharing some of those runs trains only the new ones.
    assert main([*args[:-2], "sweep.name=more", "grid.seeds=3", "sweep.progress=false"]) == 0
    assert "12 to train" in capsys.readouterr().out
    assert len(_children(uri)) == 36
    more = load_sweep("more", uri)
    assert len(more) == 36 and more["parent_run_id"].nunique() == 2
    both = load_curves(more, uri)  # each parent's curves/ folder downloaded once
    assert set(both["config_hash"]) == set(more["config_hash"])
    one = more.iloc[[-1]]
    alone = load_curves(one, uri)
    assert set(alone["config_hash"]) == set(one["config_hash"])
    mine = both[both["run_id"] == one["run_id"].iloc[0]]
    pd.testing.assert_frame_equal(alone, mine.reset_index(drop=True))


def _compiles_in_a_minimal_latex_document(table):
    if shutil.which("pdflatex") is None:  # .ci/run installs it; a bare dev machine may not
        return
    doc = table.parent / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n"
        f"\\input{{{table.name}}}\n\\end{{document}}\n"
    )
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=table.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert (table.parent / "doc.pdf").stat().st_size > 0
