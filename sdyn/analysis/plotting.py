"""What the claim kinds draw with: measured points, a fitted law with its interval band, the
theory's line, a claim judged at checkpoints; every label names what is drawn and each
interval by what it is (:func:`interval_text`: a 95% CI, a bracket, an exact value).

Each kind's :meth:`~sdyn.api.Claim.draw` calls these on one axes; the figure around it (title,
y label, legend, file) is :mod:`sdyn.analysis.claim_plots`'.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sdyn.analysis.verdict import format_interval

# Matplotlib's default colours without C3 (red), which draws the theory's reference lines.
DATA_COLOURS = ("C0", "C1", "C2", "C4", "C5", "C6", "C7", "C8", "C9")
THEORY = "C3"


def colour(k: int) -> str:
    """The k-th colour for measured data (points, fits): never the theory's red."""
    return DATA_COLOURS[k % len(DATA_COLOURS)]


def tag(label: str | None) -> str:
    """A legend prefix naming the sweep when several share the axes."""
    return f"{label}: " if label else ""


def interval_text(claim, fit) -> str:
    """A fit's interval as a legend names it: ``95% CI [1.000097, 1.000143]`` (the digits its
    width needs), ``bracket [0.75, 1.33]``, or ``exact``."""
    name = claim.interval_name(fit)
    if name == "exact":
        return f"exact ({fit.value:.6g})"
    return f"{name} {format_interval(fit.ci_low, fit.ci_high)}"


def positive(points: pd.DataFrame) -> pd.DataFrame:
    """The points a log-log axes can show: finite, x and y positive."""
    x, y = points["x"], points["y"]
    return points[np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)]


def runs(ax, points: pd.DataFrame, k: int, label: str, what: str = "runs (per seed)") -> None:
    """Each point, faint."""
    ax.scatter(
        points["x"], points["y"], s=6, alpha=0.4, color=colour(2 * k), label=f"{label}{what}"
    )


def medians(ax, points: pd.DataFrame, k: int, label: str) -> None:
    """The median over seeds at each x."""
    med = points.groupby("x")["y"].median()
    ax.plot(
        med.index, med.values, "o", color=colour(2 * k), ms=3, label=f"{label}median over seeds"
    )


def law(ax, claim, fit, xs: np.ndarray, k: int, label: str, *, geometric: bool) -> tuple:
    """The fitted power law (``geometric=False``, ``y = c x^value``) or geometric rate
    (``y = c value^t``) over ``xs`` with its interval band; returns ``(xs, x0, y0)``, the
    anchor at which the theory's line is drawn."""
    x0 = xs.mean() if geometric else math.exp(np.log(xs).mean())

    def curve(e):  # y relative to y(x0) for slope or rate e
        return e ** (xs - x0) if geometric else (xs / x0) ** e

    y0 = fit.prefactor * (fit.value**x0 if geometric else x0**fit.value)
    what = "rate/step" if geometric else "slope"
    ax.plot(
        xs,
        y0 * curve(fit.value),
        color=colour(2 * k + 1),
        label=f"{label}fit: {what} {fit.value:.4g}",
    )
    if math.isfinite(fit.ci_low) and math.isfinite(fit.ci_high):
        lo, hi = y0 * curve(fit.ci_low), y0 * curve(fit.ci_high)
        ax.fill_between(
            xs,
            np.minimum(lo, hi),
            np.maximum(lo, hi),
            color=colour(2 * k + 1),
            alpha=0.2,
            label=f"{label}{interval_text(claim, fit)}",
        )
    return xs, x0, y0


def theory_slope(ax, claim, anchor: tuple) -> None:
    """The theory's exponent as a dashed line through the fitted law's anchor."""
    xs, x0, y0 = anchor
    ax.plot(
        xs,
        y0 * (xs / x0) ** claim.theory,
        "--",
        color=THEORY,
        label=f"theory: slope {claim.direction} {claim.theory:g}",
    )


def power_laws(ax, results, *, log_x: bool = True) -> None:
    """Power laws on log-log axes: each seed's point, the median per x, the fitted law with its
    band over the fitted range, and the theory's slope through it."""
    claim, anchor = results[0][1].claim, None
    for k, (name, result) in enumerate(results):
        points = positive(result.points)
        if points.empty:
            continue
        runs(ax, points, k, tag(name))
        medians(ax, points, k, tag(name))
        if result.fit.converged:
            xs = np.geomspace(points["x"].min(), points["x"].max(), 50)
            drawn = law(ax, claim, result.fit, xs, k, tag(name), geometric=False)
            anchor = anchor or drawn  # the theory's line through the first fit; every fit drawn
    if anchor is not None:
        theory_slope(ax, claim, anchor)
    ax.set_xscale("log" if log_x else "linear")
    ax.set_yscale("log")


def rates(ax, results) -> None:
    """Geometric rates on log-linear axes: the curves' points and the fitted rate with its band
    over the fitted window, run by run (each over its own window) for per-run rates, and the
    theory's rate as a dashed line through the fit."""
    claim, anchor = results[0][1].claim, None
    for k, (name, result) in enumerate(results):
        points, fit = positive(result.points), result.fit
        if points.empty:
            continue
        runs(ax, points, k, tag(name))
        medians(ax, points, k, tag(name))
        if not fit.converged:
            continue
        xs = np.linspace(*fit.window, 50)
        if "groups" in fit.details:
            for j, group in enumerate(fit.details["groups"]):
                xs = np.linspace(*group["window"], 20)
                rate = f"rate/step {fit.value:.4g}, {interval_text(claim, fit)}"
                text = f"{tag(name)}fit per run: {rate}"
                ax.plot(
                    xs,
                    group["prefactor"] * group["rate"] ** xs,
                    color=colour(2 * k + 1),
                    label=None if j else text,
                )
            anchor = anchor or (xs, xs.mean(), fit.prefactor * fit.value ** xs.mean())
        else:
            drawn = law(ax, claim, fit, xs, k, tag(name), geometric=True)
            anchor = anchor or drawn
    if anchor is not None:
        xs, x0, y0 = anchor
        ax.plot(
            xs,
            y0 * claim.theory ** (xs - x0),
            "--",
            color=THEORY,
            label=f"theory: rate/step {claim.direction} {claim.theory:g}",
        )
    ax.set_yscale("log")


def checkpoints(ax, results, what: str) -> None:
    """A claim judged at checkpoints, one column per checkpoint: each value (``what``: runs or
    pairs), the interval there at its Bonferroni level, and the theory's value; a log axis where
    the values span more than a decade."""
    claim = results[0][1].claim
    position = {t: k for k, t in enumerate(claim.checkpoints)}
    values = [claim.theory]
    for i, (name, result) in enumerate(results):
        pts = result.points
        ratio = pts["y"] / pts["x"]
        shown = np.isfinite(ratio) & (ratio > 0)
        values += ratio[shown].tolist()
        # Spread the seeds a little around their checkpoint, so equal values stay visible.
        spread = (pts["seed"] - pts["seed"].mean()) / max(pts["seed"].max() - pts["seed"].min(), 1)
        x = pts["checkpoint"].map(position) + 0.25 * spread + 0.1 * i
        ax.scatter(
            x[shown],
            ratio[shown],
            s=6,
            alpha=0.4,
            color=colour(2 * i),
            label=f"{tag(name)}{what} (per seed)",
        )
        steps = result.fit.details.get("checkpoints", [])
        if steps:
            at = np.array([position[c["checkpoint"]] for c in steps]) + 0.1 * i
            value = np.array([c["value"] for c in steps])
            low = value - np.array([c["ci_low"] for c in steps])
            high = np.array([c["ci_high"] for c in steps]) - value
            level = f"{100 * result.fit.details.get('confidence', 0.95):.3g}% CI each"
            ax.errorbar(
                at,
                value,
                yerr=[low, high],
                fmt="o",
                ms=3,
                capsize=2,
                color=colour(2 * i + 1),
                label=f"{tag(name)}geometric mean, {level}",
            )
    ax.axhline(
        claim.theory, ls="--", color=THEORY, label=f"theory {claim.direction} {claim.theory:g}"
    )
    if claim.tolerance:
        ax.axhspan(
            claim.theory - claim.tolerance, claim.theory + claim.tolerance, color=THEORY, alpha=0.1
        )
    ax.set_xticks(range(len(claim.checkpoints)), [f"t = {t:g}" for t in claim.checkpoints])
    ax.set_xlim(-0.6, len(claim.checkpoints) - 0.4)
    if max(values) > 10 * min(values):
        ax.set_yscale("log")


def ratio_lines(ax, results) -> None:
    """Paired values (the reference's on x, the compared on y) with ``y = ratio x`` (fit and
    its band) and ``y = theory x``."""
    claim, paired = results[0][1].claim, []
    for k, (name, result) in enumerate(results):
        points, fit = positive(result.points), result.fit
        if points.empty:
            continue
        runs(ax, points, k, tag(name), "pairs (per seed)")
        paired += points["x"].tolist()
        if fit.converged:
            xs = np.geomspace(points["x"].min(), points["x"].max(), 50)
            ax.plot(
                xs,
                fit.value * xs,
                color=colour(2 * k + 1),
                label=f"{tag(name)}fit: ratio {fit.value:.4g}",
            )
            if math.isfinite(fit.ci_low) and math.isfinite(fit.ci_high):
                ax.fill_between(
                    xs,
                    fit.ci_low * xs,
                    fit.ci_high * xs,
                    color=colour(2 * k + 1),
                    alpha=0.2,
                    label=f"{tag(name)}{interval_text(claim, fit)}",
                )
    if paired:
        xs = np.geomspace(min(paired), max(paired), 50)
        ax.plot(
            xs,
            claim.theory * xs,
            "--",
            color=THEORY,
            label=f"theory: ratio {claim.direction} {claim.theory:g}",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
