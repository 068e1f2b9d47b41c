"""The claim contract: a theorem's statement as a claim (the :class:`Claim` base every claim kind
subclasses, and :data:`KINDS`, where kinds register), the settings it assumes
(:class:`Assumption`, :class:`PaperFigure`), what is reported beside it (:class:`Describe`),
and a paper's figure as the report draws it (:class:`Figure`, :class:`Panel`).

Re-exported by :mod:`sdyn.api`; import them from there.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sdyn.api.errors import PluginError
from sdyn.experiments.common import require

if TYPE_CHECKING:  # importing the contract stays cheap: --help reads configs and claims only
    import pandas as pd

# What the analysis hands a kind and takes back; the contract names them, the analysis
# defines them (a fit: sdyn.analysis.fits.Fit; a slack: sdyn.analysis.verdict.Slack; a
# result: sdyn.analysis.claims.ClaimResult), so that the contract imports no analysis.
Fit = Slack = ClaimResult = Any

# Comparisons of Assumption.op and of a (column, op, value) condition in Claim.where.
OPS = ("==", "!=", "<", "<=", ">", ">=", "in", "null")
# What a claim's theory says of its value: an upper bound, a lower bound, a prediction.
DIRECTIONS = ("<=", ">=", "==")


def is_real(value: Any) -> bool:
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
        if not ok or not (isinstance(reference[0], str) or is_real(reference[0])):
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
            is_real(self.theory),
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
