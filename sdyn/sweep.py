"""``python -m sdyn.sweep [OVERRIDES...]``: the command line.

Overrides are Hydra's (``+grid=width``, ``grid.n=[16,32,64]``, ``experiment.eps=1e-3``,
``data=diabetes``, ``cluster=address cluster.address=HOST:PORT``, ``tracking.uri=...``). Bad input
is reported on one line with exit status 2 before any run starts or anything is written. This
module imports only the config's stack, so ``--help``, ``--cfg`` and bad input answer fast; the
plan is :mod:`sdyn.plan`, ``--plan``'s reading of it :mod:`sdyn.preview`, the sweep itself
(store, Ray, training, report) :mod:`sdyn.start` and :mod:`sdyn.driver`. Nothing in sdyn
imports this module: it is the command line's alone.

From its first line to its last, SIGINT, SIGTERM and SIGHUP stop the command cleanly: before
:func:`main` sets sdyn's handlers each ends it at once (nothing has started); after, they stop
it where it can end (:mod:`sdyn.stops`), with one line and exit status 130, 143 or 129.
"""

from __future__ import annotations

import signal

if __name__ == "__main__":  # not a KeyboardInterrupt's traceback from the imports below
    signal.signal(signal.SIGINT, signal.SIG_DFL)

import argparse  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402

from omegaconf import OmegaConf  # noqa: E402

from sdyn import compose, named_sweeps, plan_view, plugins, stops  # noqa: E402
from sdyn.analysis import drawing  # noqa: E402
from sdyn.api import PluginError  # noqa: E402
from sdyn.errors import EXIT_BAD_INPUT, BadInput, CommandLine, one_line  # noqa: E402
from sdyn.plan import Plan, plan  # noqa: E402
from sdyn.quiet import quiet_libraries  # noqa: E402


def parser() -> argparse.ArgumentParser:
    """The command line; ``--help`` is answered by :func:`main`, after the overrides, with the
    fields they select (:func:`sdyn.compose.field_help`)."""
    groups = sorted(p.name for p in compose.CONF_DIR.iterdir() if p.is_dir())
    options = {g: sorted(f.stem for f in (compose.CONF_DIR / g).glob("*.yaml")) for g in groups}
    options = {"experiment": plugins.names(), **options}
    listing = "\n".join(f"  {g}: {', '.join(o)}" for g, o in options.items())
    listing += "\n  data, grid: the chosen experiment's (their fields are listed below)"
    parser = CommandLine(
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
        action="append",  # to refuse a second, which would replace the first unseen
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
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--cfg",
        action="store_true",
        help="print the composed config, the values the grid expands to and the run count; exit",
    )
    shown.add_argument(
        "--plan",
        action="store_true",
        help="print runs, cells, bundles, what is recorded, and the estimated time and memory; "
        "write nothing",
    )
    return parser


def named_sweep(name: str, search: list[str]) -> list[str]:
    """The overrides of the named sweep ``name`` (:func:`sdyn.named_sweeps.overrides`, with the
    ``--sweeps-path`` folders ``search``).

    Raises:
        BadInput: no such named sweep, its file has no ``overrides`` list, a folder of
            ``search`` is not one, or an installed experiment is broken.
    """
    try:
        return named_sweeps.overrides(name, search)
    except ValueError as exc:
        raise BadInput(one_line(exc)) from None


def confirm_size(p: Plan) -> None:
    """Ask before a sweep larger than ``sweep.max_runs`` (a terminal), unless ``sweep.yes``; a
    threshold search's size is the most runs it may probe (:meth:`sdyn.plan.Searched.estimate`).

    Raises:
        BadInput: not on a terminal without ``sweep.yes=true``, or the answer was not yes.
    """
    opts = p.objects["sweep"]
    # A search trains what it probes: at most its estimate's most, not its whole ladder.
    most = p.search.estimate().runs[1] if p.search else len(p.runs)
    if most <= opts.max_runs or opts.yes:
        return
    has = f"may train up to {most} runs" if p.search else f"has {most} runs"
    size = f"sweep {p.name} {has}, more than sweep.max_runs={opts.max_runs}"
    if not sys.stdin.isatty():
        raise BadInput(f"{size}: see it with --plan, start it with sweep.yes=true")
    with stops.STOPS.at_once():
        answer = input(f"sdyn: {size} (see it with --plan). Start it? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise BadInput("not started")


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``). Returns the exit status: 0, 2
    for bad input (one line on stderr), 128 + the signal's number for a stop (130, 143), or
    :func:`sdyn.start.run`'s."""
    started = drawing.cpu_times()  # the machine's idle cores, measured until a sweep starts
    quiet_libraries()
    command = parser()
    args = command.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        with stops.stoppable():
            return _run(command, args, started)
    except BadInput as exc:
        print(f"sdyn: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except stops.Stopped as stop:  # while planning or at the prompt: sdyn.start.run says its own
        name = signal.Signals(stop.signum).name
        print(f"sdyn: stopped by {name} before the sweep started; nothing was written",
              file=sys.stderr)  # fmt: skip
        return 128 + stop.signum


def _run(command: argparse.ArgumentParser, args: argparse.Namespace, started) -> int:
    if len(args.sweep or ()) > 1:
        raise BadInput(f"--sweep is given {len(args.sweep)} times: a command runs one sweep")
    named = named_sweep(args.sweep[0], args.sweeps_path) if args.sweep else []
    overrides = [*named, *args.overrides]
    if args.help:
        try:
            fields = compose.field_help(overrides)
        except Exception as exc:  # Hydra, OmegaConf and schema errors all mean bad input
            raise BadInput(one_line(exc)) from None
        print(f"{command.format_help()}\n{fields}")
        return 0
    p = plan(overrides, args.sweep[0] if args.sweep else None)
    stops.STOPS.check()  # a stop while planning (see sdyn.stops)
    if args.cfg:
        print(OmegaConf.to_yaml(p.cfg, resolve=True) + plan_view.format_expansion(p.planned))
        if not p.objects["sweep"].name:  # a default name, from the overrides or --sweep NAME
            print(f"# named {p.name} (a store holding that name with another plan adds a digest)")
        if p.search is not None:
            print(f"# the search trains only what it probes: {p.search.estimate().describe()}")
        return 0
    if args.plan:
        from sdyn import preview  # MLflow: only where a store or a run is needed

        quiet_libraries()  # again: importing MLflow set its loggers' levels
        try:  # a stop during the probe (seconds) ends the command when the probe returns
            with stops.STOPS.deferring("stopping once the plan's timing probe returns"):
                text = preview.show_plan(p)
        except PluginError as exc:  # a plugin kind's limits() raised
            raise BadInput(one_line(exc)) from None
        print(text)
        return 0
    drawing.start(started)  # the report's drawing helpers, decided before Ray starts
    confirm_size(p)
    from sdyn import start

    return start.run(p)


if __name__ == "__main__":
    status = main()
    # Exempt the millions of objects torch, MLflow, Ray and statsmodels created from the
    # interpreter's final garbage collection: it adds about 1.4 s to every exit.
    gc.freeze()
    sys.exit(status)
