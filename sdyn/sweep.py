"""``python -m sdyn.sweep [OVERRIDES...]``: config, plan, skip finished, Ray, MLflow, report.

Overrides are Hydra's (``+grid=width``, ``grid.n=[16,32,64]``, ``experiment.eps=1e-3``,
``data=diabetes``, ``cluster=address cluster.address=HOST:PORT``, ``tracking.uri=...``). Bad input
is reported on one line with exit status 2 before any run starts or anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import logging
import os
import sys
import time
from pathlib import Path

from omegaconf import OmegaConf
from tqdm import tqdm

from sdyn import config as config_mod
from sdyn import experiments, grid, tracking
from sdyn.analysis import report as report_mod
from sdyn.engine import bundles as bundles_mod
from sdyn.engine import dispatch as dispatch_mod

SWEEPS_DIR = config_mod.CONF_DIR.parent / "sweeps"
EXIT_BAD_INPUT = 2
EXIT_RUNS_FAILED = 1


class BadInput(Exception):
    """A user error: reported on one line, exit status 2, nothing written."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += ": " + " ".join(str(cause).split())
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    groups = sorted(p.name for p in config_mod.CONF_DIR.iterdir() if p.is_dir())
    options = {g: sorted(f.stem for f in (config_mod.CONF_DIR / g).glob("*.yaml")) for g in groups}
    listing = "\n".join(f"  {g}: {', '.join(o)}" for g, o in options.items())
    parser = argparse.ArgumentParser(
        prog="python -m sdyn.sweep",
        description="Train every point of a grid on Ray, record it in MLflow, fit each claim.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"config groups (choose with GROUP=OPTION, the grid with +grid=OPTION):\n{listing}\n\n"
            "examples:\n"
            "  python -m sdyn.sweep +grid=width\n"
            "  python -m sdyn.sweep +grid=width data=diabetes grid.seeds=5\n"
            "  python -m sdyn.sweep +grid=width experiment.activation=relu\n"
            "  python -m sdyn.sweep +grid=width cluster=address cluster.address=HOST:6379\n"
            "  python -m sdyn.sweep +grid=width --cfg    # print the composed config and exit"
        ),
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. grid.n=[16,32,64]")
    named = sorted(p.stem for p in SWEEPS_DIR.glob("*.yaml"))
    parser.add_argument(
        "--sweep",
        metavar="NAME",
        help=f"run the named sweep sweeps/NAME.yaml (its overrides come first; {', '.join(named)})",
    )
    parser.add_argument("--cfg", action="store_true", help="print the composed config and exit")
    return parser.parse_args(argv)


@dataclasses.dataclass
class Plan:
    """A validated sweep: the objects from the config and every run with its hash and name."""

    cfg: object
    objects: dict
    module: object
    runs: list
    hashes: list[str]
    names: list[str]
    name: str


def named_sweep(name: str) -> list[str]:
    """The overrides of the named sweep ``sweeps/<name>.yaml``, naming the sweep after it.

    Raises:
        BadInput: no such named sweep, or its file has no ``overrides`` list.
    """
    path = SWEEPS_DIR / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SWEEPS_DIR.glob("*.yaml")))
        raise BadInput(f"no named sweep {name!r} in {SWEEPS_DIR} (named sweeps: {known})")
    spec = OmegaConf.load(path)
    if not OmegaConf.is_list(spec.get("overrides")):
        raise BadInput(f"{path} needs an 'overrides' list")
    return [*map(str, spec.overrides), f"sweep.name={name}"]


def plan(overrides: list[str]) -> Plan:
    """Compose, validate and expand the sweep. Touches nothing outside this process.

    Raises:
        BadInput: any invalid override, value, grid or combination (one-line message).
    """
    try:
        cfg = config_mod.load(overrides)
        objects = config_mod.to_objects(cfg)
    except Exception as exc:  # Hydra, OmegaConf and schema errors all mean bad input here
        raise BadInput(_one_line(exc)) from None
    module = experiments.get(objects["experiment"].name)
    if objects["grid"] is None:
        raise BadInput(f"choose a grid with +grid=NAME (grids: {', '.join(sorted(module.GRIDS))})")
    try:
        runs = grid.expand(objects["experiment"], objects["data"], objects["grid"])
        for run in runs[: len(runs) // objects["grid"].seeds]:
            module.make_data(run.experiment, run.data, 0)  # data/size mismatches fail here
    except ValueError as exc:
        raise BadInput(_one_line(exc)) from None
    axes = list(objects["grid"].points()[0])
    names = [
        " ".join(f"{k}={getattr(r.experiment, k)}" for k in axes) + f" seed={r.seed}" for r in runs
    ]
    name = objects["sweep"].name or _default_name(cfg)
    return Plan(cfg, objects, module, runs, [grid.config_hash(r) for r in runs], names, name)


def _default_name(cfg) -> str:
    """``<experiment>-<grid>-<data>-<6 hex>``: the same overrides give the same name (resume)."""
    science = OmegaConf.to_container(cfg, resolve=True)
    science = {k: science[k] for k in ("experiment", "grid", "data")}
    digest = hashlib.sha256(json.dumps(science, sort_keys=True).encode()).hexdigest()[:6]
    return f"{cfg.experiment.name}-{cfg.grid.name}-{cfg.data.name}-{digest}"


def run_sweep(p: Plan) -> int:
    """Execute a plan: connect, skip what is recorded, train the rest, record, report.

    Returns the process exit status (0, or 1 when runs failed and failures are not allowed).
    """
    sweep_opts, cluster, track = p.objects["sweep"], p.objects["cluster"], p.objects["tracking"]
    try:
        tracking.check_uri(track.uri)
        address = getattr(cluster, "address", None)
        if address is not None:
            dispatch_mod.check_address(address)
        client, experiment_id = tracking.connect(track.uri, track.experiment)
    except ValueError as exc:
        raise BadInput(_one_line(exc)) from None

    dispatch_mod.start(
        address, getattr(cluster, "num_cpus", None), getattr(cluster, "num_gpus", None)
    )
    config = OmegaConf.to_container(p.cfg, resolve=True)
    parent = tracking.open_sweep(client, experiment_id, p.name, config, p.hashes)

    recorded = tracking.recorded_runs(experiment_id)
    retry = (tracking.FAILED, "diverged") if sweep_opts.retry_failed else ()
    todo = [k for k, h in enumerate(p.hashes) if h not in recorded or recorded[h][0] in retry]
    print(
        f"sdyn: sweep {p.name}: {len(p.runs)} runs, {len(p.runs) - len(todo)} already recorded, "
        f"{len(todo)} to train (MLflow {track.uri}, parent run {parent})"
    )
    failed, elapsed = train_and_record(p, todo, client, experiment_id, parent, recorded)
    print(f"sdyn: trained {len(todo)} runs in {elapsed:.1f} s ({failed} failed)")

    out_dir = Path(sweep_opts.out_dir) / p.name
    result = report_mod.build(p.name, track.uri, out_dir)
    print(result.table)
    tracking.log_report(client, parent, out_dir, result.metrics)
    tracking.close_sweep(client, parent, failed)
    print(f"sdyn: report in {out_dir}/ and on MLflow parent run {parent}")
    return EXIT_RUNS_FAILED if failed and not sweep_opts.allow_failures else 0


def train_and_record(
    p: Plan,
    todo: list[int],
    client,
    experiment_id: str,
    parent: str,
    recorded: dict[str, tuple[str, list[str]]],
) -> tuple[int, float]:
    """Train the runs ``todo`` (indices into the plan) on Ray and record each bundle as it lands.

    Returns the number of failed runs and the wall time in seconds.
    """
    sweep_opts = p.objects["sweep"]
    device = "cuda" if dispatch_mod.gpu_count() > 0 else "cpu"
    bundle_list = bundles_mod.make_bundles(
        todo,
        lambda k: p.module.shape_key(p.runs[k]),
        lambda k: p.module.footprint(p.runs[k]),
        device,
        sweep_opts.bundle_size,
    )
    failed = 0
    bar = tqdm(total=len(todo), unit="run", disable=not sweep_opts.progress, desc="training")

    def record(outcome: dispatch_mod.Outcome) -> None:
        nonlocal failed
        ks = [bundle_list[outcome.bundle][j] for j in outcome.positions]
        bundle_id = hashlib.sha256("".join(p.hashes[k] for k in ks).encode()).hexdigest()[:16]
        if outcome.error is None:
            result = outcome.result
            summaries, curves, tables = result.summaries, result.curves, result.tables
        else:
            summaries, curves, tables = [{"status": tracking.FAILED}] * len(ks), None, None
        entries = []
        for k, summary in zip(ks, summaries, strict=True):
            entry = {
                "hash": p.hashes[k],
                "name": p.names[k],
                "params": grid.run_params(p.runs[k]),
                "summary": summary,
                "node": outcome.node,
            }
            if outcome.error is not None:
                entry["traceback"] = outcome.error
            entries.append(entry)
        tracking.log_bundle(
            client, experiment_id, parent, p.name, entries, curves, bundle_id, tables
        )
        for k in ks:  # a retried run replaces its earlier record, once the new one is in
            for old in recorded.get(p.hashes[k], (None, []))[1]:
                client.delete_run(old)
        failed += sum(s["status"] == tracking.FAILED for s in summaries)
        bar.update(len(ks))

    started = time.perf_counter()
    if bundle_list:
        runs = [[p.runs[k] for k in ks] for ks in bundle_list]
        dispatch_mod.dispatch(p.objects["experiment"].name, runs, record)
    bar.close()
    return failed, time.perf_counter() - started


def quiet_libraries() -> None:
    """Keep the terminal for sdyn's own progress and table: MLflow's and Ray's chatter off."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # no usage reports from sweeps
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    for name in ("mlflow", "alembic", "ray"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    quiet_libraries()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        p = plan([*(named_sweep(args.sweep) if args.sweep else []), *args.overrides])
        if args.cfg:
            print(OmegaConf.to_yaml(p.cfg, resolve=True))
            return 0
        return run_sweep(p)
    except BadInput as exc:
        print(f"sdyn: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    status = main()
    # Exempt the millions of objects torch, MLflow, Ray and statsmodels created from the
    # interpreter's final garbage collection: it adds about 1.4 s to every exit.
    gc.freeze()
    sys.exit(status)
