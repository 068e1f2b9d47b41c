"""``python -m sdyn.sweep [OVERRIDES...]``: the command line, the config and the plan.

Overrides are Hydra's (``+grid=width``, ``grid.n=[16,32,64]``, ``experiment.eps=1e-3``,
``data=diabetes``, ``cluster=address cluster.address=HOST:PORT``, ``tracking.uri=...``). Bad input
is reported on one line with exit status 2 before any run starts or anything is written. This
module imports only the config's stack, so ``--help``, ``--cfg`` and bad input answer fast; the
sweep itself (store, Ray, training, report) is :mod:`sdyn.start` and :mod:`sdyn.driver`.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import sys

from omegaconf import OmegaConf

from sdyn import config as config_mod
from sdyn import grid, named_sweeps, names, plan_view, plugins
from sdyn import search as search_mod
from sdyn.analysis import drawing
from sdyn.api import Experiment

EXIT_RUNS_FAILED = 1


EXIT_BAD_INPUT = 2


EXIT_NOT_RECORDED = 3  # the store stayed unreachable, or another driver took the sweep over


class BadInput(Exception):
    """A user error: reported on one line, exit status 2, nothing written."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += ": " + " ".join(str(cause).split())
    return text


def parser() -> argparse.ArgumentParser:
    """The command line; ``--help`` is answered by :func:`main`, after the overrides, with the
    fields they select (:func:`sdyn.config.field_help`)."""
    groups = sorted(p.name for p in config_mod.CONF_DIR.iterdir() if p.is_dir())
    options = {g: sorted(f.stem for f in (config_mod.CONF_DIR / g).glob("*.yaml")) for g in groups}
    options = {"experiment": plugins.names(), **options}
    listing = "\n".join(f"  {g}: {', '.join(o)}" for g, o in options.items())
    listing += "\n  data, grid: the chosen experiment's (their fields are listed below)"
    parser = argparse.ArgumentParser(
        prog="python -m sdyn.sweep",
        description="Train every point of a grid on Ray, record it in MLflow, fit each claim.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        epilog=(
            f"config groups (choose with GROUP=OPTION, the grid with +grid=OPTION):\n{listing}\n\n"
            "examples:\n"
            "  python -m sdyn.sweep +grid=width\n"
            "  python -m sdyn.sweep +grid=width data=diabetes grid.seeds=5\n"
            "  python -m sdyn.sweep +grid=width experiment.activation=relu\n"
            "  python -m sdyn.sweep +grid=width cluster=address cluster.address=HOST:6379\n"
            "  python -m sdyn.sweep +grid=width --cfg    # print the composed config and exit\n"
            "  python -m sdyn.sweep +grid=width --plan   # what it trains, costs; writes nothing"
        ),
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. grid.n=[16,32,64]")
    parser.add_argument(
        "-h",
        "--help",
        action="store_true",
        help="show this help and the fields of the experiment, data and grids the overrides "
        "choose (experiment=NAME, data=NAME), then exit",
    )
    named = ", ".join(named_sweeps.known())
    parser.add_argument(
        "--sweep",
        metavar="NAME",
        help=f"run the named sweep NAME, its overrides first: {named}, or one an installed "
        "experiment ships",
    )
    parser.add_argument(
        "--sweeps-path",
        metavar="DIR",
        action="append",
        default=[],
        help="a folder of your named sweeps, searched before ./sweeps and sdyn's (repeatable)",
    )
    parser.add_argument(
        "--cfg",
        action="store_true",
        help="print the composed config, the values the grid expands to and the run count; exit",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="print runs, cells, bundles, what is recorded, and the estimated time and memory; "
        "write nothing",
    )
    return parser


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

    def search(self) -> search_mod.Search:
        """A new search over the plan's ladders."""
        return search_mod.Search(self.ladders, len(self.criteria), self.coarse_ratio, self.anchor)

    def estimate(self) -> search_mod.Estimate:
        """Bounds on the rounds and runs (:func:`sdyn.search.estimate`): the start line of a
        search prints them."""
        return search_mod.estimate(self.ladders, len(self.criteria), self.coarse_ratio, self.anchor)

    def costliest(self, weight) -> list[int]:
        """The plan's runs (indices) that bound what the search trains, ``weight(k)`` the cost
        of run k (:func:`sdyn.search.costliest`)."""
        chosen = search_mod.costliest(
            self.ladders,
            len(self.criteria),
            self.coarse_ratio,
            self.anchor,
            lambda key, i: weight(self.runs[(key, i)]),
        )
        return sorted(self.runs[(key, i)] for key, path in chosen.items() for i in path)


def named_sweep(name: str, search: list[str]) -> list[str]:
    """The overrides of the named sweep ``name`` (:func:`sdyn.named_sweeps.overrides`, with the
    ``--sweeps-path`` folders ``search``), naming the sweep after it.

    Raises:
        BadInput: no such named sweep, its file has no ``overrides`` list, a folder of
            ``search`` is not one, or an installed experiment is broken.
    """
    try:
        return named_sweeps.overrides(name, search)
    except ValueError as exc:
        raise BadInput(_one_line(exc)) from None


def plan(overrides: list[str]) -> Plan:
    """Compose, validate and expand the sweep. Touches nothing outside this process.

    Raises:
        BadInput: any invalid override, value, grid or combination (one-line message).
    """
    try:
        cfg = config_mod.load(overrides)
        objects = config_mod.to_objects(cfg)
        cfg.tracking.uri = objects["tracking"].uri  # a plain path, as the sqlite:/// URI used
    except Exception as exc:  # Hydra, OmegaConf and schema errors all mean bad input here
        raise BadInput(_one_line(exc)) from None
    experiment = plugins.get(objects["experiment"].name)
    if objects["grid"] is None:
        grids = ", ".join(sorted(experiment.grids))
        raise BadInput(f"choose a grid with +grid=NAME (grids: {grids})")
    try:
        config_mod.reject_replaced(overrides, objects["grid"])
        runs = grid.expand(objects["experiment"], objects["data"], objects["grid"])
        if experiment.validate is not None:  # data/size mismatches fail here
            for run in runs[: len(runs) // objects["grid"].seeds]:
                experiment.validate(run)
    except ValueError as exc:
        raise BadInput(_one_line(exc)) from None
    axes = list(objects["grid"].points()[0])
    version = experiment.version
    hashes = [grid.config_hash(r, version) for r in runs]
    planned = []
    for run, key in zip(runs, hashes, strict=True):
        params = {k: str(v)[:6000] for k, v in grid.run_params(run).items() if k != "seed"}
        cell_name = " ".join(f"{k}={getattr(run.experiment, k)}" for k in axes)
        cell = grid.cell_hash(run, version)
        planned.append(grid.Planned(key, cell, cell_name, run.seed, params, str(version)))
    name = objects["sweep"].name or names.default_name(cfg)
    searched = None
    if isinstance(objects["grid"], search_mod.SearchGrid):
        searched = _searched(objects["grid"], experiment.claims, runs, axes)
    settings = names.settings(cfg)
    return Plan(cfg, objects, experiment, runs, hashes, planned, name, settings, searched)


def _searched(grid_obj, claims, runs: list, axes: list[str]) -> Searched:
    """The ladders of a search grid's plan: its runs grouped by condition, sorted by the axis.

    Raises:
        BadInput: ``grid.claims`` names no threshold claim along the searched axis.
    """
    try:
        found = search_mod.criteria(claims, grid_obj.axis, grid_obj.claims)
    except ValueError as exc:
        raise BadInput(_one_line(exc)) from None
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


def confirm_size(p: Plan) -> None:
    """Ask before a sweep larger than ``sweep.max_runs`` (a terminal), unless ``sweep.yes``.

    Raises:
        BadInput: not on a terminal without ``sweep.yes=true``, or the answer was not yes.
    """
    opts = p.objects["sweep"]
    if len(p.runs) <= opts.max_runs or opts.yes:
        return
    size = f"sweep {p.name} has {len(p.runs)} runs, more than sweep.max_runs={opts.max_runs}"
    if not sys.stdin.isatty():
        raise BadInput(f"{size}: see it with --plan, start it with sweep.yes=true")
    answer = input(f"sdyn: {size} (see it with --plan). Start it? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise BadInput("not started")


def quiet_libraries() -> None:
    """Keep the terminal for sdyn's own progress and table: MLflow's and Ray's chatter off."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage reports from sweeps
    # With a tracking server MLflow prints two "View run" lines per run ended (one per cell).
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    for name in ("mlflow", "alembic", "ray"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # Ray 2.60 announces its default (token authentication for a new local instance) as a
    # warning above every sweep's output; nothing to act on (README, "On a cluster").
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(
        logging.ERROR
    )


def main(argv: list[str] | None = None) -> int:
    started = drawing.cpu_times()  # the machine's idle cores, measured until a sweep starts
    quiet_libraries()
    command = parser()
    args = command.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        named = named_sweep(args.sweep, args.sweeps_path) if args.sweep else []
        overrides = [*named, *args.overrides]
        if args.help:
            try:
                fields = config_mod.field_help(overrides)
            except Exception as exc:  # Hydra, OmegaConf and schema errors all mean bad input
                raise BadInput(_one_line(exc)) from None
            print(f"{command.format_help()}\n{fields}")
            return 0
        p = plan(overrides)
        if args.cfg:
            print(OmegaConf.to_yaml(p.cfg, resolve=True) + plan_view.format_expansion(p.planned))
            if p.search is not None:
                print(f"# the search trains only what it probes: {p.search.estimate().describe()}")
            return 0
        if args.plan:
            from sdyn import driver  # MLflow: only where a store or a run is needed

            quiet_libraries()  # again: importing MLflow set its loggers' levels
            print(driver.show_plan(p))
            return 0
        drawing.start(started)  # the report's drawing helpers, decided before Ray starts
        confirm_size(p)
        from sdyn import start

        return start.run(p)
    except BadInput as exc:
        print(f"sdyn: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    # Run the module proper, not this __main__ copy: sdyn.driver raises sdyn.sweep.BadInput,
    # which main must catch as the same class.
    from sdyn.sweep import main as sweep_main

    status = sweep_main()
    # Exempt the millions of objects torch, MLflow, Ray and statsmodels created from the
    # interpreter's final garbage collection: it adds about 1.4 s to every exit.
    gc.freeze()
    sys.exit(status)
