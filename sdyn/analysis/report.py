"""A sweep's report, rebuilt from MLflow alone: terminal table, markdown, LaTeX, JSON, plots."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written to files, also on machines without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sdyn import experiments  # noqa: E402
from sdyn.analysis.claims import ClaimResult, evaluate  # noqa: E402
from sdyn.analysis.load import load_curves, load_sweep  # noqa: E402


@dataclass
class Report:
    """What :func:`build` produced: the terminal table, the fitted metrics and the claim results."""

    sweep: str
    table: str
    metrics: dict[str, float]
    results: list[ClaimResult]
    runs: pd.DataFrame


def _fmt(x: float) -> str:
    return "nan" if not math.isfinite(x) else f"{x:.3g}"


def _value(x) -> str:
    """A column value in a label: numbers compactly, anything else (an optimiser name) as is."""
    return f"{x:g}" if isinstance(x, int | float | np.number) else str(x)


def file_stem(label: str) -> str:
    """A claim label as a file name: ``alignment_rate[ngd]`` -> ``alignment_rate-ngd``."""
    return label.replace("[", "-").replace("]", "")


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


def summary_table(results: list[ClaimResult]) -> pd.DataFrame:
    """One row per claim: claim, fitted value [95% CI], theory, verdict, reason, points, runs."""
    return pd.DataFrame(
        [
            {
                "claim": r.label,
                "fitted [95% CI]": f"{_fmt(r.fit.value)} [{_fmt(r.fit.ci_low)}, "
                f"{_fmt(r.fit.ci_high)}]",
                "theory": f"{r.claim.direction} {_fmt(r.claim.theory)}",
                "verdict": r.verdict,
                "reason": r.reason,
                "points": r.fit.n_points,
                "runs": r.n_runs,
                "source": r.claim.source,
            }
            for r in results
        ]
    )


def plot_overlay(results: list[tuple[str | None, ClaimResult]], path: Path) -> None:
    """One claim's plot: per result, the points (one per seed), the median per x, the fitted
    law and its 95% CI band; for power laws the theory's slope as a dashed reference line.
    Several results (one per sweep, labelled) share one axes: log-log for power laws,
    log-linear for geometric rates."""
    claim = results[0][1].claim
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    anchor = None
    for i, (label, result) in enumerate(results):
        fit, pts, color = result.fit, result.points, f"C{2 * i}"
        # Only what a log axis can show: a claim whose values are all NaN (a metric a sweep
        # skipped) draws an empty plot instead of failing the report.
        pts = pts[np.isfinite(pts["x"]) & np.isfinite(pts["y"]) & (pts["y"] > 0)]
        tag = f"{label}: " if label else ""
        if pts.empty:
            continue
        ax.scatter(pts["x"], pts["y"], s=14, alpha=0.4, color=color, label=f"{tag}runs (per seed)")
        med = pts.groupby("x")["y"].median()
        ax.plot(med.index, med.values, "o", color=color, ms=6, label=f"{tag}median over seeds")
        positive = pts[(pts["x"] > 0) & (pts["y"] > 0)]
        if not (fit.converged and len(positive)):
            continue
        geometric = fit.kind == "geometric_rate"
        lo_x, hi_x = fit.window if geometric else (positive["x"].min(), positive["x"].max())
        xs = np.linspace(lo_x, hi_x, 50) if geometric else np.geomspace(lo_x, hi_x, 50)
        x0 = xs.mean() if geometric else math.exp(np.log(xs).mean())

        def law(e, x, x0=x0, geometric=geometric):  # y relative to y(x0) for slope/rate e
            return e ** (x - x0) if geometric else (x / x0) ** e

        y0 = fit.prefactor * (fit.value**x0 if geometric else x0**fit.value)
        anchor = anchor or (None if geometric else (xs, x0, y0))
        what = "rate/step" if geometric else "slope"
        ax.plot(
            xs,
            y0 * law(fit.value, xs),
            color=f"C{2 * i + 1}",
            label=f"{tag}fit: {what} {fit.value:.4g}",
        )
        if math.isfinite(fit.ci_low) and math.isfinite(fit.ci_high):
            lo, hi = (y0 * law(e, xs) for e in (fit.ci_low, fit.ci_high))
            ax.fill_between(
                xs,
                np.minimum(lo, hi),
                np.maximum(lo, hi),
                color=f"C{2 * i + 1}",
                alpha=0.2,
                label=f"{tag}95% CI [{fit.ci_low:.4g}, {fit.ci_high:.4g}]",
            )
    if anchor is not None:
        xs, x0, y0 = anchor
        ax.plot(
            xs,
            y0 * (xs / x0) ** claim.theory,
            "--",
            color="C3",
            label=f"theory: slope {claim.direction} {claim.theory:g}",
        )
    if not claim.kind.endswith("geometric_rate"):
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(claim.axis_label or claim.axis)
    ax.set_ylabel(claim.quantity_label or claim.quantity)
    verdicts = ", ".join(r.verdict for _, r in results)
    ax.set_title(f"{results[0][1].label}: {verdicts}", fontsize=10)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _plot_curves(module, runs: pd.DataFrame, curves: pd.DataFrame, path: Path) -> bool:
    """The experiment's ``CURVE_PLOT``: one metric vs step, a line per value of one axis."""
    spec = getattr(module, "CURVE_PLOT", None)
    if spec is None or curves.empty:
        return False
    metric, line_by, fix_at = spec
    values = sorted(runs[fix_at].dropna().unique())
    if not values:
        return False
    fixed = values[len(values) // 2]
    chosen = runs[runs[fix_at] == fixed].set_index("config_hash")
    mine = curves[curves["config_hash"].isin(chosen.index)]
    mine = mine.assign(line=mine["config_hash"].map(chosen[line_by]))
    fig, ax = plt.subplots(figsize=(6, 4.2))
    cmap = plt.get_cmap("viridis")
    lines = sorted(mine["line"].unique())
    for i, value in enumerate(lines):
        med = mine[mine["line"] == value].groupby("step")[metric].median()
        med = med[med > 0]
        ax.plot(
            med.index + 1,
            med.values,
            color=cmap(i / max(len(lines) - 1, 1)),
            label=f"{line_by.split('.')[-1]}={_value(value)}",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step + 1")
    ax.set_ylabel(f"{metric} (median over seeds)")
    ax.set_title(f"{metric} at {fix_at.split('.')[-1]}={_value(fixed)}", fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write(results: list[ClaimResult], runs: pd.DataFrame, out_dir: Path, sweep: str) -> str:
    """Write report.md, report.tex, report.json and one PNG per claim; return the text table."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = summary_table(results)
    counts = runs["status"].value_counts().to_dict() if "status" in runs else {}
    header = (
        f"sweep {sweep}: {len(runs)} of {runs.attrs.get('planned', len(runs))} planned runs "
        f"recorded ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})"
    )
    text = header + "\n" + table.drop(columns=["source"]).to_markdown(index=False)
    md = [f"# sdyn report: {sweep}", "", header, "", table.to_markdown(index=False), ""]
    for r in results:
        png = f"{file_stem(r.label)}.png"
        plot_overlay([(None, r)], out_dir / png)
        md += [
            f"## {r.label}",
            "",
            r.claim.statement,
            "",
            f"*{r.claim.source}*",
            "",
            f"**{r.verdict}**: {r.reason}",
            "",
        ]
        md += [f"- {note}" for note in r.as_dict()["notes"]]
        md += ["", f"![{r.label}]({png})", ""]
    (out_dir / "report.md").write_text("\n".join(md))
    tex = table[["claim", "fitted [95% CI]", "theory", "verdict", "points", "runs"]]
    (out_dir / "report.tex").write_text(
        tex.to_latex(index=False, escape=True, caption=f"sdyn sweep {sweep}", label="tab:sdyn")
    )
    payload = {"sweep": sweep, "runs": len(runs), "claims": [r.as_dict() for r in results]}
    (out_dir / "report.json").write_text(strict_json(payload))
    return text


def build(sweep: str, tracking_uri: str | None, out_dir: Path) -> Report:
    """Load ``sweep`` from MLflow, fit every claim of its experiment, write the report files.

    Returns the :class:`Report`; ``metrics`` holds ``<claim>.value/ci_low/ci_high`` (the claim
    label as a file stem) for logging
    on the parent run.

    Raises:
        ValueError: no such sweep.
    """
    runs = load_sweep(sweep, tracking_uri)
    module = experiments.get(runs.attrs["experiment"])
    curves = load_curves(runs, tracking_uri)
    results = [r for claim in module.CLAIMS for r in evaluate(claim, runs, curves)]
    text = write(results, runs, out_dir, runs.attrs["sweep"])
    if _plot_curves(module, runs, curves, out_dir / "curves.png"):
        with open(out_dir / "report.md", "a") as handle:
            handle.write("## curves\n\n![curves](curves.png)\n")
    metrics = {}
    for r in results:
        for key in ("value", "ci_low", "ci_high"):
            # MLflow metric names allow no brackets: geometric_rate[adam] -> geometric_rate-adam
            metrics[f"{file_stem(r.label)}.{key}"] = getattr(r.fit, key)
    return Report(runs.attrs["sweep"], text, metrics, results, runs)
