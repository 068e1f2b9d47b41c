"""A sweep's report, rebuilt from MLflow alone: terminal table, markdown, LaTeX, JSON, plots."""

from __future__ import annotations

import ast
import json
import math
import re
import tempfile
from numbers import Real
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written to files, also on machines without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from sdyn.analysis import drawing, html, kept  # noqa: E402
from sdyn.analysis.claim_plots import plot_overlay  # noqa: E402
from sdyn.analysis.claims import ClaimResult, evaluate, evidence_rule  # noqa: E402
from sdyn.analysis.figures import FORMATS, plot_figure  # noqa: E402
from sdyn.analysis.fits.result import CI_METHODS  # noqa: E402
from sdyn.analysis.kept import Report, report_key  # noqa: E402
from sdyn.analysis.load import (  # noqa: E402
    load_curves,
    load_experiment,
    load_sweep,
    load_table,
)
from sdyn.analysis.tables import (  # noqa: E402
    FITTED,
    VERDICT_LEGEND,
    fmt_number,
    latex_escape,
    latex_label,
    latex_table,
    markdown_table,
    summary_table,
    verdict_counts,
)
from sdyn.analysis.verdict import shown  # noqa: E402
from sdyn.search import SearchGrid, unsearched  # noqa: E402
from sdyn.text import count


def file_stem(label: str) -> str:
    """A claim label as a file name and an MLflow key: ``alignment_rate[ngd]`` ->
    ``alignment_rate-ngd``; a character of the ``by`` value that neither takes (``/``, ``(``)
    as ``_``."""
    return re.sub(r"[^\w\-.]", "_", label.replace("[", "-").replace("]", ""))


def strict_json(obj) -> str:
    """Indented JSON with NaN and infinities written as null, so any strict parser reads it."""

    def clean(x):
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return [clean(v) for v in x]
        return x

    return json.dumps(clean(obj), indent=2, allow_nan=False)


MAX_SCATTER_PANELS = 6


def _plot_scatter(spec: tuple, runs: pd.DataFrame, tracking_uri: str | None, path: Path) -> bool:
    """An experiment's ``SCATTER_PLOT = (table, x, y, hue[, marked])``: points of one of its
    extra tables, ``y`` vs ``x`` coloured by ``hue``, one panel per grid point (its first seed),
    at most :data:`MAX_SCATTER_PANELS` panels spread evenly over the grid. Rows whose hue is
    ``marked`` (e.g. a mixture's modes) are drawn on top as large black crosses."""
    if "seed" not in runs:
        return False
    name, x, y, hue, *marked = spec
    table = load_table(runs, name, tracking_uri)
    if table.empty:
        return False
    shown = runs[runs["config_hash"].isin(table["config_hash"])]
    shown = shown[shown["seed"] == shown["seed"].min()]
    axes_of_grid = [
        c for c in shown.columns if c.startswith("experiment.") and shown[c].nunique() > 1
    ]
    shown = shown.sort_values(axes_of_grid) if axes_of_grid else shown
    pick = np.unique(np.linspace(0, len(shown) - 1, min(len(shown), MAX_SCATTER_PANELS)).round())
    shown = shown.iloc[pick.astype(int)]
    fig, axes = plt.subplots(
        1, len(shown), figsize=(3.2 * len(shown), 3.7), squeeze=False, sharex=True, sharey=True
    )
    for ax, (_, row) in zip(axes[0], shown.iterrows(), strict=True):
        mine = table[table["config_hash"] == row["config_hash"]]
        on_top = mine[hue].isin(marked)
        for i, (value, group) in enumerate(mine[~on_top].groupby(hue, sort=True)):
            ax.scatter(group[x], group[y], s=3, alpha=0.4, color=f"C{i}", label=str(value))
        for value, group in mine[on_top].groupby(hue, sort=True):
            ax.scatter(group[x], group[y], s=60, marker="x", color="black", label=str(value))
        title = ", ".join(  # a grid axis of words too (a data set's shape)
            f"{c.split('.')[-1]}={format(row[c], 'g' if isinstance(row[c], Real) else '')}"
            for c in axes_of_grid
        )
        ax.set_title(f"{title} (seed {row['seed']:g})", fontsize=9)
        ax.set_xlabel(x)
        ax.set_aspect("equal", adjustable="box")
        ax.grid(True, alpha=0.25)
    axes[0][0].set_ylabel(y)
    for handle in axes[0][0].legend(fontsize=7).legend_handles:
        handle.set_sizes([20])
    fig.suptitle(f"{name}: {y} vs {x} by {hue}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def _not_measured_line(results: list[ClaimResult]) -> str:
    absent = [r for r in results if not r.measured]
    if not absent:
        return ""
    return "Not measured by this sweep: " + "; ".join(f"{r.label} ({r.reason})" for r in absent)


def setting(runs: pd.DataFrame) -> dict[str, str]:
    """A sweep's resolved setting, as every report states it (from ``runs.attrs``, a
    :func:`load_sweep` frame): ``experiment``, ``data`` and ``grid`` (each ``name (key=value,
    ...)``, the values the sweep used), ``budget`` (GD steps per run, runs, seeds per grid
    point) and ``differs`` (what differs from the experiment's defaults)."""
    config = runs.attrs.get("config", {})

    def section(name: str) -> str:
        values = [
            f"{key.split('.', 1)[1]}={value}"
            for key, value in config.items()
            if key.startswith(f"{name}.") and key != f"{name}.name"
        ]
        return f"{config.get(f'{name}.name', '?')} ({', '.join(values)})"

    steps = config.get("experiment.steps")
    per_run = f"{steps} steps per run" if steps else "steps per run as the grid sets them"
    planned = runs.attrs.get("planned", len(runs))
    seeds = config.get("grid.seeds", "?")
    budget = f"{per_run}, {count(planned, 'run')} ({count(seeds, 'seed')} per grid point)"
    if runs.attrs.get("stopped"):  # a report of part of a sweep says so with its setting
        budget += f"; the sweep was stopped: {count(len(runs), 'run')} recorded"
    return {
        "experiment": section("experiment"),
        "data": section("data"),
        "grid": section("grid"),
        "budget": budget,
        "differs": runs.attrs.get("settings") or "the experiment's defaults",
    }


def setting_line(runs: pd.DataFrame) -> str:
    """One line: experiment, data, grid name, what differs from the defaults, the budget."""
    s, config = setting(runs), runs.attrs.get("config", {})
    names = "/".join(config.get(f"{k}.name", "?") for k in ("experiment", "grid", "data"))
    return f"{names}; {s['differs']}; {s['budget']}"


def write(
    results: list[ClaimResult],
    runs: pd.DataFrame,
    out_dir: Path,
    sweep: str,
    search=False,
) -> str:
    """Write report.md, report.tex and report.json (report.md links each measured claim's
    figure, ``<claim>.png``, which :func:`build` draws); return the text for the terminal: the
    header, the table of measured claims, the claims not measured.

    ``search``: the sweep is a threshold search (sdyn/search.py), whose plan is the fixed grid
    at the same resolution: the header compares the runs it spent with that grid's, and
    report.md lists each threshold claim's interval per axis value and seed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = summary_table(results)
    counts = runs["status"].value_counts().to_dict() if "status" in runs else {}
    planned = runs.attrs.get("planned", len(runs))
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    statuses = f" ({statuses})" if statuses else ""
    header = f"sweep {sweep}: {len(runs)} of {planned} planned runs recorded{statuses}"
    if search:
        header = (
            f"threshold search {sweep}: {len(runs)} runs probed{statuses}, against "
            f"{planned} for the fixed grid at the same resolution ({len(runs) / planned:.1%})"
        )
    absent = _not_measured_line(results)
    where = setting(runs)
    line = f"setting: {setting_line(runs)}"
    counts = verdict_counts(results)
    terminal = table.drop(columns=["source"]).to_markdown(index=False)
    text = "\n".join(part for part in (header, line, terminal, counts, absent) if part)
    md = [f"# sdyn report: {sweep}", "", header, "", "## Setting", ""]
    md += [f"- **{key}**: {value}" for key, value in where.items()]
    md += ["", markdown_table(table), "", counts, ""]
    md += [absent, ""] if absent else []
    rule = evidence_rule([r.claim for r in results])
    md += [f"Verdicts: {VERDICT_LEGEND}.", "", f"Evidence rule: {rule}.", ""]
    for r in results:
        if not r.measured:
            continue
        png = f"{file_stem(r.label)}.png"
        md += [
            f"## {r.label}",
            "",
            r.claim.statement,
            "",
            f"*{r.claim.source}*",
            "",
            f"Fitted {r.claim.value_name}: {shown(r.fit, r.interval)}; theory "
            f"{r.claim.direction} {fmt_number(r.theory)}.",
            "",
            f"**{r.verdict}**: {r.reason}",
            "",
        ]
        if r.slack:
            bound = r.slack.against or f"the bound {fmt_number(r.theory)}"
            md += [f"Slack ({r.slack.unit}): {bound} leaves {r.slack.text}.", ""]
        if r.claim.assumed():
            md += ["Assumes: " + "; ".join(a.statement for a in r.claim.assumed()) + ".", ""]
        md += [f"- reference, {label}: {value:.4g}" for label, value in r.references]
        md += [f"- {d.text}" for d in r.described]
        md += [f"- {note}" for note in r.as_dict()["notes"]]
        md += ["", f"![{r.label}]({png})", ""]
        details = r.claim.details(r) if search else ""
        md += [details, ""] if details else []
    (out_dir / "report.md").write_text("\n".join(md))
    columns = ["claim", FITTED, "theory", "verdict", "slack", "runs"]
    sources = "; ".join(dict.fromkeys(r.claim.source for r in results if r.measured))
    methods = [CI_METHODS.get(r.fit.ci_method, r.fit.ci_method) for r in results if r.measured]
    methods = list(dict.fromkeys(m for m in methods if m != "none"))
    named = " or ".join(filter(None, [", ".join(methods[:-1]), *methods[-1:]]))
    intervals = f" Intervals: 95% ({named}) unless named a bracket or exact." if named else ""
    caption = latex_escape(
        f"Measured claims vs theory ({sources}), sweep {sweep}: {setting_line(runs)}.{intervals}"
    )
    tex = latex_table(table[columns], caption, latex_label(sweep))
    (out_dir / "report.tex").write_text(tex)
    payload = {
        "sweep": sweep,
        "runs": len(runs),
        "setting": where,
        "config": runs.attrs.get("config", {}),
        "verdict_legend": VERDICT_LEGEND,
        "evidence_rule": rule,
        "claims": [r.as_dict() for r in results if r.measured],
        "not_measured": [{"claim": r.label, "reason": r.reason} for r in results if not r.measured],
    }
    (out_dir / "report.json").write_text(strict_json(payload))
    return text


def build(
    sweep: str,
    tracking_uri: str | None,
    out_dir: Path,
    formats: tuple[str, ...] = FORMATS,
    runs: pd.DataFrame | None = None,
) -> Report:
    """Load ``sweep`` from MLflow, fit every claim of its experiment, write the report files
    (:func:`write`, the paper figures, and the page ``index.html``: :func:`html.write_index`),
    the figures as each of ``formats``; ``runs``: the sweep's run table, where the caller has
    loaded it already (:func:`sdyn.analysis.kept.find`).

    The report is drawn in a folder of its own, then put into ``out_dir`` whole
    (:func:`sdyn.analysis.kept.place`: the last report's files go, and
    :data:`sdyn.analysis.kept.REUSE_FILE` is written, by which :func:`sdyn.analysis.kept.find`
    finds it again for the same runs, claims, formats and analysis code); a report cut short
    leaves the folder as it was.

    Claims the sweep does not measure (another grid's, an axis it does not vary, a reference
    optimiser it did not run) are listed once as such, without a table row or a plot.

    Returns the :class:`Report`; ``metrics`` holds ``<claim>.value/ci_low/ci_high`` of each
    measured claim, for logging on the parent run (the claim label as :func:`file_stem` writes
    it: MLflow metric names allow no brackets).

    Raises:
        ValueError: no such sweep.
        PluginError: the sweep's experiment cannot be loaded here (its message names the sweep).
    """
    runs = load_sweep(sweep, tracking_uri) if runs is None else runs
    experiment = load_experiment(runs)
    key = report_key(runs, experiment, formats)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Drawn apart, then put in place whole: a report cut short leaves the last one as it was,
    # and the report's files are known (only they are logged to MLflow).
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".drawing-") as stage:
        report = _draw(runs, experiment, Path(stage), formats, tracking_uri)
        kept.place(Path(stage), out_dir, key, report)
    return report


def _draw(runs: pd.DataFrame, experiment, out_dir: Path, formats, tracking_uri) -> Report:
    """:func:`build`'s report of ``runs``, drawn into the empty folder ``out_dir``."""
    curves = load_curves(runs, tracking_uri)
    grid = runs.attrs.get("grid", "")
    # The fits are small: BLAS threads gain nothing there, and beside other busy processes their
    # spinning made fits 10x slower.
    grid_cls = experiment.grids.get(grid, object)
    search = issubclass(grid_cls, SearchGrid)
    skipped = {}
    if search:  # the claims whose criterion the search did not bracket are not measured
        chosen = ast.literal_eval(runs.attrs.get("config", {}).get("grid.claims", "None"))
        skipped = unsearched(experiment.claims, grid_cls.axis, chosen)
    with threadpool_limits(limits=1, user_api="blas"):
        results = [
            r
            for c in experiment.claims
            for r in evaluate(c, runs, curves, grid=grid, unmeasured=skipped.get(c.id))
        ]
    text = write(results, runs, out_dir, runs.attrs["sweep"], search)
    # The experiment's figures and every measured claim's plot, at once (drawing.draw_all).
    jobs = [
        (plot_figure, (figure, runs, curves, out_dir / f"{figure.name}.png", formats))
        for figure in experiment.figures
    ]
    jobs += [
        (plot_overlay, ([(None, r)], out_dir / f"{file_stem(r.label)}.png", formats))
        for r in results
        if r.measured
    ]
    captions = drawing.draw_all(jobs)[: len(experiment.figures)]
    papers = []
    for figure, caption in zip(experiment.figures, captions, strict=True):
        if caption:
            papers.append((figure.name, caption))
            with open(out_dir / "report.md", "a") as handle:
                handle.write(f"## {figure.name}\n\n![{figure.name}]({figure.name}.png)\n\n")
                handle.write(f"{caption}\n\n")
    scatter = experiment.scatter_plot
    if scatter and _plot_scatter(scatter, runs, tracking_uri, out_dir / f"{scatter[0]}.png"):
        papers.append((scatter[0], ""))
        with open(out_dir / "report.md", "a") as handle:
            handle.write(f"\n## {scatter[0]}\n\n![{scatter[0]}]({scatter[0]}.png)\n")
    html.write_index(
        out_dir,
        results,
        runs,
        table=summary_table(results),
        setting=setting(runs),
        counts=verdict_counts(results),
        legend=VERDICT_LEGEND,
        plots={r.label: out_dir / f"{file_stem(r.label)}.png" for r in results if r.measured},
        papers=papers,
    )
    metrics = {}
    for r in results:
        if r.measured:
            for key_name in ("value", "ci_low", "ci_high"):
                metrics[f"{file_stem(r.label)}.{key_name}"] = getattr(r.fit, key_name)
    verdicts = {file_stem(r.label): r.verdict for r in results}
    files = sorted(p.name for p in out_dir.iterdir())
    return Report(runs.attrs["sweep"], text, metrics, verdicts, results, runs, files)
