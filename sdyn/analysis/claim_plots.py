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

from sdyn.analysis.claims import ClaimResult  # noqa: E402
from sdyn.analysis.figures import (  # noqa: E402
    COLUMN_WIDTH,
    FORMATS,
    STYLE,
    draw_references,
    fit_legend,
    save,
)
from sdyn.analysis.plotting import colour  # noqa: E402
from sdyn.analysis.verdict import format_interval  # noqa: E402
from sdyn.api import blamed  # noqa: E402


def plot_overlay(
    results: list[tuple[str | None, ClaimResult]], path: Path, formats: tuple[str, ...] = FORMATS
) -> None:
    """One claim's plot (PNG at ``path``, the other ``formats`` beside it), one column wide,
    legend below the axes; several results (one per sweep, labelled) share one axes, drawn by
    the claim's kind (:meth:`sdyn.api.Claim.draw`), labelled by :meth:`sdyn.api.Claim.labels`,
    titled with the claim, its verdicts and the values of the sweep's other axes that the
    points drawn hold.

    A single result with descriptive slopes (``Claim.describe``) gets a second panel, below,
    with them; its ``Claim.references`` (baselines) are drawn as horizontal lines."""
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


def _legend_entries(part) -> tuple[list, list]:
    handles, labels = [], []
    for ax in part.axes:
        h, lab = ax.get_legend_handles_labels()
        handles += h
        labels += lab
    return handles, labels


def _draw_claim(ax, results: list[tuple[str | None, ClaimResult]]) -> None:
    """The claim's own drawing, its references, labels, title and grid."""
    claim = results[0][1].claim
    with blamed(claim.label, type(claim)):
        claim.draw(ax, results)
    draw_references(ax, results[0][1].references if len(results) == 1 else [])
    xlabel, ylabel = claim.labels()
    ax.set_xlabel(xlabel)
    _set_ylabel(ax, ylabel)
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


def _draw_descriptions(ax, claim, described) -> None:
    """Descriptive slopes (``Claim.describe``): points, fitted slope, and the bound's slope,
    titled with where their runs were read."""
    axis_label = claim.axis_label or claim.axis
    for i, d in enumerate(described):
        pts = d.points[(d.points["x"] > 0) & (d.points["y"] > 0)]
        if pts.empty:
            continue
        color = colour(2 * i)
        ax.scatter(pts["x"], pts["y"], s=6, alpha=0.4, color=color, label=d.quantity)
        xs = np.geomspace(pts["x"].min(), pts["x"].max(), 50)
        x0 = math.exp(np.log(xs).mean())
        if not d.fit.converged:
            continue
        y0 = d.fit.prefactor * x0**d.fit.value
        interval = format_interval(d.fit.ci_low, d.fit.ci_high)
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
