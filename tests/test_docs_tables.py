"""The pages quote sweeps' tables verbatim. Four sweeps run here as a reader runs them, each in
a fresh store: every row of the claims table they print (the source column left out) and their
verdict line must stand in the page that quotes them. A change that moves a figure, a verdict
or a reason fails here until the page says what the sweep says (stale quotes were found by hand
in 2026-12: intervals from before an interval change, slack the sweep no longer printed)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SWEEPS = {  # the page, the sweep's overrides
    "readme-main-job": ("README.md", ["+grid=width"]),
    "implicit-bias-short-budget": (
        "docs/experiments/implicit_bias.md",
        ["experiment=implicit_bias", "+grid=iters", "experiment.steps=200"],
    ),
    "implicit-bias-fig3": ("docs/experiments/implicit_bias.md", ["--sweep", "implicit_fig3"]),
    "attention-fig12": ("docs/experiments/attention_regression.md", ["--sweep", "attention_fig12"]),
}


def _rows(report: str) -> list[str]:
    """The claims table's rows of a ``report.md`` as a page writes them: cells stripped of their
    padding, the last (source) cell left out."""
    rows = []
    for line in report.splitlines():
        if not line.startswith("| ") or line.startswith("| claim "):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append("| " + " | ".join(cells[:-1]) + " |")
    return rows


@pytest.mark.parametrize("case", SWEEPS)
def test_a_page_quotes_the_table_its_sweep_prints(tmp_path, case):
    page, overrides = SWEEPS[case]
    args = [
        *overrides,
        f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
        f"sweep.out_dir={tmp_path}/out",
        f"hydra.run.dir={tmp_path}/hydra",
        "sweep.progress=false",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (report,) = (tmp_path / "out").glob("*/report.md")
    text = (REPO / page).read_text()
    rows = _rows(report.read_text())
    assert len(rows) >= 6
    stale = [row for row in rows if row not in text]
    assert not stale, f"{page} does not quote these rows as the sweep prints them: {stale}"
    (verdicts,) = [line for line in report.read_text().splitlines() if line.startswith("verdicts:")]
    assert verdicts in text, f"{page} lacks the sweep's verdict line: {verdicts}"
