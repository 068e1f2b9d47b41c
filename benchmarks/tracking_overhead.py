"""What MLflow tracking adds to a sweep: the same sweep with tracking on and with writes skipped.

One invocation measures, alternating the two modes, medians over repeats:

- **train phase** (in this process, on one embedded Ray started before timing): "off" runs the
  sweep's own plan, bundles and Ray dispatch and discards each result as it lands; "on" records
  it exactly as ``python -m sdyn.sweep`` does (``sdyn.driver.train_and_record`` into a fresh
  SQLite store: run table, curves, one MLflow run per grid cell). Done at the default sweep's
  size and at ``--large-seeds`` seeds per cell (3,000 runs by default). The driver's MLflow time
  per training run counts every tracking call of the sweep (parent, lease, run-table read,
  recording, closing) except creating the store, which happens once per store; as wall time
  (inflated when other work shares the cores) and as the driver process's extra CPU time over
  the untracked sweep's;
- **end to end**: ``python -m sdyn.sweep`` of the default sweep as a user runs it, in a fresh
  directory. With writes skipped there is nothing to report from, so its time without tracking
  is the tracked time less the train-phase difference above and less the tracking around that
  phase that the command reports (the sweep's set-up and closing; and, reported apart, creating
  the new SQLite store, once per store). Reading the store for the report is left in: a report
  needs its data either way.

    python benchmarks/tracking_overhead.py [--repeats 3] [--large-seeds 50] [OVERRIDES...]

Targets: tracking adds <= 10% end to end, and <= 1.5 ms of driver time per run at 3,000 runs.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time

import record

from sdyn.driver import take_on, train_and_record
from sdyn.engine import bundles, dispatch
from sdyn.plan import plan
from sdyn.quiet import quiet_libraries
from sdyn.tracking import store, sweeps

DEFAULT = ["+grid=width", "sweep.progress=false"]  # the main job's default sweep


def untracked(p) -> tuple[float, float]:
    """(wall, driver-process CPU) seconds to train every run of plan ``p``, each result
    discarded as it lands."""
    todo = list(range(len(p.runs)))
    groups = bundles.make_bundles(
        todo,
        lambda k: p.experiment.shape_key(p.runs[k]),
        lambda k: p.experiment.footprint(p.runs[k]),
        "cpu",
    )
    started, cpu = time.perf_counter(), time.process_time()
    dispatch.dispatch(
        p.objects["experiment"].name, [[p.runs[k] for k in g] for g in groups], lambda _: None
    )
    return time.perf_counter() - started, time.process_time() - cpu


def tracked(p, uri: str) -> tuple[float, float, float]:
    """(train-phase seconds, driver seconds in MLflow, driver-process CPU seconds from set-up
    to closing) for plan ``p`` recorded into ``uri``."""
    client, experiment_id = store.connect(uri, "sdyn")  # the store exists before timing
    started, cpu = time.perf_counter(), time.process_time()
    parent = sweeps.open_sweep(
        client, uri, experiment_id, p.name, sweeps.plan_digest(p.hashes), len(p.hashes)
    )
    lease = sweeps.Lease(client, parent, 30)
    patience = store.Patience(60)
    recorder, todo, _ = take_on(p, client, experiment_id, lease, patience)
    setup = time.perf_counter() - started
    writes = patience.seconds
    _, elapsed = train_and_record(p, todo, recorder)
    recording = patience.seconds - writes
    closing = time.perf_counter()
    sweeps.close_sweep(client, lease, 0)
    seconds = setup + recording + time.perf_counter() - closing
    return elapsed, seconds, time.process_time() - cpu


def end_to_end(overrides: list[str]) -> dict[str, float]:
    """Seconds of one ``python -m sdyn.sweep`` in a fresh directory: ``wall``, its ``train``
    phase, and its tracking outside that phase as the command reports it: ``store`` (creating
    the new SQLite store), ``setup`` (parent, lease, run-table reads) and ``closing``."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "sdyn.sweep", *overrides],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=True,
        )
        wall = time.perf_counter() - started
    train = re.search(r"trained \d+ runs in ([\d.]+) s", proc.stdout).group(1)
    store_, setup, closing = re.search(
        r"MLflow: store ([\d.]+) s, set-up ([\d.]+) s, closing ([\d.]+) s", proc.stdout
    ).groups()
    return {
        "wall": wall,
        "train": float(train),
        "store": float(store_),
        "setup": float(setup),
        "closing": float(closing),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--large-seeds", type=int, default=50, help="seeds per cell, large size")
    parser.add_argument("--large-repeats", type=int, default=1)
    parser.add_argument(
        "--out",
        help="the results file (default: a new one under benchmarks/results/tracking_overhead/)",
    )
    parser.add_argument("overrides", nargs="*", default=DEFAULT)
    args = parser.parse_args()
    quiet_libraries()
    sizes = [
        (plan(args.overrides), args.repeats),
        (plan([*args.overrides, f"grid.seeds={args.large_seeds}"]), args.large_repeats),
    ]
    dispatch.start()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for p, repeats in sizes:
            off, on, driver, cpu = [], [], [], []
            for i in range(repeats):
                wall, cpu_off = untracked(p)
                elapsed, seconds, cpu_on = tracked(p, f"sqlite:///{tmp}/{len(p.runs)}-{i}.db")
                off.append(wall)
                on.append(elapsed)
                driver.append(seconds)
                cpu.append(cpu_on - cpu_off)
                print(
                    f"{len(p.runs)} runs, repeat {i}: train phase off {wall:.2f} s, "
                    f"on {elapsed:.2f} s; driver in MLflow {seconds:.2f} s, "
                    f"{cpu[-1]:.2f} s of CPU",
                    flush=True,
                )
            results.append(
                {
                    "runs": len(p.runs),
                    "cells": len({q.cell for q in p.planned}),
                    "off_s": off,
                    "on_s": on,
                    "driver_mlflow_s": driver,
                    "train_share": statistics.median(on) / statistics.median(off) - 1,
                    "driver_ms_per_run": 1000 * statistics.median(driver) / len(p.runs),
                    "driver_cpu_s": cpu,
                    "driver_cpu_ms_per_run": 1000 * statistics.median(cpu) / len(p.runs),
                }
            )
    e2e = [end_to_end(args.overrides) for _ in range(args.repeats)]
    med = {key: statistics.median(e[key] for e in e2e) for key in e2e[0]}
    small = results[0]
    # Added by tracking: the train phase's difference measured above (on warm Ray workers in
    # both modes: the command's own train phase also pays Ray's worker start-up, tracked or
    # not), and the tracking around that phase that the command reports.
    train_added = statistics.median(small["on_s"]) - statistics.median(small["off_s"])
    added = train_added + med["setup"] + med["closing"]
    share = added / (med["wall"] - added - med["store"])
    share_new_store = (added + med["store"]) / (med["wall"] - added - med["store"])
    for r in results:
        print(
            f"{r['runs']} runs ({r['cells']} cells): train phase off "
            f"{statistics.median(r['off_s']):.2f} s, on {statistics.median(r['on_s']):.2f} s: "
            f"+{100 * r['train_share']:.0f}%; driver in MLflow {r['driver_ms_per_run']:.2f} ms "
            f"per run, {r['driver_cpu_ms_per_run']:.2f} ms of CPU (target at 3,000 runs: "
            "<= 1.5 ms)"
        )
    print(
        f"end to end ({small['runs']} runs, medians of {args.repeats}): {med['wall']:.1f} s "
        f"tracked, {med['wall'] - added - med['store']:.1f} s without tracking: tracking adds "
        f"{100 * share:.1f}% (target <= 10%); {100 * share_new_store:.1f}% counting the "
        f"creation of a new SQLite store ({med['store']:.1f} s, once per store)"
    )
    figures = {
        "overrides": args.overrides,
        "sizes": results,
        "end_to_end": {
            "runs": e2e,
            "tracked_s": med["wall"],
            "untracked_s": med["wall"] - added - med["store"],
            "store_s": med["store"],
            "added_s": added,
            "share": share,
            "share_with_new_store": share_new_store,
        },
    }
    print(f"wrote {record.write('tracking_overhead', figures, args.out)}")


if __name__ == "__main__":
    main()
