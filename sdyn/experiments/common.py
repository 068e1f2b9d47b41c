"""What every experiment module shares: the run description, the bundle result, step schedules.

Nothing here knows of Ray or MLflow; the engine and tracking consume these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # importing this module stays cheap: --help reads configs and claims only
    import pandas as pd
    import torch


@dataclass(frozen=True)
class Run:
    """One training run: the experiment's hyperparameters, its data set config and its seed."""

    experiment: Any  # the experiment's config dataclass, grid overrides applied
    data: Any  # the data config dataclass
    seed: int


@dataclass
class BundleResult:
    """What ``train(bundle)`` returns for a bundle of ``B`` runs.

    ``summaries[k]`` holds run k's scalar results (``status`` among them); ``curves`` is a long
    table with columns ``run`` (0..B-1), ``step`` and one column per recorded metric. ``tables``
    holds optional extra long tables by name (each with a ``run`` column, e.g. generated
    samples), recorded beside the curves.
    """

    summaries: list[dict[str, Any]]
    curves: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def require(ok: bool, message: str) -> None:
    """The range check of every config schema: ``ValueError(message)`` unless ``ok``."""
    if not ok:
        raise ValueError(message)


def require_sample_sizes(n: list[int], minimum: int = 2, noun: str = "sample size") -> None:
    """The ``grid.n`` check of every grid schema: at least one value, each ``>= minimum``.

    Raises:
        ValueError: naming the key as ``grid.n``.
    """
    require(len(n) > 0, f"grid.n is empty: give at least one {noun}")
    for value in n:
        require(value >= minimum, f"grid.n values must be >= {minimum}, got {value}")


def require_recording(cfg: Any) -> None:
    """Checks of the fields every trainer shares: ``record_points`` in [2, 200] and, where the
    schema has one, ``dtype`` in float32|float64.

    Raises:
        ValueError: naming the key as ``experiment.<key>``.
    """
    require(
        2 <= cfg.record_points <= 200,
        f"experiment.record_points must be in [2, 200], got {cfg.record_points}",
    )
    dtype = getattr(cfg, "dtype", "float64")
    require(
        dtype in ("float32", "float64"), f"experiment.dtype must be float32|float64, got {dtype}"
    )


def log_spaced_steps(steps: int, points: int) -> list[int]:
    """Distinct integer steps in ``[0, steps]``, log-spaced, always including 0 and ``steps``.

    Returns at most ``points`` values (fewer when the budget is short).
    """
    grid = np.round(np.geomspace(1, max(steps, 0) + 1, points)).astype(int) - 1
    return np.unique(grid).tolist()


def resolve_device(device: str | None = None) -> torch.device:
    """``device`` if given, else CUDA when a GPU is visible, else the CPU."""
    import torch

    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "null")


@dataclass(frozen=True)
class Assumption:
    """A setting a theorem assumes, checked on the runs a claim is fitted on.

    A run meets it when ``<column> <op> <value>`` holds: ``op`` is a comparison of
    :data:`OPS`; ``"in"`` takes a tuple of allowed values; ``"null"`` (``value`` ignored) means
    the parameter was left unset (null). A claim fitted on any run that does not meet one of its
    assumptions gets the verdict "outside assumptions", with ``statement`` and the values of
    ``show`` in the runs that miss it as the reason. ``when`` (conditions as
    :attr:`Claim.where`) limits the assumption to the runs that meet it, e.g. a figure's step
    sizes to the runs with that figure's decoder.
    """

    column: str
    op: str
    value: Any
    statement: str  # short: what the theorem assumes, e.g. "Thm 4.2 is about softmax networks"
    show: str | None = None  # the column whose values the reason quotes (default: ``column``)
    when: tuple[tuple, ...] = ()  # the runs it applies to (as Claim.where); () = every run

    def __post_init__(self) -> None:
        require(self.op in OPS, f"assumption op must be one of {OPS}, got {self.op!r}")


@dataclass(frozen=True)
class Describe:
    """Descriptive statistics reported beside a claim's verdict, without a verdict of their own.

    With ``axis``: the log-log slope of each of ``quantities`` against ``axis`` (a power-law fit
    over the claim's runs, at the middle value of ``at_middle`` if set), drawn and reported next
    to ``reference``, the slope the theory's bound has. Without ``axis``: the median and
    quartiles of each quantity over the claim's runs. ``where`` keeps only the runs that meet
    its conditions (as :attr:`Claim.where`), e.g. those whose quantity is measurable at all.
    """

    quantities: tuple[str, ...]
    axis: str | None = None
    reference: float | None = None
    at_middle: str | None = None
    where: tuple[tuple, ...] = ()


# The kinds of :class:`Claim`, and the kind of fit each is judged by (sdyn.analysis.fits).
CLAIM_KINDS = {
    "power_law": "power_law",
    "curve_power_law": "power_law",
    "threshold_power_law": "threshold_power_law",
    "bound": "exceedance",
    "curve_geometric_rate": "geometric_rate",
    "per_run_geometric_rate": "geometric_rate",
    "paired_ratio": "ratio",
    "geometric_mean": "ratio",
    "column_ratio": "ratio",
}


@dataclass(frozen=True)
class Claim:
    """One theorem statement to measure, as data the analysis turns into a fit and a verdict.

    Columns name the runs table that analysis loads from MLflow: params as ``experiment.<key>``,
    summary metrics by their name.

    Kinds:
        ``power_law``: fit ``quantity ~ axis^alpha`` over the runs, compare alpha with ``theory``.
        ``threshold_power_law``: per value of ``axis`` and per seed, the interval of
        ``threshold_axis`` values in which ``quantity <= level`` starts to hold for good
        (interval-censored: below the smallest or above the largest swept value it is
        left- or right-censored); then the interval-censored fit of ``threshold ~ axis^alpha``.
        ``bound``: ``quantity`` is, per run, the measured value over the bound the theorem
        gives for that run; the fitted value is the fraction of runs above their bound, whose
        interval is compared with ``theory`` (the theorem's failure probability delta).
        ``curve_power_law``: fit the curve ``quantity ~ step^alpha`` (a recorded curve metric)
        over the ``window`` (fractions of the last step), pooled over the selected runs.
        ``curve_geometric_rate``: fit ``quantity ~ c rate^step`` over an automatically chosen
        window (values <= ``floor`` excluded); the value is the contraction per step.
        ``paired_ratio``: for each value of ``by`` other than ``reference``, the geometric-mean
        ratio of ``quantity`` to that of the ``reference`` rows, paired on the column ``axis``
        (e.g. ``seed``: the same data and init under two optimisers); labelled ``id[value]``.
        ``per_run_geometric_rate``: the same fit on each run's curve alone (its own window);
        the value is the geometric mean of the runs' contractions per step.
        ``geometric_mean``: the geometric mean over the runs of ``quantity`` (a recorded curve,
        read at each of ``checkpoints``; times ``normalise``'s column ** power), e.g. the
        population loss over the optimal loss at step 0.
        ``column_ratio``: per run, ``quantity`` over the column ``reference`` of the same run
        (e.g. a learned model's error over a baseline's on the same draws); the value is the
        geometric mean of the ratios over the runs, with a bootstrap interval over them.

    Rates (``curve_*`` and ``per_run_geometric_rate``) are fitted only where they exist and
    judged only where they have settled (:mod:`sdyn.analysis.rates`): a decaying curve whose
    runs stop, or leave float64's resolution (``relative_floor`` times the first value), before
    its window, or a geometric rate's curve that does not fall by a factor 2 over it, is "not
    measured"; a rate whose two half-windows disagree towards the other verdict is
    "inconclusive".

    ``checkpoints`` (steps; ``geometric_mean``, and ``paired_ratio`` on a curve): the claim
    holds at each of them. The curve ``quantity`` is read at the last recorded step at or
    before each checkpoint; a value the run no longer resolves (its curve ended because the run
    stopped, or at or below ``relative_floor`` times the run's first recorded value: below
    float64 resolution) drops its run or pair at that checkpoint; a checkpoint left with too
    little evidence is dropped, and said so. Each checkpoint gets an interval at the
    Bonferroni level ``1 - 0.05 / len(checkpoints)``, so that together they hold with 95%:
    the claim is violated if one of them is, consistent if all are, inconclusive otherwise,
    and reports the interval that decides (see :func:`sdyn.analysis.claims.evaluate`).

    ``where`` keeps the rows that satisfy every condition: ``(column, value)`` (equal, or a
    member when ``value`` is a tuple) or ``(column, op, value)`` with ``op`` as in
    :class:`Assumption`; ``at_middle`` / ``at_largest`` then keep the rows at the middle /
    largest value of that column. With ``by`` set, the claim is fitted once per value of that
    column (side by side, e.g. one result per optimiser), each labelled ``id[value]``.
    ``references`` are drawn on the claim's plot as horizontal lines: ``(column, label)`` at the
    median of that column over the claim's runs (a baseline's value), or ``(number, label)``
    at that constant (a value off a log axis, such as 0, is named in the legend). ``tolerance``
    widens the verdict's bound (see :func:`sdyn.analysis.verdict.verdict`); ``theory_column``
    takes the theory's value from that (single-valued) column of the runs instead of
    ``theory``; ``grids`` names the grids whose sweeps the claim applies to (empty: every
    grid); ``assumptions`` the settings the theorem covers (checked on the widest run of each
    axis value and seed for threshold claims, where the theorem's lambda is read, and on every
    run otherwise); ``describe`` what is reported beside the verdict.
    """

    id: str
    statement: str
    source: str  # paper and theorem
    kind: str
    quantity: str
    axis: str
    theory: float
    direction: str  # "<=": theory bounds the value from above; ">=": from below; "==": exact
    threshold_axis: str | None = None
    level: float = 1.0
    where: tuple[tuple, ...] = ()  # (column, value) or (column, op, value)
    at_middle: str | None = None  # keep only rows at the middle value of this column
    at_largest: str | None = None  # keep only rows at the largest value of this column
    by: str | None = None  # one result per value of this column
    # threshold_power_law: multiply each threshold by (column at the largest threshold_axis
    # value of its group and seed) ** power, e.g. ("lambda_min", 2.0) for m* lambda^2
    # geometric_mean: multiply each value by (column of its run) ** power, e.g. ("l_irr", -1.0)
    normalise: tuple[str, float] | None = None
    window: tuple[float, float] = (0.0, 1.0)  # curve_power_law: fraction of the last step
    floor: float | None = None  # *geometric_rate: values at or below are excluded
    # paired_ratio: the value of `by` the others are compared with; column_ratio: the column
    reference: Any = None
    matched: tuple[str, ...] = ()  # paired_ratio: columns a pair's two runs must agree on
    checkpoints: tuple[int, ...] = ()  # steps at which a curve quantity is compared
    relative_floor: float | None = None  # checkpoints, rates: resolution, times the first value
    tolerance: float = 0.0  # slack of the verdict, in the units of `theory`
    theory_column: str | None = None
    grids: tuple[str, ...] = ()  # grids whose sweeps the claim applies to; () = all
    assumptions: tuple[Assumption, ...] = ()
    describe: tuple[Describe, ...] = ()
    references: tuple[tuple[Any, str], ...] = ()
    quantity_label: str = ""
    axis_label: str = ""
    note: str = ""


@dataclass(frozen=True)
class Panel:
    """One panel of a :class:`Figure`: the recorded curve ``metric`` against the step.

    ``log``: a log y axis, on which a value at or below ``relative_floor`` times its run's
    first recorded value is below float64 resolution and not drawn (the line ends there, with
    a mark). ``references`` are horizontal lines, as :attr:`Claim.references`: ``(column,
    label)`` at that column's median over the runs drawn (e.g. the optimal loss L*), or
    ``(number, label)`` at that constant.
    """

    metric: str
    label: str  # the y axis label
    log: bool = True
    relative_floor: float = 1e-16
    references: tuple[tuple[Any, str], ...] = ()


@dataclass(frozen=True)
class Figure:
    """A paper's figure, as the report draws it from the recorded curves (file ``name``).

    One panel per :class:`Panel` against the step, a line per value of ``line_by`` in
    ``lines`` (``(value, label)`` pairs, in legend order; empty: every value, labelled
    ``name=value``): the median over the line's runs (its seeds), their range shaded. Runs
    are those meeting ``where`` (as :attr:`Claim.where`), at the middle value of
    ``at_middle``. A run whose curve ends (it stopped: float64 saturated) counts as below the
    floor from there. The caption states the values of ``settings`` (the step rules, say) in
    the runs drawn, and ``note`` (what differs from the paper's figure, and why).
    """

    name: str
    title: str
    panels: tuple[Panel, ...]
    line_by: str
    lines: tuple[tuple[Any, str], ...] = ()
    where: tuple[tuple, ...] = ()
    at_middle: str | None = None
    settings: tuple[str, ...] = ()
    note: str = ""
