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
* ``claims``: the theorem's statements as :class:`Claim` objects, which sdyn fits and judges.

Optional, with defaults that work: ``data`` (data set name -> dataclass; default: none),
``validate(run)`` (raises ``ValueError`` for a run that cannot train, e.g. a data set too
small; checked before anything is written), ``shape_key`` / ``pack_key`` (runs with equal
keys share a bundle; default: the resolved config without its seed), ``footprint(run)``
(bytes of the largest per-run tensor, which sizes bundles and ``--plan``'s cost model; default
1: every run alike), ``gpu_footprint`` (the footprint from which
``cluster.device=auto`` trains on a GPU; default None: always on the CPU), ``figures``
(a paper's figures, drawn from the curves), ``scatter_plot``, ``conf_dir`` (a folder of the
plugin's own Hydra YAML, added to Hydra's search path), ``sweeps`` (named sweeps the plugin
ships: name -> overrides, run by ``--sweep NAME``; :mod:`sdyn.named_sweeps`) and
``references`` (the papers).

Nothing here imports Ray or MLflow: an experiment's science runs anywhere torch does.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdyn.experiments.common import (
    CLAIM_KINDS,
    OPS,
    Assumption,
    BundleResult,
    Claim,
    Describe,
    Figure,
    Panel,
    Run,
    log_spaced_steps,
    require,
    require_recording,
    require_sample_sizes,
    resolve_device,
)
from sdyn.search import SearchGrid
from sdyn.tracking import DONE, FAILED

__all__ = [
    "CLAIM_KINDS",
    "ENTRY_POINT_GROUP",
    "OPS",
    "Assumption",
    "BundleResult",
    "Claim",
    "Describe",
    "Experiment",
    "Figure",
    "NoData",
    "Panel",
    "PluginError",
    "Run",
    "SearchGrid",
    "lazy_names",
    "log_spaced_steps",
    "require",
    "require_recording",
    "require_sample_sizes",
    "resolve_device",
]

ENTRY_POINT_GROUP = "sdyn.experiments"


class PluginError(ValueError):
    """A broken experiment plugin: the one-line message names the plugin and what is wrong."""


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
            callable; no claims, or an object in ``claims`` that is not a :class:`Claim`, or
            a claim of unknown kind; a data set that is not a dataclass with a ``name`` field;
            a sweep of ``sweeps`` that is not a tuple of override strings.
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
    figures: tuple[Figure, ...] = ()
    scatter_plot: tuple | None = None
    conf_dir: Path | None = None
    sweeps: dict[str, tuple[str, ...]] = field(default_factory=dict)
    references: tuple[str, ...] = ()

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
            for point in grid().points():
                unknown = sorted(set(point) - fields)
                if unknown:
                    raise fail(
                        f"grid {grid_name!r} sets {', '.join(unknown)}, which config "
                        f"{self.config.__name__} lacks"
                    )
        if not callable(self.train):
            raise fail("train must be callable as train(runs, device) -> BundleResult")
        if not self.claims:
            raise fail("claims is empty: give at least one Claim")
        for claim in self.claims:
            if not isinstance(claim, Claim):
                raise fail(f"claims holds a {type(claim).__name__}, not a Claim")
            if claim.kind not in CLAIM_KINDS:
                raise fail(f"claim {claim.id!r} has unknown kind {claim.kind!r}")
        for data_name, schema in self.data.items():
            if not dataclasses.is_dataclass(schema) or "name" not in {
                f.name for f in dataclasses.fields(schema)
            }:
                raise fail(f"data set {data_name!r} must be a dataclass with a name field")
        for sweep, overrides in self.sweeps.items():
            if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
                raise fail(f"sweep {sweep!r} must be a tuple of override strings")

    def __repr__(self) -> str:
        return f"Experiment({self.name!r})"

    @property
    def default_data(self) -> str:
        """The data set a sweep uses unless ``data=NAME`` says otherwise: the first of ``data``."""
        return next(iter(self.data))

    def bundle_key(self, run: Run) -> Hashable:
        """Runs with equal keys may share one padded bundle: ``pack_key``, else ``shape_key``."""
        return (self.pack_key or self.shape_key)(run)

    def check_result(self, result: BundleResult, grid: str) -> None:
        """Check a bundle's result: each run's ``status`` must be one sdyn knows (``DONE``:
        measured, ``diverged`` counting as not meeting a threshold; or ``failed``: no
        measurement), and each claim that applies to ``grid`` must read a summary key or a
        curve column of the result. sdyn checks the first bundle, before it is recorded.

        Raises:
            PluginError: a run without a status or with another; a claim names a quantity
                ``train`` never returns.
        """
        for k, summary in enumerate(result.summaries):
            if summary.get("status") not in (*DONE, FAILED):
                raise PluginError(
                    f"experiment {self.name!r}: run {k} of the bundle has status "
                    f"{summary.get('status')!r}; train() must return one of "
                    f"{', '.join((*DONE, FAILED))}"
                )
        recorded = {key for summary in result.summaries for key in summary}
        recorded |= set(result.curves.columns) - {"run", "step"}
        for claim in self.claims:
            if (not claim.grids or grid in claim.grids) and claim.quantity not in recorded:
                raise PluginError(
                    f"experiment {self.name!r}: claim {claim.id!r} reads {claim.quantity!r}, "
                    f"which train() does not return (it returns {', '.join(sorted(recorded))})"
                )


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
