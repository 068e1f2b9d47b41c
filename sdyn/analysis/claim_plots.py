"""A claim's plot: its measured points, the fitted law with its 95% interval, and the theory's
line, one column wide (:func:`plot_overlay`); several sweeps' results of one claim share its axes.

Drawn by :func:`sdyn.analysis.report.write` (a sweep's report) and :func:`sdyn.report.compare`
(sweeps side by side).
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written to files, also on machines without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sdyn.analysis.claims import ClaimResult  # noqa: E402
from sdyn.analysis.figures import (  # noqa: E402
    COLUMN_WIDTH,
    FORMATS,
    STYLE,
    draw_references,
    fit_legend,
    save,
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
    """The claim and its verdicts, on two lines where one would be wider than the axes (the
    title is centred on them, and ran past the figure's edge), and on the next line which values
    of the sweep's other axes the points hold (e.g. ``n = 64, 128, 256 pooled``)."""
    label, verdicts = results[0][1].label, ", ".join(r.verdict for _, r in results)
    renderer = ax.figure.canvas.get_renderer()
    title = ax.set_title(f"{label}: {verdicts}")
    if title.get_window_extent(renderer).width > ax.get_window_extent(renderer).width:
        title.set_text(f"{label}:\n{verdicts}")
    scope = results[0][1].scope
    if scope:
        title.set_text(f"{title.get_text()}\n{scope}")


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
