"""The papers' figures, drawn from the recorded curves as an experiment's ``FIGURES`` specify.

Every figure is sized for one column of a two-column paper (:data:`COLUMN_WIDTH`), with its
legend outside the data, and written as PNG and PDF. A line is the median of its runs (the
seeds), their range shaded; on a log axis a value below float64 resolution (a fraction
``Panel.relative_floor`` of its run's first value) is not drawn, nor anything after a run
stopped: a line ends with a mark where half its runs have got there.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written to files, also on machines without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import (  # noqa: E402
    LogFormatterSciNotation,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
    ScalarFormatter,
)

from sdyn.analysis import rows as rows_mod  # noqa: E402
from sdyn.api import Figure, Panel  # noqa: E402

COLUMN_WIDTH = 3.25  # inches: one column of a two-column paper
# Font sizes that stay readable when the figure is printed at COLUMN_WIDTH.
STYLE = {
    "font.size": 7,
    "axes.titlesize": 7,
    "axes.labelsize": 7,
    "legend.fontsize": 6.5,
    "xtick.labelsize": 6,
    "ytick.labelsize": 6,
    "lines.linewidth": 1.0,
    "savefig.dpi": 300,
    "svg.hashsalt": "sdyn",  # the same ids in every run: equal inputs give equal SVG bytes
}
# The mark where a line ends because its runs are below float64 resolution or have stopped.
END_MARK = {"marker": "x", "markersize": 4, "markeredgewidth": 1.0, "linestyle": "none"}
# Line styles of reference lines (L*, a baseline's value), in the order they are given.
REFERENCE_STYLES = ("--", ":", "-.")


def _step_axis(ax, last: float) -> None:
    """The step axis of every curve plot: linear from 0 to 1, logarithmic beyond (symlog), so
    that step 0 (the initialisation) is shown; ticks at 0 and the powers of ten."""
    ax.set_xscale("symlog", linthresh=1.0, linscale=0.6)
    top = max(int(math.ceil(math.log10(max(last, 1.0)))), 1)
    ticks = [0, *(10**k for k in range(top + 1) if 10**k <= last * 1.01)]
    ax.set_xticks(ticks, ["0", *(f"10{_superscript(k)}" if k > 1 else f"{10**k}" for k in
                                 range(len(ticks) - 1))])  # fmt: skip
    ax.set_xticks([], minor=True)
    ax.set_xlim(0, max(last, 1.0) * 1.15)


# The figure files a report writes: PNG for report.md, SVG for index.html (inline); PDF on
# request (report.formats, sdyn.config.ReportOptions), for LaTeX.
FORMATS = ("png", "svg")
# No creation date in the files: equal inputs give equal bytes.
_METADATA = {"png": None, "svg": {"Date": None}, "pdf": {"CreationDate": None}}


_SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _superscript(exponent: int) -> str:
    return str(exponent).translate(_SUPERSCRIPTS)


# LogFormatterSciNotation's labels: 10^{-3}, 2\times10^{-2}, each as mathtext.
_SCIENTIFIC = re.compile(r"\$\\mathdefault\{(?:(\d+)\\times)?10\^\{(-?\d+)\}\}\$")


class PlainLogFormatter(LogFormatterSciNotation):
    """Matplotlib's log-axis tick labels (the ticks, and which are labelled, unchanged) in plain
    text: ``10⁻³``, ``2×10⁻²``. The same look without mathtext, whose parsing took a fifth of a
    report's drawing time; any other label is left as matplotlib writes it."""

    def __call__(self, x, pos=None) -> str:
        label = super().__call__(x, pos)
        match = _SCIENTIFIC.fullmatch(label)
        if match is None:
            return label
        coefficient, exponent = match.groups()
        return f"{coefficient + '×' if coefficient else ''}10{_superscript(int(exponent))}"


# A log axis spanning fewer decades than this has few or no powers of ten to label: its ticks
# are put at 1, 2 and 5 times powers of ten (or, under half a decade, as on a linear axis) and
# labelled as plain numbers (matplotlib's LogLocator, MaxNLocator and ScalarFormatter), so that
# they read 10, 20, 50 or 0.9, 1, 1.1, not 9×10⁻¹, 10⁰, 10×10⁻¹ in turn.
NARROW_DECADES = 1.5


def log_ticks(fig) -> None:
    """Tick every log axis of ``fig`` for its data's range, with matplotlib's own locators and
    formatters: over :data:`NARROW_DECADES` or more, powers of ten labelled in plain text
    (:class:`PlainLogFormatter`, the state of matplotlib's log formatter kept) and unlabelled
    minor ticks; over fewer, ticks at 1, 2 and 5 times powers of ten (under half a decade,
    ``MaxNLocator``'s linear ticks) with the digits that tell them apart (``ScalarFormatter``,
    no offset) and no minor ticks."""
    for ax in fig.get_axes():
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if axis.get_scale() != "log":
                continue
            low, high = sorted(limits)
            decades = math.log10(high / low) if low > 0 else math.inf
            if decades < NARROW_DECADES:
                # Half a decade or more holds some of 1, 2, 5 times a power of ten; less, not.
                locator = LogLocator(subs=(1.0, 2.0, 5.0)) if decades >= 0.5 else MaxNLocator(4)
                axis.set_major_locator(locator)
                axis.set_major_formatter(ScalarFormatter(useOffset=False))
                axis.set_minor_locator(NullLocator())
                continue
            formatter = axis.get_major_formatter()
            if type(formatter) is LogFormatterSciNotation:
                plain = PlainLogFormatter.__new__(PlainLogFormatter)
                plain.__dict__.update(formatter.__dict__)
                axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())


def save(fig, png: Path, formats: tuple[str, ...] = FORMATS) -> None:
    """Write ``fig`` as each of ``formats`` (png, svg, pdf: ``png`` with that suffix), laid out
    once, its log axes ticked for their range (:func:`log_ticks`); close it."""
    log_ticks(fig)
    for k, kind in enumerate(formats):
        fig.savefig(png.with_suffix(f".{kind}"), metadata=_METADATA[kind])
        if k == 0:  # the first format's layout holds for the others: no second layout pass
            fig.set_layout_engine("none")
    plt.close(fig)


def fit_legend(fig, handles: list, labels: list[str], loc: str, columns: int = 3, **options):
    """A frameless legend on ``fig`` (a figure or subfigure) at ``loc`` whose width fits the
    figure's, so that no entry is cut off at its edge: in the most columns, up to ``columns``,
    that fit with the labels as they are or, failing that, wrapped at :data:`LEGEND_WRAP`
    characters. Returns the legend."""
    renderer = fig.figure.canvas.get_renderer()
    wrapped = [textwrap.fill(label, LEGEND_WRAP) for label in labels]
    for ncols in range(min(columns, len(handles)), 0, -1):
        for texts in (labels, wrapped):
            legend = fig.legend(handles, texts, loc=loc, ncols=ncols, frameon=False, **options)
            if legend.get_window_extent(renderer).width <= fig.bbox.width:
                return legend
            legend.remove()
    return fig.legend(handles, wrapped, loc=loc, ncols=1, frameon=False, **options)


# Characters per line of a legend entry that must be wrapped to fit (fit_legend).
LEGEND_WRAP = 24


def _label(value) -> str:
    """A column value in a label: numbers compactly, anything else (an optimiser name) as is."""
    return f"{value:g}" if isinstance(value, int | float | np.number) else str(value)


def _lines(figure: Figure, chosen: pd.DataFrame, every: pd.DataFrame) -> list[tuple]:
    """``(value, label, colour)`` of the figure's lines present in ``chosen``. Named values
    keep one colour across a report's figures (their rank among all the sweep's values);
    numbers (a grid axis) run through a colour map."""
    present = set(chosen[figure.line_by].dropna())
    if figure.lines:
        named = [(v, label) for v, label in figure.lines if v in present]
        order = sorted(every[figure.line_by].dropna().unique(), key=str)
        return [(v, label, f"C{order.index(v)}") for v, label in named]
    values = sorted(present)
    name = figure.line_by.split(".")[-1]
    cmap = plt.get_cmap("viridis")
    return [
        (v, f"{name}={_label(v)}", cmap(i / max(len(values) - 1, 1))) for i, v in enumerate(values)
    ]


@dataclass
class Line:
    """One line of a panel as drawn: the line's ``value`` of ``Figure.line_by``, its legend
    ``label`` and ``colour``, and ``curve`` indexed by step with columns ``median``, ``low``
    and ``high`` (over the line's runs); ``ended``: the line stops before the last step (its
    runs went below float64 resolution or stopped) and is marked there."""

    value: object
    label: str
    colour: object
    curve: pd.DataFrame
    ended: bool


def _summarise(table: pd.DataFrame, panel: Panel) -> tuple[pd.DataFrame, bool] | None:
    """One line from its runs' curves (``table``: steps x runs): median, min and max over the
    runs while fewer than half of them are unresolved, and whether it ends early; None when
    no run recorded a value to draw.

    A run is unresolved after its last finite value (it stopped) and, on a log axis, at or
    below ``panel.relative_floor`` times its first positive value. A run that stopped counts
    at its last value, and a value below the floor at the floor, so that the shaded range
    reaches no lower than a run went: a run that stopped at its tolerance is not drawn at
    float64's resolution.
    """
    # From the first recorded value (on a log axis, the first positive one: u_0 = 0, say).
    started = (table > 0) if panel.log else table.notna()
    table = table.loc[started.any(axis=1).cummax()]
    if table.empty:  # its runs recorded nothing to draw (they failed, say)
        return None
    values = table.to_numpy(dtype=float)
    finite = np.isfinite(values)
    last = np.where(finite.any(0), finite.shape[0] - 1 - np.argmax(finite[::-1], axis=0), -1)
    ended = np.arange(values.shape[0])[:, None] > last[None, :]
    shown = pd.DataFrame(values, index=table.index).ffill().to_numpy()
    if panel.log:
        first = np.array([col[col > 0][0] if (col > 0).any() else np.nan for col in values.T])
        floor = panel.relative_floor * first
        below = ~(shown > floor[None, :])  # NaN (no value yet) counts as below
        unresolved = ended | below
        shown = np.where(below, floor[None, :], shown)
    else:
        unresolved = ended
    stop = unresolved.mean(axis=1) >= 0.5
    end = int(np.argmax(stop)) if stop.any() else len(stop)
    curve = pd.DataFrame(
        {"median": np.median(shown, axis=1), "low": shown.min(axis=1), "high": shown.max(axis=1)},
        index=table.index,
    )
    return curve.iloc[: max(end, 1)], end < len(stop)


def figure_lines(figure: Figure, runs: pd.DataFrame, curves: pd.DataFrame) -> dict[str, list]:
    """What :func:`plot_figure` draws: per panel (by metric) that has data, its
    :class:`Line` objects, in legend order; empty when none of the figure's runs recorded
    curves."""
    chosen = rows_mod.select(runs, figure.where, figure.at_middle)
    if chosen.empty:
        return {}
    mine = curves[curves["config_hash"].isin(chosen["config_hash"])]
    out = {}
    for panel in figure.panels:
        if panel.metric not in mine or not mine[panel.metric].notna().any():
            continue
        lines = []
        for value, label, colour in _lines(figure, chosen, runs):
            hashes = chosen.loc[chosen[figure.line_by] == value, "config_hash"]
            of_line = mine[mine["config_hash"].isin(hashes)]
            table = of_line.pivot(index="step", columns="config_hash", values=panel.metric)
            summary = _summarise(table, panel)
            if summary is not None:
                lines.append(Line(value, label, colour, *summary))
        if lines:  # none when the sweep has none of the figure's lines (e.g. no SGD run)
            out[panel.metric] = lines
    return out


def plot_figure(
    figure: Figure,
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    png: Path,
    formats: tuple[str, ...] = FORMATS,
) -> str:
    """Draw ``figure`` from a sweep's runs and curves into ``png`` (and the other ``formats``
    beside it, :func:`save`).

    Returns its caption for the report (title, what is drawn, the ``settings`` values and the
    figure's note), or "" when none of its runs recorded curves (nothing is written).
    """
    drawn = figure_lines(figure, runs, curves)
    if not drawn:
        return ""
    chosen = rows_mod.select(runs, figure.where, figure.at_middle)
    chosen = chosen[chosen[figure.line_by].isin([n.value for n in next(iter(drawn.values()))])]
    panels = [p for p in figure.panels if p.metric in drawn]
    last = float(curves.loc[curves["config_hash"].isin(chosen["config_hash"]), "step"].max())
    columns = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / columns)
    height = 2.0 if columns == 1 else 1.3 * rows
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            rows, columns, figsize=(COLUMN_WIDTH, height + 0.45), layout="constrained",
            squeeze=False, sharex=True,
        )  # fmt: skip
        handles = [Patch(color="0.6", alpha=0.3, label=f"range ({_seeds(chosen)})")]
        for ax, panel in zip(axes.flat, panels, strict=False):
            for line in drawn[panel.metric]:
                curve = line.curve
                ax.plot(curve.index, curve["median"], color=line.colour)
                ax.fill_between(curve.index, curve["low"], curve["high"], color=line.colour,
                                alpha=0.2, linewidth=0)  # fmt: skip
                if line.ended:
                    ax.plot(curve.index[-1], curve["median"].iloc[-1], color=line.colour,
                            **END_MARK)  # fmt: skip
            draw_references(ax, rows_mod.reference_values(panel.references, chosen))
            _step_axis(ax, last)
            ax.set_yscale("log" if panel.log else "linear")
            ax.set_ylabel(panel.label)
            ax.grid(True, which="major", alpha=0.25)
        for ax in axes[-1]:
            ax.set_xlabel("iteration t")
        for ax in axes.flat[len(panels) :]:
            ax.set_visible(False)
        lines = drawn[panels[0].metric]
        handles = [Line2D([], [], color=n.colour, label=n.label) for n in lines] + handles
        ended = any(n.ended for lines in drawn.values() for n in lines)
        if ended:
            handles.append(Line2D([], [], color="0.3", **END_MARK, label="stopped / float64 floor"))
        for ax in axes.flat:  # the panels' references, each named once
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                if label not in [h.get_label() for h in handles]:
                    handles.append(handle)
        fit_legend(fig, handles, [h.get_label() for h in handles], "outside upper center",
                   handlelength=1.5, columnspacing=1.0)  # fmt: skip
        save(fig, png, formats)
    return _caption(figure, chosen, ended)


def _seeds(chosen: pd.DataFrame) -> str:
    return f"{chosen['seed'].nunique()} seeds" if "seed" in chosen else "runs"


def draw_references(ax, references: list[tuple[str, float]]) -> None:
    """``(label, value)`` references (:func:`sdyn.analysis.rows.reference_values`) as grey
    horizontal lines, one line style each, labelled with their value; a value a log axis
    cannot show (0, the exact score's error) is only named in the legend."""
    for j, (label, value) in enumerate(references):
        style = REFERENCE_STYLES[j % len(REFERENCE_STYLES)]
        if value > 0:
            ax.axhline(value, color="0.3", linestyle=style, linewidth=0.8,
                       label=f"{label}: {value:.3g}")  # fmt: skip
        else:
            ax.plot([], [], ls="none", label=f"{label}: {value:g} (off the log axis)")


def _caption(figure: Figure, chosen: pd.DataFrame, ended: bool) -> str:
    """The figure's caption: title, what the lines (and, if ``ended``, the marks) are, the
    settings, the note."""
    parts = [f"**{figure.title}.** Lines: median over {_seeds(chosen)}; shaded: their range"]
    if figure.at_middle:
        middle = _label(chosen[figure.at_middle].iloc[0])
        parts[-1] += f"; at {figure.at_middle.split('.')[-1]}={middle}"
    if ended:
        floors = sorted({f"{p.relative_floor:g}" for p in figure.panels if p.log})
        parts.append(
            "x: a line ends where half its runs are below float64 resolution (on a log axis, "
            f"below {' or '.join(floors)} times their first value) or have stopped"
        )
    settings = []
    for column in figure.settings:
        if column in chosen:
            values = sorted({_label(v) for v in chosen[column]})
            settings.append(f"{column.split('.')[-1]}={', '.join(values)}")
    if settings:
        parts.append("Settings: " + "; ".join(settings))
    if figure.note:
        parts.append(figure.note)
    return ". ".join(parts) + "."
