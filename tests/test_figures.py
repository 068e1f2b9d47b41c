"""The papers' figures as the report draws them: lines end at float64's resolution, marked;
log ticks in plain text; the same files whether a helper process draws them or the caller."""

import os
import subprocess
import sys
import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.lines import Line2D

from sdyn.analysis import drawing
from sdyn.analysis.figures import (
    COLUMN_WIDTH,
    STYLE,
    PlainLogFormatter,
    figure_lines,
    fit_legend,
    log_ticks,
    plot_figure,
)
from sdyn.api import Figure, Panel

STEPS = np.unique(np.round(np.geomspace(1, 10001, 60)).astype(int) - 1)


def _sweep():
    """Three rules, three seeds each: ``fast`` decays as 10^(-t/30) down to 1e-290 (never
    NaN, as a stable formula keeps it), ``stops`` as 1/(1+t) until its run stops at step 300
    (NaN after), ``slow`` as 1/(1+t) throughout."""
    runs, curves = [], []
    for rule in ("fast", "stops", "slow"):
        for seed in range(3):
            run = f"{rule}-{seed}"
            runs.append({"config_hash": run, "seed": seed, "experiment.optimizer": rule,
                         "experiment.cap": 10.0, "loss_star": 0.0})  # fmt: skip
            scale = 1 + 0.1 * seed
            if rule == "fast":
                values = scale * np.maximum(10.0 ** (-STEPS / 30), 1e-290)
            else:
                values = scale / (1.0 + STEPS)
            if rule == "stops":
                values = np.where(STEPS > 300, np.nan, values)
            curves.append(pd.DataFrame({"config_hash": run, "step": STEPS, "loss": values}))
    return pd.DataFrame(runs), pd.concat(curves, ignore_index=True)


FIGURE = Figure(
    name="fig",
    title="Fig. X",
    panels=(Panel("loss", "train loss", references=(("loss_star", "L*"),)),),
    line_by="experiment.optimizer",
    lines=(("fast", "fast"), ("stops", "stops"), ("slow", "slow")),
    settings=("experiment.cap",),
)


def test_a_saturated_run_is_marked_not_plotted_to_1e_290(tmp_path):
    runs, curves = _sweep()
    (lines,) = figure_lines(FIGURE, runs, curves).values()
    fast, stops, slow = lines
    # fast: drawn down to 1e-16 of its start, not to 1e-290, and marked where it ends.
    assert fast.ended and fast.curve["median"].min() >= 1e-16
    assert fast.curve.index[-1] < 16 * 30 < STEPS[-1]
    # stops: the line ends (marked) where its runs stopped, not flat at its last value.
    assert stops.ended and stops.curve.index[-1] <= 300
    # slow: never below the floor, drawn to the last step, not marked.
    assert not slow.ended and slow.curve.index[-1] == STEPS[-1]
    assert (slow.curve["low"] <= slow.curve["median"]).all()
    assert (slow.curve["median"] <= slow.curve["high"]).all()
    caption = plot_figure(FIGURE, runs, curves, tmp_path / "fig.png")
    assert {p.name for p in tmp_path.iterdir()} == {"fig.png", "fig.svg"}  # the default formats
    # Drawn again, with a PDF: equal inputs give equal bytes (no dates, fixed SVG ids).
    before = {kind: (tmp_path / f"fig.{kind}").read_bytes() for kind in ("png", "svg")}
    plot_figure(FIGURE, runs, curves, tmp_path / "fig.png", ("png", "svg", "pdf"))
    assert all((tmp_path / f"fig.{kind}").read_bytes() == before[kind] for kind in before)
    pdf = (tmp_path / "fig.pdf").read_bytes()
    plot_figure(FIGURE, runs, curves, tmp_path / "fig.png", ("png", "svg", "pdf"))
    assert (tmp_path / "fig.pdf").read_bytes() == pdf
    assert caption.startswith("**Fig. X.**") and "cap=10" in caption and "3 seeds" in caption


def test_a_run_that_stopped_holds_its_last_value_in_the_band():
    """Runs that stop at a tolerance at different steps (the NTK's, at eps): until half have
    stopped, one that stopped counts at its last value. It counted at the floor, 1e-16 of its
    start, so the band fell to float64's resolution where no run went below 1/401."""
    runs, curves = _sweep()
    stopping, steps = {"stops-0": 100, "stops-1": 200, "stops-2": 400}, STEPS
    for run, last in stopping.items():
        mine = curves["config_hash"] == run
        curves.loc[mine, "loss"] = np.where(steps > last, np.nan, 1 / (1.0 + steps))
    stops = figure_lines(FIGURE, runs, curves)["loss"][1]
    assert len(stops.curve.loc[100:200]) > 1 and stops.ended and stops.curve.index[-1] <= 200
    assert (stops.curve["low"] >= 1 / 401).all()  # no run went lower


def test_a_figure_without_curves_draws_nothing(tmp_path):
    runs, curves = _sweep()
    assert plot_figure(FIGURE, runs, curves.iloc[:0], tmp_path / "fig.png") == ""
    assert not (tmp_path / "fig.png").exists()


def test_a_figure_none_of_whose_lines_the_sweep_ran_draws_nothing(tmp_path):
    # An attention sweep of Alg. 1 alone has no run of Fig. 2's rules: the figure's panels
    # have no line (this raised "cannot convert float NaN to integer" in the report).
    runs, curves = _sweep()
    others = Figure(
        name="other", title="Fig. Y", panels=FIGURE.panels, line_by="experiment.optimizer",
        lines=(("sgd", "SGD"), ("adam", "Adam")),
    )  # fmt: skip
    assert figure_lines(others, runs, curves) == {}
    assert plot_figure(others, runs, curves, tmp_path / "other.png") == ""
    assert not (tmp_path / "other.png").exists()


def test_a_legend_fits_the_figure_in_the_most_columns():
    # Three columns of long entries ran off a one-column figure's edges (attention Fig. 1,
    # score curves): each legend now lies within the figure, long entries wrapped.
    cases = (
        ["a", "b", "c", "d"],
        ["Algorithm 1 (spectral init)", "range (5 seeds)", "optimal L*: 0.012", "SGD"],
        ["single Gaussian (p0's mean, covariance): 0.0351", "n=2896", "n=4096", "range"],
    )
    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=(COLUMN_WIDTH, 2.8), layout="constrained")
        fig.subplots().plot([0, 1])
        renderer = fig.canvas.get_renderer()
        drawn = []
        for labels in cases:
            handles = [Line2D([], [], label=label) for label in labels]
            legend = fit_legend(fig, handles, labels, "outside upper center")
            assert legend.get_window_extent(renderer).width <= fig.bbox.width
            drawn.append((legend._ncols, [t.get_text() for t in legend.get_texts()]))
            legend.remove()
    plt.close(fig)
    assert drawn[0] == (3, cases[0])  # short entries: three columns, as they are
    assert drawn[2][0] >= 2 and "\n" in drawn[2][1][0]  # the long entry wrapped, not alone


def test_log_ticks_are_labelled_as_matplotlib_labels_them_in_plain_text():
    """PlainLogFormatter: the labels LogFormatterSciNotation gives, as text without mathtext;
    log_ticks puts it on every log axis that spans enough decades."""
    plain = PlainLogFormatter(labelOnlyBase=False)
    values = [1e-3, 0.02, 0.03, 1.0, 10.0, 3e5, 1e-15]
    labels = ["10⁻³", "2×10⁻²", "3×10⁻²", "10⁰", "10¹", "3×10⁵", "10⁻¹⁵"]
    assert [plain(x) for x in values] == labels
    fig, wide = plt.subplots()
    wide.loglog([1e-3, 1e2], [1, 2])
    log_ticks(fig)
    fig.canvas.draw()
    ticks = {t.get_text() for t in wide.get_xticklabels() + wide.get_yticklabels()}
    minor = [t.get_text() for t in wide.get_xticklabels(minor=True) if t.get_text()]
    plt.close(fig)
    assert "10⁰" in ticks and "10²" in ticks and any(t.startswith("10⁻") for t in ticks)
    assert not any("$" in t for t in ticks) and not minor


@pytest.mark.parametrize(
    "values",
    [(1.000097, 1.000143), (0.9, 1.1), (3.0, 4.5), (0.02, 0.05), (2e-5, 6e-5), (8.0, 128.0)],
)
def test_a_narrow_log_axis_is_ticked_as_a_linear_one(values):
    """A log axis spanning under 1.5 decades: distinct, readable tick labels (no 10×10⁻¹, no
    two labels run together, enough digits to tell [1.000097, 1.000143] apart; 10, 20, 50 and
    100 on 8-128)."""
    fig, (ax, bx) = plt.subplots(1, 2)
    ax.semilogy([0, 1], values)
    bx.semilogx(values, [1, 2])
    log_ticks(fig)
    fig.canvas.draw()
    for labels in (ax.get_yticklabels(), bx.get_xticklabels()):
        shown = [t.get_text() for t in labels if t.get_text()]
        assert len(shown) >= 2 and len(set(shown)) == len(shown)
        assert not any("×" in t or "$" in t for t in shown)
    assert not [t.get_text() for t in ax.get_yticklabels(minor=True) if t.get_text()]
    if values == (8.0, 128.0):
        assert {"10", "20", "50", "100"} <= {t.get_text() for t in bx.get_xticklabels()}
    plt.close(fig)


def _raise(message: str) -> None:
    raise ValueError(message)


def test_figures_a_helper_draws_are_those_drawn_here(tmp_path, monkeypatch):
    """drawing.draw_all: the same files, byte for byte, and the results in the jobs' order,
    whether a helper process draws some of them or this process draws them all; a job's error
    reaches the caller."""
    runs, curves = _sweep()
    some = runs[runs["experiment.optimizer"] != "fast"]
    results, drawer = {}, {}
    for helpers in (0, 1):
        monkeypatch.setattr(drawing, "_helpers", helpers)
        out = tmp_path / str(helpers)
        out.mkdir()
        jobs = [(os.getpid, ())]  # the first job: a helper's, where there is one
        jobs += [
            (plot_figure, (FIGURE, r, curves, out / f"{k}.png")) for k, r in enumerate((runs, some))
        ]
        jobs.append((plot_figure, (FIGURE, runs, curves.iloc[:0], out / "none.png")))
        drawer[helpers], *results[helpers] = drawing.draw_all(jobs)
    assert drawer[0] == os.getpid() != drawer[1]
    assert results[0] == results[1] and results[0][2] == "" and "3 seeds" in results[0][0]
    files = sorted(p.name for p in (tmp_path / "0").iterdir())
    assert files == ["0.png", "0.svg", "1.png", "1.svg"]
    assert files == sorted(p.name for p in (tmp_path / "1").iterdir())
    for name in files:
        assert (tmp_path / "0" / name).read_bytes() == (tmp_path / "1" / name).read_bytes()
    with pytest.raises(ValueError, match="drawn badly"):
        drawing.draw_all([(_raise, ("drawn badly",)), (time.sleep, (0.5,))])


def test_idle_cores_are_measured_between_two_readings():
    """drawing.idle_cores: between 0 and this process's cores; 0 without a first reading."""
    since = drawing.cpu_times()
    assert since is not None  # Linux: /proc/stat
    time.sleep(0.2)
    usable = len(os.sched_getaffinity(0))
    assert 0.0 <= drawing.idle_cores(since) <= usable
    assert drawing.idle_cores(None) == 0.0


def test_the_drawing_helpers_leave_every_stop_signal_to_the_driver():
    """The forkserver and the helpers it forks ignore SIGINT, SIGTERM and SIGHUP: a signal to
    the whole process group during the report is the driver's to defer until the report is
    whole. The forkserver ignored only SIGINT, so a group SIGTERM or SIGHUP killed it."""
    script = textwrap.dedent(
        """
        import signal
        from multiprocessing import forkserver
        from sdyn.analysis import drawing
        drawing.idle_cores = lambda since: 1.0
        drawing.start(None)
        pid = forkserver._forkserver._forkserver_pid
        status = open(f"/proc/{pid}/status").read()
        ignored = int(status.split("SigIgn:")[1].split()[0], 16)
        print(all(ignored >> (s - 1) & 1 for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["True"], out.stderr
