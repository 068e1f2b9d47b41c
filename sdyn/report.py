"""``python -m sdyn.report --sweep NAME [--sweep NAME ...]``: rebuild reports from MLflow alone;
``python -m sdyn.report --list``: the sweeps in a store.

One sweep: the claim table (terminal, report.md, report.tex, report.json), a plot per claim and
the page index.html, written to ``<out>/<sweep>/`` and logged on the sweep's parent run. Several
sweeps: each one's report, plus a side-by-side comparison (with its own index.html) in
``<out>/compare/`` (e.g. softmax vs relu vs exp width thresholds: the paper's Table 1 as
measured).
"""

from __future__ import annotations

import gc
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from sdyn.analysis import html, kept, tables
from sdyn.analysis import report as report_mod
from sdyn.analysis.claim_plots import plot_overlay
from sdyn.analysis.figures import FORMATS
from sdyn.analysis.load import load_sweep
from sdyn.analysis.verdict import shown
from sdyn.api import PluginError
from sdyn.config import sqlite_for_path
from sdyn.errors import CommandLine, check_writable, one_line
from sdyn.quiet import quiet_libraries
from sdyn.tracking import store, sweeps
from sdyn.tracking import uri as uris


def compare(
    reports: list[report_mod.Report], out_dir: Path, formats: tuple[str, ...] = FORMATS
) -> str:
    """Write compare.md/.tex/.json, one overlay PNG per claim (and each of ``formats``) and the
    page index.html (:func:`sdyn.analysis.html.write_compare`); return the terminal table: a
    column per sweep, in the order given, "not measured" where a sweep measured no claim."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for rep in reports:
        for r in rep.results:
            if not r.measured:
                continue
            rows.append(
                {
                    "claim": r.label,
                    "sweep": rep.sweep,
                    "value": r.fit.value,
                    "ci_low": r.fit.ci_low,
                    "ci_high": r.fit.ci_high,
                    "interval": r.interval,
                    "shown": shown(r.fit, r.interval),
                    "theory": f"{r.claim.direction} {r.theory:g}",
                    "verdict": r.verdict,
                    "slack": r.slack and r.slack.as_dict(),
                }
            )
    long = pd.DataFrame(rows, columns=["claim", "sweep", "theory", "shown", "verdict"])
    cell = long["shown"] + " " + long["verdict"]
    wide = long.assign(cell=cell).pivot(index=["claim", "theory"], columns="sweep", values="cell")
    order = [rep.sweep for rep in reports]  # as the user gave them
    # A sweep that measured nothing has no column yet: a new one is filled, not a float NaN.
    wide = wide.reindex(columns=order, fill_value="not measured").fillna("not measured")
    wide = wide.reset_index()
    settings = {rep.sweep: report_mod.setting_line(rep.runs) for rep in reports}
    # The plots' legends name a sweep by its number here: a full name does not fit a column.
    header = "\n".join(
        f"- [{k}] {sweep}: {line}" for k, (sweep, line) in enumerate(settings.items(), 1)
    )
    text = f"{header}\n\n{tables.markdown_table(wide)}"
    (out_dir / "compare.md").write_text(f"# sdyn comparison\n\n{text}\n")
    caption = "; ".join(f"{sweep}: {line}" for sweep, line in settings.items())
    caption = tables.latex_escape(f"sdyn sweeps side by side ({caption})")
    label = tables.latex_label("compare", *(rep.sweep for rep in reports))
    tex = tables.latex_table(wide, caption, label)
    (out_dir / "compare.tex").write_text(tex)
    payload = {"sweeps": [{"sweep": rep.sweep, **report_mod.setting(rep.runs)} for rep in reports]}
    (out_dir / "compare.json").write_text(report_mod.strict_json({**payload, "claims": rows}))
    for claim_id in long["claim"].unique():
        results = [
            (f"[{k}]", r)
            for k, rep in enumerate(reports, 1)
            for r in rep.results
            if r.label == claim_id and r.measured
        ]
        plot_overlay(results, out_dir / f"{report_mod.file_stem(claim_id)}.png", formats)
    plots = {c: out_dir / f"{report_mod.file_stem(c)}.png" for c in long["claim"].unique()}
    html.write_compare(out_dir, reports, rows, settings, tables.VERDICT_LEGEND, plots)
    return text


def list_sweeps(client: MlflowClient) -> str:
    """The sweeps in a store, oldest first, as a table: name, parent run id (which
    ``--sweep`` takes too), planned runs, status, start date
    (UTC), the counts of its claims' verdicts (tags ``sdyn.verdict.*``; "no report" before a
    report was logged) and what differs from its experiment's defaults."""
    experiments = [e.experiment_id for e in client.search_experiments()]
    rows = []
    for run in sweeps.all_sweeps(client, experiments):
        tags = run.data.tags
        verdicts = Counter(v for k, v in tags.items() if k.startswith(sweeps.VERDICT_TAG))
        started = datetime.fromtimestamp(run.info.start_time / 1000, UTC)
        rows.append(
            {
                "sweep": tags.get("sdyn.sweep"),
                "parent run": run.info.run_id,
                "runs": tags.get("sdyn.planned"),
                "status": run.info.status,
                "started (UTC)": started.strftime("%Y-%m-%d %H:%M"),
                "verdicts": ", ".join(f"{n} {v}" for v, n in verdicts.most_common()) or "no report",
                "settings": tags.get("sdyn.settings", ""),
            }
        )
    if not rows:
        return f"no sweeps in {client.tracking_uri}"
    return pd.DataFrame(rows).to_markdown(index=False)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``). Returns the exit status: 0;
    2 for bad input or a broken plugin (one line on stderr, nothing written); 130 after
    Ctrl-C."""
    quiet_libraries()
    parser = CommandLine(
        prog="python -m sdyn.report",
        description="Rebuild a sweep's report (claim table, plots, index.html) from MLflow "
        "alone; with several --sweep, also compare them side by side; --list: the store's "
        "sweeps.",
    )
    parser.add_argument("--sweep", action="append", help="sweep name or parent run id")
    parser.add_argument(
        "--list", action="store_true", help="list the sweeps in the store (runs, date, verdicts)"
    )
    parser.add_argument(
        "--tracking-uri", default=None, help="default: MLFLOW_TRACKING_URI or sqlite:///mlflow.db"
    )
    parser.add_argument("--out", help="directory for the report files (default: outputs)")
    parser.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    parser.add_argument(
        "--format",
        action="append",
        default=[],
        choices=["pdf"],
        help="also write each figure as this format (png and svg always), e.g. pdf for LaTeX",
    )
    args = parser.parse_args(argv)
    if not (args.list or args.sweep):
        parser.error("give --sweep NAME (one or more) or --list")
    if args.list and args.sweep:
        parser.error("--list lists the store's sweeps: give it without --sweep")
    if args.list and (args.out is not None or args.format or args.no_log):
        parser.error("--list writes no report: give it without --out, --format or --no-log")
    if args.out is not None and not args.out.strip():
        parser.error("--out is empty: give the directory for the report files")
    uri = sqlite_for_path(
        args.tracking_uri
        or mlflow.environment_variables.MLFLOW_TRACKING_URI.get()
        or "sqlite:///mlflow.db"
    )
    out = Path(args.out or "outputs")
    formats = tuple(dict.fromkeys(("png", "svg", *args.format)))
    try:  # the user's input, checked before anything is written
        uris.check(uri)
        if not uris.exists(uri):  # MLflow would create an empty store to find nothing in
            raise ValueError(f"no store at {uri}")
        if args.list:
            print(list_sweeps(MlflowClient(uri)))
            return 0
        loaded = [load_sweep(sweep, uri) for sweep in args.sweep]
        names = [runs.attrs["sweep"] for runs in loaded]
        if twice := sorted({name for name in names if names.count(name) > 1}):
            raise ValueError(f"--sweep {twice[0]} is given twice: name each sweep once")
        if len(names) > 1 and "compare" in names:
            raise ValueError(
                "a sweep named 'compare' would share its folder with the comparison (both "
                f"{out / 'compare'}): report it alone"
            )
        folders = [out / name for name in names] + ([out / "compare"] if len(names) > 1 else [])
        for folder in folders:
            check_writable(folder / "index.html", "--out")
    except ValueError as exc:
        print(f"sdyn: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except MlflowException as exc:  # a refusal (credentials, no MLflow there), or an outage
        print(f"sdyn: error: {one_line(store.refused(exc, uri))}", file=sys.stderr)
        return 2
    try:
        # A comparison overlays the claims' results: those need fitting anew.
        single = len(loaded) == 1
        reports = [_report(runs, uri, out, formats, not args.no_log, single) for runs in loaded]
        if len(reports) > 1:
            print(compare(reports, out / "compare", formats))
            print(f"sdyn: comparison in {out / 'compare' / 'index.html'}")
    except PluginError as exc:  # the sweep's experiment cannot load here, or its kind raised
        print(f"sdyn: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a report is put in place whole (report_mod.build), or not at all
        print("sdyn: stopped by SIGINT; the reports not yet written are left as they were",
              file=sys.stderr)  # fmt: skip
        return 130
    return 0


def _report(
    runs: pd.DataFrame, uri: str, out: Path, formats: tuple[str, ...], log: bool, reuse: bool
) -> report_mod.Report:
    """The report of the sweep whose run table is ``runs``, drawn into ``out/<sweep>/`` (the
    one there reused, if ``reuse`` and it was drawn for the same runs), printed, and logged on
    its parent run if ``log``."""
    sweep = runs.attrs["sweep"]
    out_dir = out / sweep
    found = kept.find(runs, out_dir, formats) if reuse else None
    rep = found or report_mod.build(sweep, uri, out_dir, formats, runs)
    print(rep.table)
    where = f"sdyn: report in {out_dir / 'index.html'}"
    if log:
        parent = runs.attrs["parent_run_id"]
        sweeps.log_report(MlflowClient(uri), parent, out_dir, rep.files, rep.metrics, rep.verdicts)
        where += f" and on MLflow parent run {parent} ({uri})"
    print(where)
    return rep


if __name__ == "__main__":
    status = main()
    # Exempt the millions of objects torch, MLflow, Ray and statsmodels created from the
    # interpreter's final garbage collection: it adds about 1.4 s to every exit.
    gc.freeze()
    sys.exit(status)
