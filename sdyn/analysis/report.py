"""A sweep's report, rebuilt from MLflow alone: terminal table, markdown, LaTeX, JSON, plots."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written to files, also on machines without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from sdyn import plugins  # noqa: E402
from sdyn.analysis import html  # noqa: E402
from sdyn.analysis.claims import ClaimResult, evaluate  # noqa: E402
from sdyn.analysis.figures import (  # noqa: E402
    COLUMN_WIDTH,
    FORMATS,
    STYLE,
    draw_references,
    fit_legend,
    plot_figure,
    save,
)
from sdyn.analysis.kept import REUSE_FILE, Report, report_key  # noqa: E402
from sdyn.analysis.load import load_curves, load_sweep, load_table  # noqa: E402
from sdyn.analysis.verdict import (  # noqa: E402
    EVIDENCE_RULE,
    POWER_LIMIT,
    VERDICTS,
    format_interval,
)
from sdyn.search import SearchGrid  # noqa: E402


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else str(x)  # nan, inf, -inf


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
    """One row per measured claim: claim, fitted value [95% CI], theory, verdict, slack (the
    room the bound leaves, :func:`sdyn.analysis.verdict.slack`; blank for a prediction),
    reason, points, runs, source (claims the sweep does not measure are listed apart, see
    :func:`write`)."""
    return pd.DataFrame(
        [
            {
                "claim": r.label,
                "fitted [95% CI]": format_interval(r.fit.ci_low, r.fit.ci_high, r.fit.value),
                "theory": f"{r.claim.direction} {_fmt(r.theory)}",
                "verdict": r.verdict,
                "slack": r.slack.text if r.slack else "",
                "reason": r.reason,
                "points": r.fit.n_points,
                "runs": r.n_runs,
                "source": r.claim.source,
            }
            for r in results
            if r.measured
        ],
        columns=["claim", "fitted [95% CI]", "theory", "verdict", "slack", "reason", "points"]
        + ["runs", "source"],
    )


def plot_overlay(
    results: list[tuple[str | None, ClaimResult]], path: Path, formats: tuple[str, ...] = FORMATS
) -> None:
    """One claim's plot (PNG at ``path``, the other ``formats`` beside it), one column wide,
    legend below the axes; several results (one per sweep, labelled) share one axes.

    Power laws and threshold laws (log-log): the points (one per seed; a threshold as its
    interval between two swept values, an open triangle where it is censored below or above
    the swept range), the median per x (thresholds: the censored model's estimate per x), the
    fitted law with its 95% CI band, and the theory's slope as a dashed reference, over the
    fitted range only. Rates (log-linear): the curves' points and the fitted rate with its band
    over the fitted window (run by run for per-run rates, each over its own window). Ratios:
    each pair (reference on x, compared on y) with ``y = ratio x`` (fit, band) and
    ``y = theory x``. Claims judged at checkpoints: one column per checkpoint with each run's
    value (or pair's ratio), the interval there and the theory's line. Bounds: each run's measured
    value over its bound, against the line 1. A single result with descriptive slopes
    (``Claim.describe``) gets a second panel, below, with them; its ``Claim.references``
    (baselines) are drawn as horizontal lines."""
    single = len(results) == 1
    described = [d for d in results[0][1].described if d.fit is not None] if single else []
    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=(COLUMN_WIDTH, 5.2 if described else 2.8), layout="constrained")
        parts = fig.subfigures(2, 1) if described else [fig]
        _draw_claim(parts[0].subplots(), results)
        if described:
            _draw_descriptions(parts[1].subplots(), results[0][1].claim, described)
        for part in parts:
            handles, labels = _legend_entries(part)
            if handles:
                fit_legend(part, handles, labels, "outside lower center", columns=2)
        save(fig, path, formats)


# Matplotlib's default colours without C3 (red), which draws the theory's reference lines.
DATA_COLOURS = ("C0", "C1", "C2", "C4", "C5", "C6", "C7", "C8", "C9")


def _colour(k: int) -> str:
    """The k-th colour for measured data (points, fits): never the theory's red."""
    return DATA_COLOURS[k % len(DATA_COLOURS)]


def _legend_entries(part) -> tuple[list, list]:
    handles, labels = [], []
    for ax in part.axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    return handles, labels


def _draw_claim(ax, results: list[tuple[str | None, ClaimResult]]) -> None:
    claim = results[0][1].claim
    if claim.checkpoints:
        _draw_checkpoints(ax, results)
        return
    anchor = None
    paired_x = []
    bound_drawn = False
    for i, (label, result) in enumerate(results):
        fit, pts, color = result.fit, result.points, _colour(2 * i)
        # Only what a log axis can show: a claim whose values are all NaN (a metric a sweep
        # skipped) draws an empty plot instead of failing the report.
        pts = pts[np.isfinite(pts["x"]) & np.isfinite(pts["y"]) & (pts["y"] > 0)]
        tag = f"{label}: " if label else ""
        if pts.empty:
            continue
        if fit.kind == "threshold_power_law":
            _draw_intervals(ax, pts, fit, color, tag)
        else:
            ax.scatter(
                pts["x"], pts["y"], s=6, alpha=0.4, color=color, label=f"{tag}runs (per seed)"
            )
        positive = pts[(pts["x"] > 0) & (pts["y"] > 0)]
        if fit.kind == "ratio":
            paired_x += positive["x"].tolist()
            if fit.converged and len(positive):
                _plot_ratio(ax, fit, positive["x"], _colour(2 * i + 1), tag)
            continue
        if fit.kind == "exceedance":
            beside = [d for d in result.described if d.fit is None]
            for j, d in enumerate(beside):
                shown = d.points[d.points["y"] > 0]
                ax.scatter(
                    shown["x"],
                    shown["y"],
                    s=6,
                    alpha=0.4,
                    marker="x",
                    color=_colour(2 * i + 1 + 2 * j),
                    label=f"{tag}{d.quantity}",
                )
            if not bound_drawn:
                ax.axhline(1.0, ls="--", color="C3", label="the bound (ratio 1)")
                bound_drawn = True
            continue
        if fit.kind != "threshold_power_law":
            med = pts.groupby("x")["y"].median()
            ax.plot(med.index, med.values, "o", color=color, ms=3, label=f"{tag}median over seeds")
        if not (fit.converged and len(positive)):
            continue
        if "groups" in fit.details:
            _draw_per_run_rates(ax, fit, _colour(2 * i + 1), tag)
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
            color=_colour(2 * i + 1),
            label=f"{tag}fit: {what} {fit.value:.4g}",
        )
        if math.isfinite(fit.ci_low) and math.isfinite(fit.ci_high):
            lo, hi = (y0 * law(e, xs) for e in (fit.ci_low, fit.ci_high))
            ax.fill_between(
                xs,
                np.minimum(lo, hi),
                np.maximum(lo, hi),
                color=_colour(2 * i + 1),
                alpha=0.2,
                label=f"{tag}95% CI [{fit.ci_low:.4g}, {fit.ci_high:.4g}]",
            )
    draw_references(ax, results[0][1].references if len(results) == 1 else [])
    if anchor is not None:
        xs, x0, y0 = anchor
        ax.plot(
            xs,
            y0 * (xs / x0) ** claim.theory,
            "--",
            color="C3",
            label=f"theory: slope {claim.direction} {claim.theory:g}",
        )
    if paired_x:
        xs = np.geomspace(min(paired_x), max(paired_x), 50)
        ax.plot(
            xs,
            claim.theory * xs,
            "--",
            color="C3",
            label=f"theory: ratio {claim.direction} {claim.theory:g}",
        )
        ax.tick_params(axis="x", which="both", labelrotation=30)
    if not claim.kind.endswith("geometric_rate"):
        ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(claim.axis_label or claim.axis)
    _set_ylabel(ax, claim.quantity_label or claim.quantity)
    _title(ax, results)
    ax.grid(True, which="major", alpha=0.25)


# Points a y label may take on one line: a one-column claim plot's axes are about 110 pt tall.
YLABEL_PT = 100


def _set_ylabel(ax, text: str) -> None:
    """``text`` as the y label, on two lines where one would run past the axes: broken at the
    space outside math nearest its middle."""
    label = ax.set_ylabel(text)
    renderer = ax.figure.canvas.get_renderer()
    if label.get_window_extent(renderer).height * 72 / ax.figure.dpi <= YLABEL_PT:  # rotated
        return
    spaces, in_math = [], False
    for k, char in enumerate(text):
        in_math ^= char == "$" and text[k - 1 : k] != "\\"
        if char == " " and not in_math:
            spaces.append(k)
    if spaces:
        k = min(spaces, key=lambda k: abs(k - len(text) / 2))
        ax.set_ylabel(f"{text[:k]}\n{text[k + 1 :]}")


def _title(ax, results: list[tuple[str | None, ClaimResult]]) -> None:
    """The claim, its verdicts, and on a second line which values of the sweep's other axes
    the points hold (e.g. ``n = 64, 128, 256 pooled``)."""
    verdicts = ", ".join(r.verdict for _, r in results)
    scope = results[0][1].scope
    ax.set_title(f"{results[0][1].label}: {verdicts}" + (f"\n{scope}" if scope else ""))


def _draw_per_run_rates(ax, fit, color: str, tag: str) -> None:
    """A per-run geometric rate: each run's own fitted line over its own window, and the
    combined rate with its interval in the legend."""
    for k, group in enumerate(fit.details["groups"]):
        start, end = group["window"]
        xs = np.linspace(start, end, 20)
        label = f"{tag}fit per run: rate/step {fit.value:.4g} [{fit.ci_low:.4g}, {fit.ci_high:.4g}]"
        ax.plot(xs, group["prefactor"] * group["rate"] ** xs, color=color,
                label=None if k else label)  # fmt: skip


def _draw_checkpoints(ax, results: list[tuple[str | None, ClaimResult]]) -> None:
    """A claim judged at checkpoints, one column per checkpoint: each run's value (or pair's
    ratio), the interval there (at its Bonferroni level) and the theory's value; a log axis
    where the values span more than a decade."""
    claim = results[0][1].claim
    position = {t: k for k, t in enumerate(claim.checkpoints)}
    values = [claim.theory]
    for i, (label, result) in enumerate(results):
        tag = f"{label}: " if label else ""
        pts = result.points
        ratio = pts["y"] / pts["x"]
        shown = np.isfinite(ratio) & (ratio > 0)
        values += ratio[shown].tolist()
        # Spread the seeds a little around their checkpoint, so equal values stay visible.
        spread = (pts["seed"] - pts["seed"].mean()) / max(pts["seed"].max() - pts["seed"].min(), 1)
        x = pts["checkpoint"].map(position) + 0.25 * spread + 0.1 * i
        what = "pairs (per seed)" if claim.kind == "paired_ratio" else "runs (per seed)"
        ax.scatter(x[shown], ratio[shown], s=6, alpha=0.4, color=_colour(2 * i), label=tag + what)
        steps = result.fit.details.get("checkpoints", [])
        if steps:
            at = np.array([position[c["checkpoint"]] for c in steps]) + 0.1 * i
            value = np.array([c["value"] for c in steps])
            low = value - np.array([c["ci_low"] for c in steps])
            high = np.array([c["ci_high"] for c in steps]) - value
            what = f"{tag}geometric mean and interval"
            ax.errorbar(at, value, yerr=[low, high], fmt="o", ms=3, capsize=2,
                        color=_colour(2 * i + 1), label=what)  # fmt: skip
    ax.axhline(
        claim.theory, ls="--", color="C3", label=f"theory {claim.direction} {claim.theory:g}"
    )
    if claim.tolerance:
        ax.axhspan(claim.theory - claim.tolerance, claim.theory + claim.tolerance, color="C3",
                   alpha=0.1)  # fmt: skip
    ax.set_xticks(range(len(claim.checkpoints)), [f"t = {t:g}" for t in claim.checkpoints])
    ax.set_xlim(-0.6, len(claim.checkpoints) - 0.4)
    if max(values) > 10 * min(values):
        ax.set_yscale("log")
    ax.set_xlabel("checkpoint")
    _set_ylabel(ax, claim.quantity_label or claim.quantity)
    _title(ax, results)
    ax.grid(True, axis="y", alpha=0.25)


def _draw_intervals(ax, pts: pd.DataFrame, fit, color: str, tag: str) -> None:
    """Each seed's threshold interval (a bar between two swept values; an open triangle at the
    swept range's end where it is censored), and the model's estimate per x."""
    # Spread the seeds of one x a little, so that equal intervals stay visible.
    rank = pts.groupby("x").cumcount().to_numpy()
    width = pts.groupby("x")["x"].transform("size").to_numpy()
    x = pts["x"].to_numpy() * np.exp(0.025 * (rank - (width - 1) / 2))
    inside = (pts["censored"] == "").to_numpy()
    ax.vlines(
        x[inside],
        pts["low"][inside],
        pts["high"][inside],
        color=color,
        alpha=0.5,
        label=f"{tag}threshold interval (per seed)",
    )
    for side, marker, where in (("left", "v", "high"), ("right", "^", "low")):
        mine = (pts["censored"] == side).to_numpy()
        if mine.any():
            ax.scatter(
                x[mine],
                pts[where][mine],
                marker=marker,
                facecolors="none",
                edgecolors=color,
                s=30,
                label=f"{tag}{side}-censored ({mine.sum()})",
            )
    per_axis = fit.details.get("per_axis", [])
    estimates = [(e["x"], e["estimate"]) for e in per_axis if e["estimate"] is not None]
    if estimates:
        ex, ey = zip(*estimates, strict=True)
        ax.plot(ex, ey, "s", color=color, ms=6, label=f"{tag}estimate per x (censored model)")


def _draw_descriptions(ax, claim, described) -> None:
    """Descriptive slopes (``Claim.describe``): points, fitted slope, and the bound's slope,
    titled with where their runs were read."""
    axis_label = claim.axis_label or claim.axis
    for i, d in enumerate(described):
        pts = d.points[(d.points["x"] > 0) & (d.points["y"] > 0)]
        if pts.empty:
            continue
        color = _colour(2 * i)
        ax.scatter(pts["x"], pts["y"], s=6, alpha=0.4, color=color, label=d.quantity)
        xs = np.geomspace(pts["x"].min(), pts["x"].max(), 50)
        x0 = math.exp(np.log(xs).mean())
        if not d.fit.converged:
            continue
        y0 = d.fit.prefactor * x0**d.fit.value
        interval = f"[{d.fit.ci_low:.3g}, {d.fit.ci_high:.3g}]"
        ax.plot(
            xs,
            y0 * (xs / x0) ** d.fit.value,
            color=color,
            label=f"slope {d.fit.value:.3g} {interval}",
        )
        if d.reference is not None:
            ax.plot(
                xs,
                y0 * (xs / x0) ** d.reference,
                ":",
                color=color,
                label=f"the bound's slope {d.reference:g}",
            )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(axis_label if described[0].axis == claim.axis else described[0].axis)
    at = sorted({d.at for d in described if d.at})
    ax.set_title("descriptive (no verdict)" + (f", at {'; '.join(at)}" if at else ""))
    ax.grid(True, which="major", alpha=0.25)


def _plot_ratio(ax, fit, x: pd.Series, color: str, tag: str) -> None:
    """The fitted line ``y = ratio x`` of a paired ratio and its 95% CI band."""
    xs = np.geomspace(x.min(), x.max(), 50)
    ax.plot(xs, fit.value * xs, color=color, label=f"{tag}fit: ratio {fit.value:.4g}")
    if math.isfinite(fit.ci_low) and math.isfinite(fit.ci_high):
        ax.fill_between(
            xs,
            fit.ci_low * xs,
            fit.ci_high * xs,
            color=color,
            alpha=0.2,
            label=f"{tag}95% CI [{fit.ci_low:.4g}, {fit.ci_high:.4g}]",
        )


LATEX_RELATIONS = {"<=": r"$\leq$", ">=": r"$\geq$", "==": "$=$"}


def _latex_numbers(line: str) -> str:
    """Numbers in a table row as math: ``1e-05`` -> ``$1\\times10^{-5}$``, a slack's
    ``10^27.6`` -> ``$10^{27.6}$``, a minus sign as ``$-$`` (not a hyphen), ``inf`` as
    ``$\\infty$``; a break allowed after each underscore (long claim names wrap)."""
    line = re.sub(r"10\\textasciicircum (-?\d+(?:\.\d+)?)", r"$10^{\1}$", line)
    line = line.replace("\\_", "\\_\\allowbreak{}")
    line = re.sub(
        r"(?<![\w.])(-?)(\d+(?:\.\d+)?)e([+-]?\d+)\b",
        lambda m: f"${m[1]}{m[2]}\\times10^{{{int(m[3])}}}$",
        line,
    )
    line = re.sub(r"(?<![\w.$])-inf\b", r"$-\\infty$", line)
    line = re.sub(r"(?<![\w.$-])inf\b", r"$\\infty$", line)
    return re.sub(r"(?<![\w.${])-(?=\d)", "$-$", line)


def latex_table(table: pd.DataFrame, caption: str, label: str) -> str:
    """A booktabs LaTeX table (``\\usepackage{booktabs}``) of a claim table, to ``\\input``;
    ``caption`` is LaTeX (see :func:`latex_escape`), ``label`` its ``\\label``.

    Text is escaped; numbers, minus signs and the theory's relation are typeset in math mode;
    small type and narrow column gaps keep a seven-column claim table within an article's
    column (checked with pdflatex: no overfull box).
    """
    # Wrapping columns for the claim, the interval, the verdict and the slack; the rest as wide
    # as needed (with the runs, about 330 pt: an article's text width is 345 pt).
    wide = {
        "claim": "p{8.2em}",
        "fitted [95% CI]": "p{7.5em}",
        "verdict": "p{5.3em}",
        "slack": "p{6.6em}",
    }
    columns = "".join(wide.get(c, "l" if table[c].dtype == object else "r") for c in table)
    tex = table.to_latex(
        index=False, escape=True, caption=caption, label=label, column_format=columns
    )
    head, _, rest = tex.partition("\\midrule\n")
    body, _, tail = rest.partition("\\bottomrule\n")
    body = "\n".join(_latex_numbers(line) for line in body.splitlines()) + "\n"
    tex = f"{head}\\midrule\n{body}\\bottomrule\n{tail}"
    for text, math_ in LATEX_RELATIONS.items():
        tex = tex.replace(f" {text} ", f" {math_} ")
    tex = tex.replace("\\begin{tabular}", "\\small\\setlength{\\tabcolsep}{3pt}\n\\begin{tabular}")
    return tex


def latex_label(*parts: str) -> str:
    """A ``\\label`` key from a sweep's name and more (``tab:sdyn:<sweep>``), characters
    LaTeX and hyperref accept."""
    return "tab:sdyn:" + ":".join(re.sub(r"[^A-Za-z0-9.+-]", "-", p) for p in parts)


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
        title = ", ".join(f"{c.split('.')[-1]}={row[c]:g}" for c in axes_of_grid)
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


VERDICT_LEGEND = (
    "consistent / violated: the 95% interval lies within / outside what the theorem allows; "
    f"consistent (vacuous): a per-run bound every run meets by more than a factor "
    f"{1 / POWER_LIMIT:.0e} (the check could not have failed: no evidence for the theorem); "
    "inconclusive: it straddles the bound, the evidence is too thin, or a rate is still "
    "changing across its window; outside assumptions: "
    "the runs are not in the setting the theorem covers (the measured value is shown, the "
    "theorem is not judged); not measured: the sweep does not vary what the claim is about, "
    "or a curve does not move over its window (no rate to fit); slack: the room a bound "
    "leaves, as a difference (exponents, rates), a factor (ratios) or decades (per-run "
    "bounds), with its interval"
)


def verdict_counts(results: list[ClaimResult]) -> str:
    """One line: how many measured claims got each verdict, in :data:`VERDICTS` order, e.g.
    ``"verdicts: 4 consistent, 2 consistent (vacuous)"`` (vacuous checks counted apart)."""
    counts = Counter(r.verdict for r in results if r.measured)
    parts = [f"{counts[v]} {v}" for v in VERDICTS if counts[v]]
    return "verdicts: " + (", ".join(parts) if parts else "none")


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
    return {
        "experiment": section("experiment"),
        "data": section("data"),
        "grid": section("grid"),
        "budget": f"{per_run}, {planned} runs ({seeds} seeds per grid point)",
        "differs": runs.attrs.get("settings") or "the experiment's defaults",
    }


def setting_line(runs: pd.DataFrame) -> str:
    """One line: experiment, data, grid name, what differs from the defaults, the budget."""
    s, config = setting(runs), runs.attrs.get("config", {})
    names = "/".join(config.get(f"{k}.name", "?") for k in ("experiment", "grid", "data"))
    return f"{names}; {s['differs']}; {s['budget']}"


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (for captions)."""
    special = {c: f"\\{c}" for c in "&%$#_{}"}
    special.update(
        {"~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "\\": r"\textbackslash{}"}
    )
    return "".join(special.get(c, c) for c in text)


def write(
    results: list[ClaimResult],
    runs: pd.DataFrame,
    out_dir: Path,
    sweep: str,
    search=False,
    formats: tuple[str, ...] = FORMATS,
) -> str:
    """Write report.md, report.tex, report.json and one figure per measured claim (each of
    ``formats``); return the text for the terminal: the header, the table of measured claims,
    the claims not measured.

    ``search``: the sweep is a threshold search (sdyn/search.py), whose plan is the fixed grid
    at the same resolution: the header compares the runs it spent with that grid's, and
    report.md lists each threshold claim's interval per axis value and seed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = summary_table(results)
    counts = runs["status"].value_counts().to_dict() if "status" in runs else {}
    planned = runs.attrs.get("planned", len(runs))
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    header = f"sweep {sweep}: {len(runs)} of {planned} planned runs recorded ({statuses})"
    if search:
        header = (
            f"threshold search {sweep}: {len(runs)} runs probed ({statuses}), against "
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
    md += ["", table.to_markdown(index=False), "", counts, ""]
    md += [absent, ""] if absent else []
    md += [f"Verdicts: {VERDICT_LEGEND}.", "", f"Evidence rule: {EVIDENCE_RULE}.", ""]
    for r in results:
        if not r.measured:
            continue
        png = f"{file_stem(r.label)}.png"
        plot_overlay([(None, r)], out_dir / png, formats)
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
        if r.slack:
            md += [f"Slack ({r.slack.unit}): the bound {_fmt(r.theory)} leaves {r.slack.text}.", ""]
        if r.claim.assumptions:
            md += ["Assumes: " + "; ".join(a.statement for a in r.claim.assumptions) + ".", ""]
        md += [f"- reference, {label}: {value:.4g}" for label, value in r.references]
        md += [f"- {d.text}" for d in r.described]
        md += [f"- {note}" for note in r.as_dict()["notes"]]
        md += ["", f"![{r.label}]({png})", ""]
        if search and r.claim.kind == "threshold_power_law":
            md += [_intervals(r), ""]
    (out_dir / "report.md").write_text("\n".join(md))
    columns = ["claim", "fitted [95% CI]", "theory", "verdict", "slack", "runs"]
    sources = "; ".join(dict.fromkeys(r.claim.source for r in results if r.measured))
    caption = latex_escape(
        f"Measured claims vs theory ({sources}), sweep {sweep}: {setting_line(runs)}. "
        "95% bootstrap intervals."
    )
    tex = latex_table(table[columns], caption, latex_label(sweep))
    (out_dir / "report.tex").write_text(tex)
    payload = {
        "sweep": sweep,
        "runs": len(runs),
        "setting": where,
        "config": runs.attrs.get("config", {}),
        "verdict_legend": VERDICT_LEGEND,
        "evidence_rule": EVIDENCE_RULE,
        "claims": [r.as_dict() for r in results if r.measured],
        "not_measured": [{"claim": r.label, "reason": r.reason} for r in results if not r.measured],
    }
    (out_dir / "report.json").write_text(strict_json(payload))
    return text


def _intervals(result: ClaimResult) -> str:
    """A threshold claim's intervals as a markdown table: per axis value and seed, the last
    failure, the first success above it, censoring and a non-monotone outcome."""
    pts = result.points.sort_values(["x", "seed"])
    table = pd.DataFrame(
        {
            result.claim.axis: pts["x"].map("{:g}".format),
            "seed": pts["seed"].astype(int),
            "above (last failure)": pts["low"].map("{:.4g}".format),
            "at or below (first success)": pts["high"].map("{:.4g}".format),
            "censored": pts["censored"],
            "non-monotone": pts["non_monotone"].map({True: "yes", False: ""}),
        }
    )
    return table.to_markdown(index=False)


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

    Last it writes :data:`sdyn.analysis.kept.REUSE_FILE`, by which
    :func:`sdyn.analysis.kept.find` finds the report again for the same runs, claims, formats
    and analysis code.

    Claims the sweep does not measure (another grid's, an axis it does not vary, a reference
    optimiser it did not run) are listed once as such, without a table row or a plot.

    Returns the :class:`Report`; ``metrics`` holds ``<claim>.value/ci_low/ci_high`` of each
    measured claim, for logging on the parent run (the claim label as :func:`file_stem` writes
    it: MLflow metric names allow no brackets).

    Raises:
        ValueError: no such sweep.
    """
    runs = load_sweep(sweep, tracking_uri) if runs is None else runs
    experiment = plugins.get(runs.attrs["experiment"])
    key = report_key(runs, experiment, formats)
    (out_dir / REUSE_FILE).unlink(missing_ok=True)  # a report cut short is never reused
    curves = load_curves(runs, tracking_uri)
    grid = runs.attrs.get("grid", "")
    # The fits are small: BLAS threads gain nothing there, and beside other busy processes their
    # spinning made fits 10x slower.
    with threadpool_limits(limits=1, user_api="blas"):
        results = [r for c in experiment.claims for r in evaluate(c, runs, curves, grid=grid)]
    search = issubclass(experiment.grids.get(grid, object), SearchGrid)
    text = write(results, runs, out_dir, runs.attrs["sweep"], search, formats)
    papers = []
    for figure in experiment.figures:
        caption = plot_figure(figure, runs, curves, out_dir / f"{figure.name}.png", formats)
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
    kept = {
        "key": key,
        "table": text,
        "metrics": metrics,
        "verdicts": verdicts,
        "files": sorted(p.name for p in out_dir.iterdir() if p.is_file()),
    }
    (out_dir / REUSE_FILE).write_text(json.dumps(kept, allow_nan=True))
    return Report(runs.attrs["sweep"], text, metrics, verdicts, results, runs)
