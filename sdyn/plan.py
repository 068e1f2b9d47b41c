"""A sweep's plan: the config composed and validated, every run it trains with its config hash,
and each run as tracking records it (:func:`plan`). Touches nothing outside this process, and
imports only the config's stack: ``--help``, ``--cfg`` and bad input answer fast.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os

from sdyn import compose, grid, names, plugins
from sdyn import search as search_mod
from sdyn.api import MEASURED, Experiment, PluginError, blamed
from sdyn.errors import BadInput, one_line


@dataclasses.dataclass
class Plan:
    """A validated sweep: the objects from the config, every run with its config hash, and
    each run as tracking records it (its cell, seed and params)."""

    cfg: object
    objects: dict
    experiment: Experiment
    runs: list
    hashes: list[str]
    planned: list[grid.Planned]
    name: str
    settings: dict  # what sets the sweep apart from its experiment's defaults (names.settings)
    search: Searched | None = None

    @property
    def probes(self) -> str:
        """A search's :meth:`Searched.probes`; empty for a fixed grid."""
        return self.search.probes() if self.search else ""


@dataclasses.dataclass
class Searched:
    """A threshold search's plan (``+grid=threshold``): the runs are every rung of every
    condition's ladder, of which the search probes some (sdyn/search.py).

    ``ladders``: condition key (the grid point's other axes and the seed) -> the ladder's
    values; ``runs``: (key, ladder index) -> index into the plan's runs; ``criteria``: the
    success criteria searched; ``coarse_ratio`` and ``anchor`` as :class:`sdyn.search.Search`."""

    ladders: dict
    runs: dict
    criteria: list[search_mod.Criterion]
    coarse_ratio: float
    anchor: bool

    def probes(self) -> str:
        """What decides which of the plan's runs the search trains, as one line: its criteria,
        coarse ratio and anchor (a sweep's identity holds it beside the config hashes, so that
        two searches of one ladder are two sweeps)."""
        return f"{self.criteria!r} coarse_ratio={self.coarse_ratio!r} anchor={self.anchor}"

    def search(self) -> search_mod.Search:
        """A new search over the plan's ladders."""
        return search_mod.Search(self.ladders, len(self.criteria), self.coarse_ratio, self.anchor)

    def estimate(self) -> search_mod.Estimate:
        """Bounds on the rounds and runs (:func:`sdyn.search.estimate`): the start line of a
        search prints them."""
        return search_mod.estimate(self.ladders, len(self.criteria), self.coarse_ratio, self.anchor)

    def outcomes(self, row) -> tuple[bool | None, ...]:
        """A recorded probe's outcome per criterion (None for each where the run measured
        nothing: it failed), from its row of the runs table: what decides the next probe."""
        if row["status"] not in MEASURED:
            return (None,) * len(self.criteria)
        return tuple(c.success(row) for c in self.criteria)

    def probe_bounds(self, weight, known: dict | None = None) -> tuple[list[int], list[int]]:
        """The plan's runs (indices) that the search probes at its cheapest threshold positions
        and at those that cost the most, ``weight(k)`` the cost of run k: what the search has
        left to train costs between the two (:func:`sdyn.search.probe_bounds`). ``known``: run
        index -> outcome per criterion of the runs whose outcomes are recorded (None:
        nothing is)."""
        where = {k: probe for probe, k in self.runs.items()}
        seen: dict = {}
        for k, outcome in (known or {}).items():
            key, i = where[k]
            seen.setdefault(key, {})[i] = outcome
        bounds = search_mod.probe_bounds(
            self.ladders,
            len(self.criteria),
            self.coarse_ratio,
            self.anchor,
            lambda key, i: weight(self.runs[(key, i)]),
            seen,
        )
        return tuple(
            sorted(self.runs[(key, i)] for key, path in chosen.items() for i in path)
            for chosen in bounds
        )


def plan(overrides: list[str], named: str | None = None) -> Plan:
    """Compose, validate and expand the sweep. Touches nothing outside this process.

    The sweep's name is ``sweep.name``; else ``named`` (the named sweep it runs, ``--sweep
    NAME``), else its default name (:func:`sdyn.names.default_name`). The last two are default
    names: a store that holds the name with another plan gets the plan's digest appended
    (:func:`sdyn.tracking.sweeps.free_name`), where ``sweep.name`` is refused.

    Raises:
        BadInput: any invalid override, value, grid or combination (one-line message).
    """
    try:
        cfg = compose.load(overrides)
        objects = compose.to_objects(cfg)
        cfg.tracking.uri = objects["tracking"].uri  # a plain path, as the sqlite:/// URI used
    except Exception as exc:  # Hydra, OmegaConf and schema errors all mean bad input here
        raise BadInput(one_line(exc)) from None
    experiment = plugins.get(objects["experiment"].name)
    if objects["grid"] is None:
        grids = ", ".join(sorted(experiment.grids))
        raise BadInput(f"choose a grid with +grid=NAME (grids: {grids})")
    try:
        compose.reject_replaced(overrides, objects["grid"])
        config = f"experiment {experiment.name!r}: config {experiment.config.__name__}"
        with blamed(config, experiment.config, passed=(ValueError,)):  # its own range checks
            runs = grid.expand(objects["experiment"], objects["data"], objects["grid"])
        axes = list(objects["grid"].points()[0])
        footprints = _check_keys(experiment, runs)
        if getattr(objects["cluster"], "address", None) is None:  # trained on this machine
            _check_memory(runs, footprints, axes)
        if experiment.validate is not None:  # data/size mismatches fail here
            owner = f"experiment {experiment.name!r}: validate"
            with blamed(owner, experiment.validate, passed=(ValueError,)):
                for run in runs[:: objects["grid"].seeds]:  # one per point (seed 0)
                    experiment.validate(run)
    except ValueError as exc:
        raise BadInput(one_line(exc)) from None
    version = experiment.version
    hashes = [grid.config_hash(r, version) for r in runs]
    planned = []
    for run, key in zip(runs, hashes, strict=True):
        params = {k: str(v)[:6000] for k, v in grid.run_params(run).items() if k != "seed"}
        cell_name = " ".join(f"{k}={getattr(run.experiment, k)}" for k in axes)
        cell = grid.cell_hash(run, version)
        planned.append(grid.Planned(key, cell, cell_name, run.seed, params, str(version)))
    name = objects["sweep"].name or named or names.default_name(cfg)
    searched = None
    if isinstance(objects["grid"], search_mod.SearchGrid):
        searched = _searched(objects["grid"], experiment.claims, runs, axes)
    settings = names.settings(cfg)
    return Plan(cfg, objects, experiment, runs, hashes, planned, name, settings, searched)


def _check_keys(experiment: Experiment, runs: list) -> list[float]:
    """Call the experiment's ``footprint`` and bundle key (``pack_key`` or ``shape_key``) of
    each run before anything is written: a footprint must be a number, a key hashable.
    Returns the footprints (bytes), run by run.

    Raises:
        PluginError: either function raised (:func:`sdyn.api.blamed`), a footprint is not a
            number of bytes (finite, > 0), or a key is not hashable.
    """
    owner = f"experiment {experiment.name!r}"
    key_of = experiment.pack_key or experiment.shape_key
    hook = "pack_key" if experiment.pack_key else "shape_key"
    with blamed(f"{owner}: footprint", experiment.footprint):
        footprints = [experiment.footprint(run) for run in runs]
    for footprint in footprints:
        if not isinstance(footprint, numbers.Real):
            raise PluginError(
                f"{owner}: footprint returned a {type(footprint).__name__}: give the bytes of "
                "the run's largest tensor"
            )
        if not 0 < footprint < math.inf:  # the probe divides by it
            raise PluginError(
                f"{owner}: footprint returned {footprint}: give the bytes of the run's largest "
                "tensor (> 0)"
            )
    with blamed(f"{owner}: {hook}", key_of):
        keys = [key_of(run) for run in runs]
    for key in keys:  # runs are grouped by them
        try:
            hash(key)
        except TypeError:
            raise PluginError(
                f"{owner}: {hook} returned a {type(key).__name__}, which is not hashable: "
                "return a tuple or a string"
            ) from None
    return footprints


def _check_memory(runs: list, footprints: list[float], axes: list[str]) -> None:
    """Refuse a run whose largest tensor (its experiment's ``footprint``, in ``footprints``)
    alone exceeds this machine's memory: its worker would fail to allocate it, after the store
    was made (and the experiment's ``validate`` may build its data).

    Raises:
        ValueError: names the largest run (its ``axes``), its footprint and the machine's
            memory (GiB).
    """
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    k = max(range(len(runs)), key=footprints.__getitem__)  # the first of the largest
    if (need := footprints[k]) > total:
        run = runs[k]
        name = " ".join(f"{a}={getattr(run.experiment, a)}" for a in axes)
        raise ValueError(
            f"the run {name} needs at least {need / 2**30:.1f} GiB (its largest tensor), more "
            f"than this machine's {total / 2**30:.1f} GiB"
        )


def _searched(grid_obj, claims, runs: list, axes: list[str]) -> Searched:
    """The ladders of a search grid's plan: its runs grouped by condition, sorted by the axis.

    Raises:
        BadInput: ``grid.claims`` names no threshold claim along the searched axis.
    """
    try:
        found = search_mod.criteria(claims, grid_obj.axis, grid_obj.claims)
    except ValueError as exc:
        raise BadInput(one_line(exc)) from None
    others = [a for a in axes if a != grid_obj.axis]
    members: dict = {}
    for k, run in enumerate(runs):
        key = (*(getattr(run.experiment, a) for a in others), run.seed)
        members.setdefault(key, []).append((getattr(run.experiment, grid_obj.axis), k))
    ladders, index = {}, {}
    for key, rungs in members.items():
        rungs.sort()
        ladders[key] = [x for x, _ in rungs]
        index.update({(key, i): k for i, (_, k) in enumerate(rungs)})
    return Searched(ladders, index, found, grid_obj.coarse_ratio, grid_obj.anchor)
