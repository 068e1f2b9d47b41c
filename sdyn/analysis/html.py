"""A sweep's report as one web page, ``index.html``, and a comparison's page.

The page is self-contained: every figure is inline (SVG markup; a figure drawn only as PNG as a
``data:`` URI), the styles are in the page, and it links only to the MLflow UI. It opens from
the file system with no server and prints to a readable PDF (a print stylesheet: A4, rows and
figures not split across pages, figures within the page's width). The rendering is a Jinja2
template, ``templates/report.html.j2``; :func:`write_index` and :func:`write_compare` gather
what it shows.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2
import pandas as pd
from markupsafe import Markup

from sdyn.analysis.claims import evidence_rule
from sdyn.tracking import uri as uris

if TYPE_CHECKING:
    from sdyn.analysis.claims import ClaimResult
    from sdyn.analysis.kept import Report

TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=True,  # the template's name ends in .j2, which select_autoescape would not escape
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
# The port ``mlflow ui`` serves on unless told otherwise.
MLFLOW_UI = "http://127.0.0.1:5000"
_SVG_ID = re.compile(r'\bid="([^"]+)"')
_SVG_REFERENCE = re.compile(r'(href="#|url\(#)([^")]+)')
_CAPTION = re.compile(r"\*\*(.+?)\*\*\s*(.*)", re.S)


def mlflow_ui_command(uri: str) -> str:
    """The shell command that serves the MLflow UI on the store ``uri`` (a relative SQLite path
    made absolute, so that the command works from any directory)."""
    if uri.startswith("sqlite:///"):
        uri = f"sqlite:///{Path(uri.removeprefix('sqlite:///')).expanduser().resolve()}"
    return f"mlflow ui --backend-store-uri {shlex.quote(uri)}"


def verdict_class(verdict: str) -> str:
    """A verdict as a CSS class: ``"consistent (vacuous)"`` -> ``"verdict-consistent-vacuous"``."""
    return "verdict-" + re.sub(r"[^a-z]+", "-", verdict.lower()).strip("-")


def inline_svg(path: Path, prefix: str, label: str) -> Markup:
    """The SVG file ``path`` (as matplotlib writes it) as markup to place in an HTML page.

    Drops the XML declaration, DOCTYPE and metadata; prefixes every ``id`` with ``prefix`` (and
    the ``#id`` and ``url(#id)`` references to it), since matplotlib names the parts of every
    figure alike (``figure_1``, ``axes_1``, glyphs) and ids must be unique in one page; labels
    the figure ``label`` for screen readers. Its size is left to CSS (class ``plot``), its
    aspect ratio to its ``viewBox``.

    Raises:
        OSError: the file cannot be read.
        ValueError: the file holds no ``<svg`` element.
    """
    text = path.read_text(encoding="utf-8")
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, count=1, flags=re.S)
    ids = set(_SVG_ID.findall(text))
    text = _SVG_ID.sub(lambda m: f'id="{prefix}-{m[1]}"', text)
    text = _SVG_REFERENCE.sub(lambda m: f"{m[1]}{prefix}-{m[2]}" if m[2] in ids else m[0], text)
    label = Markup.escape(label)
    return Markup(text.replace("<svg ", f'<svg class="plot" role="img" aria-label="{label}" ', 1))


def figure_markup(png: Path, prefix: str, label: str) -> Markup | None:
    """A figure written at ``png`` as inline markup: its SVG beside it (:func:`inline_svg`),
    else the PNG itself as an ``<img>`` with a ``data:`` URI; None when neither exists."""
    svg = png.with_suffix(".svg")
    if svg.is_file():
        return inline_svg(svg, prefix, label)
    if not png.is_file():
        return None
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    return Markup('<img class="plot" alt="{}" src="data:image/png;base64,{}">').format(label, data)


def _caption(text: str) -> tuple[str, str]:
    """A paper figure's caption (``**title.** rest``, see sdyn.analysis.figures) as its
    title and the rest; no title when it has none."""
    match = _CAPTION.fullmatch(text.strip())
    return (match[1], match[2]) if match else ("", text)


def _mlflow(runs: pd.DataFrame) -> dict:
    """Where a sweep lies in MLflow (``runs``: a :func:`sdyn.analysis.load.load_sweep` frame):
    its store, experiment and parent run, with links on a tracking server, or the command that
    serves the UI on a store without one."""
    attrs = runs.attrs
    uri, experiment = attrs["tracking_uri"], attrs["experiment_id"]
    return {
        "uri": uri,
        "experiment_id": experiment,
        "parent_id": attrs["parent_run_id"],
        "experiment_url": uris.mlflow_url(uri, experiment),
        "parent_url": uris.mlflow_url(uri, experiment, attrs["parent_run_id"]),
        "command": None if uri.startswith(uris.SERVER_SCHEMES) else mlflow_ui_command(uri),
        "ui": MLFLOW_UI,
    }


def cells(runs: pd.DataFrame) -> list[dict]:
    """The sweep's cells (one MLflow run per grid point, its seeds inside), ordered along the
    grid's axes (the ``experiment.*`` and ``data.*`` columns that vary over the runs).

    Per cell: ``point`` (its values along those axes, ``"n=8, m=64"``), ``statuses`` (its
    runs', ``"converged 2"``), ``run_id`` and ``url`` (the cell run's page on a tracking
    server; else None). Runs another sweep recorded (this one copied them) have no cell under
    this parent: they make a row of their grid point with ``run_id`` "" and ``parent`` (the
    parent run that recorded them) and its ``parent_url``.
    """
    attrs = runs.attrs
    uri, experiment = attrs["tracking_uri"], attrs["experiment_id"]
    axes = [
        c
        for c in runs.columns
        if c.startswith(("experiment.", "data.")) and not c.endswith(".name")
        and runs[c].nunique(dropna=False) > 1
    ]  # fmt: skip
    ordered = runs.sort_values(axes) if axes else runs
    rows = []
    for _, group in ordered.groupby([*axes, "run_id"], sort=False, dropna=False):
        first = group.iloc[0]
        run_id = first["run_id"] if isinstance(first["run_id"], str) else ""
        statuses = Counter(group["status"])
        rows.append(
            {
                "point": ", ".join(f"{c.split('.', 1)[1]}={_value(first[c])}" for c in axes),
                "statuses": ", ".join(f"{s} {n}" for s, n in sorted(statuses.items())),
                "run_id": run_id,
                "url": run_id and uris.mlflow_url(uri, experiment, run_id),
                "parent": first["parent_run_id"],
                "parent_url": uris.mlflow_url(uri, experiment, first["parent_run_id"]),
            }
        )
    return rows


def _value(x) -> str:
    """A grid value in a table: numbers compactly (``64``, ``0.001``), anything else as is."""
    return f"{x:g}" if isinstance(x, int | float) and not isinstance(x, bool) else str(x)


def censoring(results: list[ClaimResult]) -> list[dict]:
    """Per measured threshold claim (its fit's ``details`` hold censoring counts, see
    :func:`sdyn.analysis.fits.threshold.fit_threshold`): ``claim``, ``thresholds`` (seeds x
    axis values), ``interval`` (between two swept values), ``left`` (below the swept range),
    ``right`` (above it)."""
    return [
        {
            "claim": r.label,
            "thresholds": r.fit.n_points,
            "interval": r.fit.details["interval_censored"],
            "left": r.fit.details["left_censored"],
            "right": r.fit.details["right_censored"],
        }
        for r in results
        if r.measured and "left_censored" in r.fit.details
    ]


def write_index(
    out_dir: Path,
    results: list[ClaimResult],
    runs: pd.DataFrame,
    *,
    table: pd.DataFrame,
    setting: dict[str, str],
    counts: str,
    legend: str,
    plots: dict[str, Path],
    papers: list[tuple[str, str]],
) -> Path:
    """Write ``out_dir/index.html``, a sweep's report as one self-contained page; return its path.

    Args:
        out_dir: the report's directory, where its figures lie.
        results: every claim's result, measured or not.
        runs: the sweep (a :func:`sdyn.analysis.load.load_sweep` frame; its ``attrs`` name the
            store, the experiment and the parent run).
        table: the verdict table, one row per measured result in ``results``' order
            (:func:`sdyn.analysis.tables.summary_table`).
        setting: the sweep's setting (:func:`sdyn.analysis.report.setting`).
        counts: the verdict-count line (:func:`sdyn.analysis.tables.verdict_counts`).
        legend: what each verdict means.
        plots: each measured claim's figure (its PNG's path) by label.
        papers: the paper figures drawn, as (name, caption); each lies at ``out_dir/name.png``
            (and ``.svg``).

    Raises:
        OSError: a figure cannot be read or the page cannot be written.
    """
    measured = [r for r in results if r.measured]
    claims = []
    for k, (r, row) in enumerate(zip(measured, table.to_dict("records"), strict=True)):
        claims.append(
            {
                "result": r,
                "row": row,
                "anchor": f"claim-{k}",
                "css": verdict_class(r.verdict),
                "notes": r.as_dict()["notes"],
                "figure": figure_markup(plots[r.label], f"c{k}", f"{r.label}: {r.verdict}"),
            }
        )
    figures = []
    for k, (name, caption) in enumerate(papers):
        title, text = _caption(caption)
        title = title or name
        figure = figure_markup(out_dir / f"{name}.png", f"f{k}", title)
        figures.append({"name": name, "title": title, "caption": text, "figure": figure})
    statuses = Counter(runs["status"]) if "status" in runs else Counter()
    page = TEMPLATES.get_template("report.html.j2").render(
        title=f"sdyn report: {runs.attrs['sweep']}",
        recorded=len(runs),
        planned=runs.attrs.get("planned", len(runs)),
        setting=setting,
        columns=[c for c in table.columns if c != "source"],
        claims=claims,
        counts=counts,
        not_measured=[r for r in results if not r.measured],
        legend=legend,
        evidence=evidence_rule([r.claim for r in results]),
        figures=figures,
        censoring=censoring(results),
        statuses=sorted(statuses.items()),
        mlflow=_mlflow(runs),
        cells=cells(runs),
        verdict_class=verdict_class,
    )
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


def write_compare(
    out_dir: Path,
    reports: list[Report],
    rows: list[dict],
    settings: dict[str, str],
    legend: str,
    plots: dict[str, Path],
) -> Path:
    """Write ``out_dir/index.html``, sweeps side by side on one self-contained page; return
    its path.

    Args:
        out_dir: the comparison's directory, where its overlay figures lie.
        reports: the sweeps' reports, in the user's order (numbered [1], [2], ... as in the
            figures' legends).
        rows: one per measured claim and sweep: ``claim``, ``sweep``, ``value``, ``ci_low``,
            ``ci_high``, ``interval`` (its name), ``shown`` (the value and interval as a table
            shows them), ``theory`` (e.g. ``"<= 2"``) and ``verdict``.
        settings: each sweep's one-line setting by name.
        legend: what each verdict means.
        plots: each claim's overlay figure (its PNG's path) by label.

    A sweep whose own page lies beside the comparison (``out_dir/../<sweep>/index.html``, as
    ``python -m sdyn.report`` writes them) is linked to it.

    Raises:
        OSError: a figure cannot be read or the page cannot be written.
    """
    sweeps = []
    for k, rep in enumerate(reports, 1):
        own = out_dir.parent / rep.sweep / "index.html"
        sweeps.append(
            {
                "number": k,
                "name": rep.sweep,
                "setting": settings[rep.sweep],
                "page": f"../{rep.sweep}/index.html" if own.is_file() else None,
                "mlflow": _mlflow(rep.runs),
                "counts": Counter(r.verdict for r in rep.results if r.measured),
            }
        )
    cells_by = {(row["claim"], row["sweep"]): row for row in rows}
    claims = []
    for k, label in enumerate(dict.fromkeys(row["claim"] for row in rows)):
        found = [cells_by.get((label, s["name"])) for s in sweeps]
        theory = next(row["theory"] for row in found if row)
        claims.append(
            {
                "label": label,
                "theory": theory,
                "cells": [
                    row
                    and {
                        "text": row["shown"],
                        "verdict": row["verdict"],
                        "css": verdict_class(row["verdict"]),
                    }
                    for row in found
                ],
                "figure": figure_markup(plots[label], f"c{k}", label),
            }
        )
    page = TEMPLATES.get_template("compare.html.j2").render(
        title="sdyn comparison: " + ", ".join(s["name"] for s in sweeps),
        sweeps=sweeps,
        commands=[c for c in dict.fromkeys(s["mlflow"]["command"] for s in sweeps) if c],
        ui=MLFLOW_UI,
        claims=claims,
        legend=legend,
        evidence=evidence_rule([r.claim for rep in reports for r in rep.results]),
        verdict_class=verdict_class,
    )
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path
