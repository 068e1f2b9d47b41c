"""A drawn report, kept beside its files and found again by its key, so that a sweep rerun with
nothing new neither fits nor draws (and imports none of the fitting and plotting stack).

:func:`sdyn.analysis.report.build` writes :data:`REUSE_FILE` into the report's folder last; a
rerun computes :func:`report_key` from the run table and, where it matches, :func:`reused`
returns the :class:`Report` as it was.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from sdyn.analysis.load import load_experiment


@dataclass
class Report:
    """What :func:`sdyn.analysis.report.build` produced: the terminal table, the fitted metrics,
    each claim's verdict by its label as ``report.file_stem`` writes it (for MLflow tags), and
    the claim results (empty where an unchanged report was reused), the run table, and the
    names of the report's files in its folder."""

    sweep: str
    table: str
    metrics: dict[str, float]
    verdicts: dict[str, str]
    results: list  # of sdyn.analysis.claims.ClaimResult
    runs: pd.DataFrame
    files: list[str]


# Where a report keeps what a reuse needs: the key it was drawn for, and what build returned.
REUSE_FILE = ".sdyn-report.json"
ANALYSIS_DIR = Path(__file__).resolve().parent


def report_key(runs: pd.DataFrame, experiment, formats: tuple[str, ...]) -> str:
    """What a report is drawn from, as a digest: the run table's content (every row, params,
    metrics and run ids, so a run retried or added changes it), the sweep's attributes, the
    experiment's claims and figures, the figure formats and the source of the analysis code and
    its templates (so a changed claim or plot redraws). The experiment's code is in the run
    table's config hashes (:func:`sdyn.grid.config_hash`)."""
    digest = hashlib.sha256()
    table = runs.reindex(sorted(runs.columns), axis=1)
    digest.update(table.sort_values("config_hash").to_csv(index=False).encode())
    for part in (runs.attrs, experiment.claims, experiment.figures, experiment.scatter_plot):
        digest.update(repr(part).encode())
    digest.update(repr(formats).encode())
    for source in sorted(ANALYSIS_DIR.rglob("*")):
        if source.suffix in (".py", ".j2"):
            digest.update(source.read_bytes())
    return digest.hexdigest()


def _kept(out_dir: Path) -> dict:
    """What :data:`REUSE_FILE` in ``out_dir`` holds; empty when there is none to read."""
    try:
        return json.loads((out_dir / REUSE_FILE).read_text())
    except (OSError, ValueError):
        return {}


def reused(out_dir: Path, key: str, runs: pd.DataFrame) -> Report | None:
    """The report drawn for ``key`` into ``out_dir``, if it is there whole (every file its
    :data:`REUSE_FILE` lists), else None; its ``results`` are empty."""
    kept = _kept(out_dir)
    if kept.get("key") != key or not all((out_dir / name).is_file() for name in kept["files"]):
        return None
    return Report(
        runs.attrs["sweep"], kept["table"], kept["metrics"], kept["verdicts"], [], runs,
        kept["files"],
    )  # fmt: skip


def place(stage: Path, out_dir: Path, key: str, report: Report) -> None:
    """Put the report drawn into ``stage`` into ``out_dir``: the files of the report there
    before (those its :data:`REUSE_FILE` lists) are removed, any other file (the sweep's event
    log, a user's) is left, and :data:`REUSE_FILE` is written last for ``key``."""
    before = set(_kept(out_dir).get("files", ()))
    (out_dir / REUSE_FILE).unlink(missing_ok=True)  # a report cut short is never reused
    for name in before - set(report.files):
        (out_dir / name).unlink(missing_ok=True)
    for name in report.files:
        (stage / name).replace(out_dir / name)
    kept = {
        "key": key,
        "table": report.table,
        "metrics": report.metrics,
        "verdicts": report.verdicts,
        "files": report.files,
    }
    (out_dir / REUSE_FILE).write_text(json.dumps(kept, allow_nan=True))


def find(runs: pd.DataFrame, out_dir: Path, formats: tuple[str, ...]) -> Report | None:
    """The report of the sweep whose run table is ``runs`` (:func:`sdyn.analysis.load.load_sweep`)
    that ``out_dir`` holds for those runs, the experiment's claims, ``formats`` and the analysis
    code (:func:`report_key`), or None: then draw it with :func:`sdyn.analysis.report.build`,
    passing it the same ``runs``."""
    key = report_key(runs, load_experiment(runs), formats)
    return reused(out_dir, key, runs)
