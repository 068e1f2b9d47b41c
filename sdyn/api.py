"""The public experiment contract: what a theorem's experiment gives sdyn, and what sdyn gives back.

An experiment is one :class:`Experiment` object, found by sdyn through the Python entry-point
group :data:`ENTRY_POINT_GROUP` (``[project.entry-points."sdyn.experiments"]`` in a
pyproject: ``NAME = "my_pkg.my_module:EXPERIMENT"``), or by naming its module on the command
line (``experiment=my_pkg.my_module``, a module with a module-level ``EXPERIMENT``) so that
trying an idea needs no packaging. sdyn's own experiments register through the same group.

What an experiment provides, and what sdyn does with it:

* ``config``: a dataclass of the run's hyperparameters (Hydra's ``experiment=NAME`` group,
  every field an override ``experiment.FIELD=...``; its ``__post_init__`` raises
  ``ValueError`` naming the key for an out-of-range value; a comment on a field's line is its
  ``--help`` note). Its ``name`` field is set to the experiment's name.
* ``grids``: grid name -> dataclass with ``name``, ``seeds`` and ``points()`` (the list of
  experiment overrides of every grid point, seeds excluded): ``+grid=NAME``.
* ``train(runs, device) -> BundleResult``: trains a bundle of :class:`Run` at once (batched
  along a leading run axis ``B = len(runs)``) on ``device`` (``"cpu"``, ``"cuda"`` or None:
  CUDA when visible). Each run's summary holds ``status`` and the scalars the claims read;
  curves are a long table (``run``, ``step``, one column per metric).
* ``claims``: the theorem's statements, each an instance of a claim kind (a subclass of
  :class:`Claim`: sdyn's nine in :mod:`sdyn.analysis.kinds`, or the plugin's own), which sdyn
  measures and judges by the kind's rules.

Optional, with defaults that work: ``data`` (data set name -> dataclass; default: none),
``validate(run)`` (raises ``ValueError`` for a run that cannot train, e.g. a data set too
small; checked before anything is written), ``shape_key`` / ``pack_key`` (runs with equal
keys share a bundle; default: the resolved config without its seed), ``footprint(run)``
(bytes of the largest per-run tensor, which sizes bundles and ``--plan``'s cost model; default
1: every run alike), ``gpu_footprint`` (the footprint from which
``cluster.device=auto`` trains on a GPU; default None: always on the CPU), ``step_cost(runs)``
(FLOP and bytes moved by one iteration of a bundle's step, for ``--plan``'s GPU estimate;
default None: no GPU estimate), ``full_budget(run)`` (for an experiment whose runs stop early:
the run made to train its whole budget, which ``--plan``'s probe times to learn the cost of a
step; default None: runs always train their budget), ``steps_forecast(runs)`` (per run, the
step at which it is forecast to stop early, which ``--plan`` prices it at; default None: every
run at its whole budget), ``figures``
(a paper's figures, drawn from the curves), ``scatter_plot``, ``conf_dir`` (a folder of the
plugin's own Hydra YAML, added to Hydra's search path), ``sweeps`` (named sweeps the plugin
ships: name -> overrides, run by ``--sweep NAME``; :mod:`sdyn.named_sweeps`), ``references``
(the papers) and
``version`` (the experiment's code, part of every run's key: a run recorded under another
version is trained again, not reused; default: the version of the distribution that installs
the entry point, or for a module named by path a hash of that module's source file). An
editable install (``pip install -e``) keeps its version while its code changes, and a module's
hash does not see the modules it imports: bump the distribution's version or set ``version``
when ``train`` changes what it returns, or run the sweep again with ``sweep.retrain=true``.

``--plan``'s probe reads two fields of a run's config where it has them: ``steps`` (the GD
budget; without it a run is timed whole, as one step) and ``record_points`` (how many times a
run records; the probe sets it to 2 to time the steps alone).

Nothing here imports Ray or MLflow: an experiment's science runs anywhere torch does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import numbers
import re
import sys
import traceback
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sdyn.experiments.common import (
    log_spaced_steps,
    require,
    require_recording,
    require_sample_sizes,
    resolve_device,
)
from sdyn.search import SearchGrid

if TYPE_CHECKING:  # importing the contract stays cheap: --help reads configs and claims only
    import pandas as pd

# What the analysis hands a kind and takes back; the contract names them, the analysis
# defines them (a fit: sdyn.analysis.fits.Fit; a slack: sdyn.analysis.verdict.Slack; a
# result: sdyn.analysis.claims.ClaimResult), so that the contract imports no analysis.
Fit = Slack = ClaimResult = Any

__all__ = [
    "DIRECTIONS",
    "ENTRY_POINT_GROUP",
    "KINDS",
    "MEASURED",
    "NAME",
    "OPS",
    "STATUSES",
    "Assumption",
    "BundleResult",
    "Claim",
    "Describe",
    "Experiment",
    "Figure",
    "NoData",
    "Panel",
    "PaperFigure",
    "PluginError",
    "Run",
    "SearchGrid",
    "blamed",
    "lazy_names",
    "log_spaced_steps",
    "require",
    "require_recording",
    "require_sample_sizes",
    "resolve_device",
]

ENTRY_POINT_GROUP = "sdyn.experiments"
# A run's ``status``, as ``train`` reports it in each summary: the first three are measurements
# the claims read (:data:`MEASURED`); "failed" has no measurement (sdyn also sets it for a run
# whose bundle raised). ``Experiment.check_result`` refuses any other string.
STATUSES = ("converged", "budget_exhausted", "diverged", "failed")
MEASURED = STATUSES[:3]
# Comparisons of Assumption.op and of a (column, op, value) condition in Claim.where.
OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "null")
# What a claim's theory says of its value: an upper bound, a lower bound, a prediction.
DIRECTIONS = ("<=", ">=", "==")


class PluginError(ValueError):
    """A broken experiment plugin: the one-line message names the plugin and what is wrong."""


@dataclass(frozen=True)
class Run:
    """One training run: the experiment's hyperparameters, its data set config and its seed.

    The runs of one bundle share their ``shape_key`` (or ``pack_key``) only: any other field of
    ``experiment`` (a step size, an optimiser) may differ from run to run, so ``train`` reads
    such fields per run (``[r.experiment.lr for r in runs]``), never from ``runs[0]``.
    """

    experiment: Any  # the experiment's config dataclass, grid overrides applied
    data: Any  # the data config dataclass
    seed: int


@dataclass
class BundleResult:
    """What ``train(bundle)`` returns for a bundle of ``B`` runs.

    ``summaries[k]`` holds run k's scalar results (real numbers; others are not recorded),
    ``status`` among them (one of :data:`STATUSES`); ``curves`` is a long table with columns
    ``run`` (0..B-1), ``step`` and one column per recorded metric, or None for none.
    ``tables`` holds optional extra long tables by name (each with a ``run`` column, e.g.
    generated samples), recorded beside the curves.
    """

    summaries: list[dict[str, Any]]
    curves: pd.DataFrame | None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


def _real(value: Any) -> bool:
    """Whether ``value`` is a real number (numpy's too); a bool is not one."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_conditions(where: tuple[tuple, ...], owner: str) -> None:
    """A ``where`` (see :class:`Claim`) is ``(column, value)`` or ``(column, op, value)``
    conditions with ``op`` in :data:`OPS`.

    Raises:
        ValueError: naming ``owner`` and the malformed condition.
    """
    for condition in where:
        if not isinstance(condition, tuple) or len(condition) not in (2, 3):
            raise ValueError(
                f"{owner}: a condition is (column, value) or (column, op, value), got {condition!r}"
            )
        if len(condition) == 3 and condition[1] not in OPS:
            raise ValueError(f"{owner}: condition op must be one of {OPS}, got {condition[1]!r}")


def _reference_columns(references: tuple[tuple, ...], owner: str) -> set[str]:
    """The columns of ``references`` (``(column, label)`` or ``(number, label)`` pairs, see
    :class:`Claim`): each is drawn at its median, so it must hold numbers.

    Raises:
        ValueError: naming ``owner`` and the malformed reference.
    """
    columns = set()
    for reference in references:
        ok = isinstance(reference, tuple) and len(reference) == 2 and isinstance(reference[1], str)
        if not ok or not (isinstance(reference[0], str) or _real(reference[0])):
            raise ValueError(
                f"{owner}: a reference is (column, label) or (number, label), got {reference!r}"
            )
        if isinstance(reference[0], str):
            columns.add(reference[0])
    return columns


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

    Raises:
        ValueError: an ``op`` not in :data:`OPS`, or a malformed ``when``.
    """

    column: str
    op: str
    value: Any
    statement: str  # short: what the theorem assumes, e.g. "Thm 4.2 is about softmax networks"
    show: str | None = None  # the column whose values the reason quotes (default: ``column``)
    when: tuple[tuple, ...] = ()  # the runs it applies to (as Claim.where); () = every run

    def __post_init__(self) -> None:
        require(self.op in OPS, f"assumption op must be one of {OPS}, got {self.op!r}")
        _check_conditions(self.when, f"assumption {self.statement!r}")


@dataclass(frozen=True)
class PaperFigure:
    """A paper's figure whose empirical statements claims restate, with the setting it shows.

    A figure's statement ("SGD starts three orders of magnitude above L*") holds in the
    figure's setting, not in general: a claim with ``figure`` set is judged only on runs that
    meet every assumption of ``setting`` (its sample size, batch, noise level, step sizes),
    and is "outside assumptions" elsewhere.

    Raises:
        ValueError: an empty ``setting``.
    """

    name: str  # e.g. "Fig. 1"
    setting: tuple[Assumption, ...]

    def __post_init__(self) -> None:
        require(bool(self.setting), f"{self.name}: give the figure's setting (assumptions)")


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


@dataclass(frozen=True)
class Panel:
    """One panel of a :class:`Figure`: the recorded curve ``metric`` against the step.

    ``log``: a log y axis, on which a value at or below ``relative_floor`` times its run's
    first recorded value is below float64 resolution and not drawn (the line ends there, with
    a mark). ``references`` are horizontal lines, as :attr:`Claim.references`: ``(column,
    label)`` at that column's median over the runs drawn (e.g. the optimal loss L*), or
    ``(number, label)`` at that constant.

    Raises:
        ValueError: a reference that is neither pair.
    """

    metric: str
    label: str  # the y axis label
    log: bool = True
    relative_floor: float = 1e-16
    references: tuple[tuple[Any, str], ...] = ()

    def __post_init__(self) -> None:
        self.columns()

    def columns(self) -> set[str]:
        """The metric and the references' columns."""
        return {self.metric} | _reference_columns(self.references, f"panel {self.metric!r}")


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

    def columns(self) -> set[str]:
        """The columns the figure selects and splits its runs by, its panels' metrics and
        their references' columns (checked as :meth:`Claim.columns`)."""
        named = {self.line_by, self.at_middle, *self.settings, *(c[0] for c in self.where)}
        for panel in self.panels:
            named |= panel.columns()
        return named - {None}


# The columns of a runs table that hold a run's config, not its results.
CONFIG_PREFIXES = ("experiment.", "data.")

# A claim's id, a figure's name, a scatter plot's table: each names a file of the report and
# an MLflow key (``sdyn.verdict.<id>``), so letters, digits, _ - and . alone.
NAME = re.compile(r"[\w\-.]+")

# Every claim kind by its name (``Claim.kind``): sdyn's own (:mod:`sdyn.analysis.kinds`) and
# any a plugin defines, registered when its class is defined.
KINDS: dict[str, type[Claim]] = {}


@dataclass(frozen=True, kw_only=True)
class Claim:
    """One theorem statement to measure: the base of every claim kind.

    A claim is an instance of a *kind*, a subclass that registers itself in :data:`KINDS`
    under its class attribute ``kind`` and owns everything that depends on it: the fields it
    needs beyond these (validated at construction, :meth:`check`), which values resolve, the
    fit, the judgment with its slack, the least evidence that could ever decide it
    (:meth:`limits`), and its plot (:meth:`draw`). This class is the face every kind shows;
    sdyn's nine kinds are in :mod:`sdyn.analysis.kinds`, on
    :class:`sdyn.analysis.kinds.KindBase`, which gives the standard selection, judgment, slack
    and interval naming. A plugin defines its own kind by subclassing ``KindBase`` (or one of
    sdyn's kinds) in its own module: no edit of sdyn.

    The fields every kind shares. Columns name the runs table that analysis loads from
    MLflow: params as ``experiment.<key>``, summary metrics by their name.

    * ``quantity`` (measured), ``axis`` (against what), ``theory`` and ``direction``: what the
      theorem says of the fitted value (``"<="``: an upper bound, ``">="``: a lower bound,
      ``"=="``: a prediction, accepted within ``tolerance``, in the units of ``theory``);
      ``theory_column`` takes the theory's value from that (single-valued) column of the runs.
    * ``where`` keeps the rows that satisfy every condition: ``(column, value)`` (equal, or a
      member when ``value`` is a tuple) or ``(column, op, value)`` with ``op`` in :data:`OPS`;
      ``at_middle`` / ``at_largest`` then keep the rows at the middle / largest value of that
      column. With ``by``, the claim is judged once per value of that column (e.g. one result
      per optimiser), each labelled ``id[value]``.
    * ``grids``: the grids whose sweeps measure the claim (empty: every grid).
    * ``assumptions``: the settings the theorem covers; ``figure``: the paper figure whose
      empirical statement the claim restates, and that figure's setting. A claim fitted on
      runs outside either is "outside assumptions".
    * ``derived_from``: the id of a claim of the same experiment whose evidence this one
      restates (a quantity computed from the other's, e.g. ``1 - cos = d^2 / 2``): it is
      reported beside that claim with the verdict "derived", never as a second verdict.
    * ``describe``, ``references``: what is reported and drawn beside the verdict (a
      baseline's value as ``(column, label)``, a constant as ``(number, label)``).
    * ``quantity_label``, ``axis_label``, ``note``: the plot's labels and the report's note.

    Raises:
        ValueError: at construction, for a field out of range (a direction not in
            :data:`DIRECTIONS`, a negative tolerance, a malformed ``where``) or a field the
            kind needs and lacks (:meth:`check`), naming the claim.
    """

    kind: ClassVar[str] = ""  # the registry name; each kind sets its own
    # What the fitted value is, for tables and docs (e.g. "exponent", "contraction per step").
    value_name: ClassVar[str] = "value"
    # The least evidence from which a verdict other than "inconclusive" can come, in words.
    least_evidence: ClassVar[str] = ""

    id: str
    statement: str
    source: str  # paper and theorem
    quantity: str
    axis: str
    theory: float
    direction: str
    where: tuple[tuple, ...] = ()
    at_middle: str | None = None
    at_largest: str | None = None
    by: str | None = None
    tolerance: float = 0.0
    theory_column: str | None = None
    grids: tuple[str, ...] = ()
    assumptions: tuple[Assumption, ...] = ()
    figure: PaperFigure | None = None
    derived_from: str = ""
    describe: tuple[Describe, ...] = ()
    references: tuple[tuple[Any, str], ...] = ()
    quantity_label: str = ""
    axis_label: str = ""
    note: str = ""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("kind")
        if not name:
            return
        known = KINDS.get(name)
        where = f"{cls.__module__}.{cls.__qualname__}"
        if known is not None and f"{known.__module__}.{known.__qualname__}" != where:
            raise PluginError(
                f"claim kind {name!r} is defined twice: by "
                f"{known.__module__}.{known.__qualname__} and by {where}: give one another "
                "kind name (the class attribute kind)"
            )
        KINDS[name] = cls

    def __post_init__(self) -> None:
        owner = f"claim {self.id!r} ({self.kind or type(self).__name__})"
        require(bool(self.id), f"{owner}: a claim needs an id")
        require(
            isinstance(self.id, str) and bool(NAME.fullmatch(self.id)),
            f"{owner}: an id names the claim's plot and MLflow tag: give letters, digits, _ - .",
        )
        require(
            self.direction in DIRECTIONS,
            f"{owner}: direction must be one of {DIRECTIONS}, got {self.direction!r}",
        )
        require(
            _real(self.theory),
            f"{owner}: theory must be a number, got {self.theory!r}",
        )
        require(self.theory == self.theory, f"{owner}: theory must be a number, got NaN")
        require(
            0 <= self.tolerance < float("inf"),
            f"{owner}: tolerance must be finite and >= 0, got {self.tolerance}",
        )
        require(
            isinstance(self.grids, tuple) and all(isinstance(g, str) for g in self.grids),
            f"{owner}: grids must be a tuple of grid names, got {self.grids!r}",
        )
        _check_conditions(self.where, owner)
        for spec in self.describe:
            _check_conditions(spec.where, owner)
        _reference_columns(self.references, owner)
        self.check()

    def check(self) -> None:
        """The kind's own fields, checked at construction (override; call ``require``).

        Raises:
            ValueError: one line naming the claim and the field.
        """

    @property
    def label(self) -> str:
        """How the claim names itself in messages: ``claim 'id' (kind)``."""
        return f"claim {self.id!r} ({self.kind})"

    def assumed(self) -> tuple[Assumption, ...]:
        """Every setting the claim's runs must meet: its ``assumptions`` and its figure's."""
        return self.assumptions + (self.figure.setting if self.figure else ())

    # -- selection: which runs ---------------------------------------------------------------

    def select(self, runs: pd.DataFrame) -> pd.DataFrame:
        """The runs the claim is about (sdyn's kinds: those meeting every condition of
        ``where``, at the middle value of ``at_middle`` and the largest of ``at_largest``;
        :class:`sdyn.analysis.kinds.KindBase`)."""
        raise NotImplementedError(f"{self.label}: a claim kind implements select()")

    def split(self, rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]] | str:
        """The claim's rows as the parts judged apart: ``[(id, rows)]``, or with ``by`` one part
        per value, labelled ``id[value]``; or, when nothing can be judged, the reason."""
        if self.by is None:
            return [(self.id, rows)]
        return [(f"{self.id}[{value}]", part) for value, part in rows.groupby(self.by, sort=True)]

    def setting_rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        """The rows on which the assumptions are checked (default: every row)."""
        return rows

    def labels(self) -> tuple[str, str]:
        """The plot's x and y labels: ``axis_label`` and ``quantity_label`` (or the column
        names), unless the kind draws something else."""
        return self.axis_label or self.axis, self.quantity_label or self.quantity

    def columns(self) -> set[str]:
        """The columns of the runs table the claim reads: ``quantity``, ``axis``, ``by``,
        ``at_middle``, ``at_largest``, ``theory_column``, those of ``where``, of the settings it
        assumes, of its ``describe`` (their axis and selection) and of its ``references`` (a
        kind whose fields name more adds them). An :class:`Experiment` checks the config's
        (``experiment.<key>``) and data set's (``data.<key>``) at construction, the rest
        against its first bundle's result (:meth:`Experiment.check_result`)."""
        named = {self.quantity, self.axis, self.by, self.at_middle, self.at_largest}
        named |= {self.theory_column, *(condition[0] for condition in self.where)}
        for assumption in self.assumed():
            named |= {assumption.column, *(condition[0] for condition in assumption.when)}
        for spec in self.describe:
            named |= {spec.axis, spec.at_middle, *(condition[0] for condition in spec.where)}
        return named - {None} | _reference_columns(self.references, self.label)

    def own_columns(self) -> set[str]:
        """Columns the claim reads for its own points (left out of a title's scope)."""
        return {self.axis, self.by} - {None}

    # -- measurement: what a kind implements -------------------------------------------------

    def absence(self, rows: pd.DataFrame, curves: pd.DataFrame | None) -> str | None:
        """Why the sweep does not measure the claim on ``rows`` at all (its verdict is then
        "not measured"), or None. Default: ``quantity`` was not recorded by the runs."""
        if self.quantity not in rows or rows[self.quantity].isna().all():
            return f"{self.quantity} was not recorded by its runs"
        return None

    def limits(self, planned: pd.DataFrame) -> str | None:
        """Why the planned runs could never decide the claim, or None; read before training.

        Args:
            planned: one row per planned run: ``seed`` and the config columns
                (``experiment.<key>``, ``data.<key>``); no results.
        """
        return None

    def measure(
        self,
        rows: pd.DataFrame,
        curves: pd.DataFrame | None,
        *,
        theory: float,
        notes: list[str],
    ) -> tuple[pd.DataFrame, Fit]:
        """The points the claim is fitted on and the fit (a kind must implement it).

        ``theory`` is the value the verdict will use (a kind judged at several points, such as
        checkpoints, picks the deciding one here); ``notes`` collects what the report should say
        of the fit.

        Returns:
            ``(points, fit)``: ``points`` with columns ``x``, ``y``, ``seed`` and ``run`` (the
            run's ``config_hash``; what the plot draws and the title's scope reads) plus any the
            kind's plot uses; ``fit`` a :class:`sdyn.analysis.fits.Fit` whose value is NaN where
            no value resolves (the verdict is then "not measured", with ``fit.message``).
        """
        raise NotImplementedError(f"{self.label}: a claim kind implements measure()")

    def judge(
        self, fit: Fit, theory: float, points: pd.DataFrame, *, notes: list[str]
    ) -> tuple[str, str]:
        """The verdict and its reason for a fit with a value (sdyn's kinds: the evidence rule,
        an interval at float64 resolution read as exact, the interval against the theory;
        :class:`sdyn.analysis.kinds.KindBase`)."""
        raise NotImplementedError(f"{self.label}: a claim kind implements judge()")

    def evidence(self, fit: Fit) -> str | None:
        """Why ``fit`` rests on too little evidence for a verdict, or None (default: none)."""
        return None

    def slack(self, fit: Fit, theory: float) -> Slack | None:
        """The room the bound leaves, or None (default: none)."""
        return None

    def interval_name(self, fit: Fit) -> str:
        """What the fit's interval is, as the report names it (sdyn's kinds: "95% CI", unless it
        is a bracket or an exact value)."""
        raise NotImplementedError(f"{self.label}: a claim kind implements interval_name()")

    def draw(self, ax, results: list[tuple[str | None, ClaimResult]]) -> None:
        """Draw one or more sweeps' results of this claim on ``ax`` (a kind must implement it):
        its points and fit, labelled with what they are, and the theory's line; axes labels
        that say what is drawn."""
        raise NotImplementedError(f"{self.label}: a claim kind implements draw()")

    def details(self, result: ClaimResult) -> str:
        """Markdown the report adds below the claim's plot (default: none)."""
        return ""

    # -- the synthetic referee's hooks (:mod:`sdyn.analysis.referee`) -----------------------

    @classmethod
    def example(cls) -> tuple[Claim, float, float]:
        """A claim of this kind on synthetic columns, a true value its theory allows and one
        it does not: what :func:`sdyn.analysis.referee.check_kind` judges (a kind implements
        it to be held to the referee)."""
        raise NotImplementedError(f"{cls.__name__}: a claim kind implements example()")

    def synthetic(
        self, truth: float, *, seeds: int, levels: int, noise: float, rng
    ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
        """A sweep in which the claim's true value is ``truth``: ``(runs, curves)`` as
        :func:`sdyn.analysis.load.load_sweep` and ``load_curves`` give them (``config_hash``,
        ``seed``, ``status``, the claim's columns; curves None for a kind that reads none),
        with ``seeds`` runs at each of ``levels`` values of the swept axis, multiplicative
        log-normal ``noise`` (0: every run exact), drawn from ``rng``
        (a ``numpy.random.Generator``)."""
        raise NotImplementedError(f"{type(self).__name__}: a claim kind implements synthetic()")


@contextlib.contextmanager
def blamed(owner: str, code: Any, passed: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Run a plugin's ``code`` (a claim kind's class, an experiment's function): an exception
    it raises becomes one line, a :class:`PluginError` that starts with ``owner`` (e.g.
    ``claim 'id' (kind)``) and names the exception and the line of ``code``'s module that
    raised it (also in another process, from the traceback's text that comes back as the
    exception's cause), not a traceback. sdyn's own code is not blamed: its exception is sdyn's bug,
    traced in full.

    Raises:
        PluginError: from any exception but a PluginError or one of ``passed`` (those the
            code raises by contract, e.g. ``validate``'s ValueError for a run that cannot
            train), when ``code`` is defined outside sdyn.
    """
    try:
        yield
    except Exception as exc:
        module = getattr(code, "__module__", None) or ""  # a partial has none
        if isinstance(exc, (PluginError, *passed)) or module.startswith("sdyn."):
            raise
        try:
            source = inspect.getsourcefile(code)
        except TypeError:  # a callable object, a builtin: no line to name
            source = None
        frames = [
            (f.filename, f.lineno, f.name)
            for f in traceback.extract_tb(exc.__traceback__)
            if f.filename == source
        ]
        if not frames and exc.__cause__ is not None:  # raised in another process (the probe's):
            # its traceback comes back as the text of the cause, as concurrent.futures sends it.
            frames = [
                frame for frame in _TRACEBACK_LINE.findall(str(exc.__cause__)) if frame[0] == source
            ]
        at = f" at {frames[-1][0]}:{frames[-1][1]}, in {frames[-1][2]}" if frames else ""
        raise PluginError(f"{owner}: {type(exc).__name__}: {exc}{at}") from exc


# A frame in a traceback's text: 'File "path", line 12, in train'.
_TRACEBACK_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


@dataclass
class NoData:
    """``data=none``: an experiment that makes its own data from its config and seed."""

    name: str = "none"


def _config_key(run: Run) -> Hashable:
    """The default shape and pack key: a run's resolved config without its seed."""
    return repr((run.experiment, run.data))


@dataclass(frozen=True, repr=False)
class Experiment:
    """One experiment: a theorem's runs, how they train, and the claims they test.

    Raises:
        PluginError: at construction, for a missing or malformed required object: ``config``
            not a dataclass with a ``name`` field; no grids, or a grid without ``seeds`` or
            ``points``, or whose default points set a key the config lacks; ``train`` not
            callable; no claims, or an object in ``claims`` that is not an instance of a
            registered claim kind, two claims with one id, a ``derived_from`` naming no
            claim, a claim's ``grids`` naming a grid that is neither in ``grids`` nor a YAML
            grid of ``conf_dir``; a data set that is not a dataclass with a ``name`` field; a
            sweep of ``sweeps`` that is not a tuple of override strings.
    """

    name: str
    config: type
    grids: dict[str, type]
    train: Callable[[list[Run], str | None], BundleResult]
    claims: tuple[Claim, ...]
    data: dict[str, type] = field(default_factory=lambda: {"none": NoData})
    validate: Callable[[Run], Any] | None = None
    shape_key: Callable[[Run], Hashable] = _config_key
    pack_key: Callable[[Run], Hashable] | None = None
    footprint: Callable[[Run], int] = lambda run: 1
    gpu_footprint: int | None = None
    step_cost: Callable[[list[Run]], tuple[float, float]] | None = None
    full_budget: Callable[[Run], Run] | None = None
    steps_forecast: Callable[[list[Run]], list[int]] | None = None
    figures: tuple[Figure, ...] = ()
    scatter_plot: tuple | None = None
    conf_dir: Path | None = None
    sweeps: dict[str, tuple[str, ...]] = field(default_factory=dict)
    references: tuple[str, ...] = ()
    version: str | int | None = None

    def __post_init__(self) -> None:
        def fail(what: str) -> PluginError:
            return PluginError(f"experiment {self.name!r}: {what}")

        if not (isinstance(self.config, type) and dataclasses.is_dataclass(self.config)):
            raise fail("config must be a dataclass (the run's hyperparameters)")
        if "name" not in {f.name for f in dataclasses.fields(self.config)}:
            raise fail(f"config {self.config.__name__} needs a field name = {self.name!r}")
        if not self.grids:
            raise fail("grids is empty: give at least one grid (name -> dataclass)")
        for grid_name, grid in self.grids.items():
            if not (dataclasses.is_dataclass(grid) and callable(getattr(grid, "points", None))):
                raise fail(f"grid {grid_name!r} must be a dataclass with a points() method")
            if "seeds" not in {f.name for f in dataclasses.fields(grid)}:
                raise fail(f"grid {grid_name!r} needs a seeds field")
            fields = {f.name for f in dataclasses.fields(self.config)}
            points = grid().points()
            if not (isinstance(points, list) and all(isinstance(p, dict) for p in points)):
                raise fail(f"grid {grid_name!r}: points() must return a list of dicts (key: value)")
            for point in points:
                unknown = sorted(set(point) - fields)
                if unknown:
                    raise fail(
                        f"grid {grid_name!r} sets {', '.join(unknown)}, which config "
                        f"{self.config.__name__} lacks"
                    )
        if not callable(self.train):
            raise fail("train must be callable as train(runs, device) -> BundleResult")
        if self.gpu_footprint is not None and not (
            isinstance(self.gpu_footprint, int) and self.gpu_footprint > 0
        ):
            raise fail(
                f"gpu_footprint must be a number of bytes (an int > 0), got {self.gpu_footprint!r}"
            )
        if not self.claims:
            raise fail("claims is empty: give at least one Claim")
        ids = [claim.id for claim in self.claims if isinstance(claim, Claim)]
        # A claim's grids are the dataclass grids or YAML ones of conf_dir (conf_dir/grid/*.yaml).
        grid_names = set(self.grids)
        if self.conf_dir is not None:
            grid_names |= {path.stem for path in Path(self.conf_dir).glob("grid/*.yaml")}
        for claim in self.claims:
            if not isinstance(claim, Claim):
                raise fail(f"claims holds a {type(claim).__name__}, not a Claim")
            if KINDS.get(claim.kind) is not type(claim):
                raise fail(
                    f"claim {claim.id!r} is a {type(claim).__name__}, which is no claim kind: "
                    "use one of sdyn.analysis.kinds, or a subclass of Claim that sets kind"
                )
            if ids.count(claim.id) > 1:
                raise fail(f"claim id {claim.id!r} is used twice")
            unknown = sorted(set(claim.grids) - grid_names)
            if unknown:
                raise fail(
                    f"claim {claim.id!r} is measured by grid {', '.join(map(repr, unknown))}, "
                    f"which the experiment lacks: its grids are {', '.join(sorted(grid_names))}"
                )
            if claim.derived_from and claim.derived_from not in ids:
                raise fail(
                    f"claim {claim.id!r} is derived from {claim.derived_from!r}, "
                    "which is not a claim of this experiment"
                )
        for data_name, schema in self.data.items():
            if not dataclasses.is_dataclass(schema) or "name" not in {
                f.name for f in dataclasses.fields(schema)
            }:
                raise fail(f"data set {data_name!r} must be a dataclass with a name field")
        for figure in self.figures:
            if not NAME.fullmatch(figure.name):
                raise fail(
                    f"figure {figure.name!r}: its name names a file: give letters, digits, _ - ."
                )
        if self.scatter_plot is not None and not (
            isinstance(self.scatter_plot, tuple)
            and len(self.scatter_plot) in (4, 5)
            and all(isinstance(c, str) for c in self.scatter_plot[:4])
            and NAME.fullmatch(self.scatter_plot[0])
        ):
            raise fail(
                "scatter_plot must be (table, x, y, hue) or (table, x, y, hue, marked): column "
                f"names, the table's a plain name; got {self.scatter_plot!r}"
            )
        for sweep, overrides in self.sweeps.items():
            if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
                raise fail(f"sweep {sweep!r} must be a tuple of override strings")
        # Each config and data key, by its column, with its default.
        params = {f"experiment.{f.name}": f.default for f in dataclasses.fields(self.config)}
        params |= {
            f"data.{f.name}": f.default
            for schema in self.data.values()
            for f in dataclasses.fields(schema)
        }
        for owner, columns in self._readers():
            unknown = sorted(
                c for c in columns if c.startswith(CONFIG_PREFIXES) and c not in params
            )
            if unknown:
                raise fail(
                    f"{owner} reads {', '.join(unknown)}, which neither config "
                    f"{self.config.__name__} nor a data set has"
                )
        references = [(f"claim {c.id!r}", c.references) for c in self.claims]
        references += [(f"figure {f.name!r}", p.references) for f in self.figures for p in f.panels]
        for owner, pairs in references:
            for column, _ in pairs:
                default = params.get(column)
                if (
                    default is not None
                    and default is not dataclasses.MISSING
                    and not _real(default)
                ):
                    raise fail(
                        f"{owner} draws {column} as a reference line, but it holds "
                        f"{default!r}: give a column of numbers"
                    )

    def _readers(self, grid: str | None = None) -> list[tuple[str, set[str]]]:
        """Each claim (of ``grid``, if given) and figure, and the columns it reads."""
        claims = [c for c in self.claims if grid is None or not c.grids or grid in c.grids]
        return [(f"claim {c.id!r}", c.columns()) for c in claims] + [
            (f"figure {f.name!r}", f.columns()) for f in self.figures
        ]

    def __repr__(self) -> str:
        return f"Experiment({self.name!r})"

    @property
    def default_data(self) -> str:
        """The data set a sweep uses unless ``data=NAME`` says otherwise: the first of ``data``."""
        return next(iter(self.data))

    def bundle_key(self, run: Run) -> Hashable:
        """Runs with equal keys may share one padded bundle: ``pack_key``, else ``shape_key``."""
        return (self.pack_key or self.shape_key)(run)

    def check_result(self, result: BundleResult, runs: int, grid: str, whole: bool = True) -> None:
        """Check a bundle's result before it is recorded: a :class:`BundleResult` with one
        summary (a dict) per run of the ``runs``, each with a ``status`` among
        :data:`STATUSES` (:data:`MEASURED`, ``diverged`` counting as not meeting a threshold;
        or ``failed``: no measurement); ``curves`` (None: none) and each table a DataFrame
        whose rows, if any, have a ``run`` in ``0..runs-1`` (curves a ``step`` too); each
        summary value that a claim of the sweep's ``grid`` or a figure reads
        (:meth:`Claim.columns`, :meth:`Figure.columns`) a real number (or None). With
        ``whole`` (sdyn's first bundle: it holds what the claims read), also each such column
        must be a summary key or a curve column of the result, and the table that
        ``scatter_plot`` draws must hold its columns.

        Raises:
            PluginError: one line naming what ``train`` returned amiss.
        """

        def fail(what: str) -> PluginError:
            return PluginError(f"experiment {self.name!r}: train() returned {what}")

        if not isinstance(result, BundleResult):
            raise fail(f"a {type(result).__name__}, not a BundleResult")
        summaries = result.summaries
        if len(summaries) != runs or not all(isinstance(s, dict) for s in summaries):
            raise fail(f"{len(summaries)} summaries for {runs} runs: give one dict per run")
        for k, summary in enumerate(summaries):
            if summary.get("status") not in STATUSES:
                raise fail(
                    f"status {summary.get('status')!r} for run {k} of the bundle; give one of "
                    f"{', '.join(STATUSES)}"
                )
        tables = {"curves": result.curves, **result.tables}
        for name, table in tables.items():
            if table is None and name == "curves":
                continue
            if not hasattr(table, "columns"):
                raise fail(f"{name} as a {type(table).__name__}, not a DataFrame")
            needed = {"run", "step"} if name == "curves" else {"run"}
            if len(table) and not needed <= set(table.columns):
                raise fail(f"{name} without a {' or '.join(sorted(needed))} column")
            if len(table) and not table["run"].isin(range(runs)).all():
                raise fail(
                    f"{name} whose run column is not a position in the bundle (0..{runs - 1})"
                )
        if whole and self.scatter_plot:  # (table, x, y, hue[, marked])
            name, columns = self.scatter_plot[0], set(self.scatter_plot[1:4])
            table = result.tables.get(name)
            if table is not None and len(table) and not columns <= set(table.columns):
                lacks = ", ".join(sorted(columns - set(table.columns)))
                raise fail(f"table {name} without {lacks}, which scatter_plot draws")
        recorded = {key for summary in summaries for key in summary}
        if result.curves is not None:
            recorded |= set(result.curves.columns) - {"run", "step"}
        known = recorded | {"seed", "step", "run_id", "config_hash"}
        for owner, columns in self._readers(grid):
            read = {c for c in columns if not c.startswith(CONFIG_PREFIXES)}
            missing = sorted(read - known)
            if missing and whole:
                raise PluginError(
                    f"experiment {self.name!r}: {owner} reads {', '.join(map(repr, missing))}, "
                    f"which train() does not return (it returns {', '.join(sorted(recorded))})"
                )
            for key in sorted(read - {"status"}):
                odd = [s[key] for s in summaries if key in s and not _real_or_none(s[key])]
                if odd:
                    raise fail(
                        f"{key} as a {type(odd[0]).__name__}, which {owner} reads: give a real "
                        "number (or None)"
                    )


def _real_or_none(value: Any) -> bool:
    """Whether a summary value is recorded: a real number or None (not measured)."""
    return value is None or _real(value)


def lazy_names(package: str, modules: dict[str, tuple[str, ...]]) -> tuple[Callable, Callable]:
    """PEP 562 for an experiment package whose model must not load with its config and claims:
    ``modules`` maps each submodule to its public names; each name is imported from its
    submodule on first access (and kept). Bind the result in the package's ``__init__``:
    ``__getattr__, __dir__ = lazy_names(__name__, MODEL)``.

    Raises (the returned ``__getattr__``):
        AttributeError: a name the package has not.
    """
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
