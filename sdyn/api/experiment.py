"""The experiment contract: :class:`Experiment` (a theorem's runs, how they train, the claims they
test), the :class:`Run` it trains and the :class:`BundleResult` it returns.

Re-exported by :mod:`sdyn.api`; import them from there.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sdyn.api.claim import CONFIG_PREFIXES, KINDS, NAME, Claim, Figure, is_real
from sdyn.api.errors import PluginError

if TYPE_CHECKING:
    import pandas as pd

ENTRY_POINT_GROUP = "sdyn.experiments"
# A run's ``status``, as ``train`` reports it in each summary: the first three are measurements
# the claims read (:data:`MEASURED`); "failed" has no measurement (sdyn also sets it for a run
# whose bundle raised). ``Experiment.check_result`` refuses any other string.
STATUSES = ("converged", "budget_exhausted", "diverged", "failed")
MEASURED = STATUSES[:3]


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
                    and not is_real(default)
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
    return value is None or is_real(value)


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
