"""Where a sweep's training time went, bundle by bundle, from its event log (sdyn/events.py).

    python benchmarks/bundle_times.py outputs/ntk-width-sphere/events.jsonl

Per driver of the log (a sweep run once on the GPU and once on the CPU appends both): the
device, the bundles and the Ray workers that trained them, the time of each worker's first
bundle (on a fresh worker it holds the worker's start, CUDA's context and any compilation)
summed over the workers, the other bundles' time summed, and when the last one finished
(seconds after the first was handed to Ray). A bundle's time runs from its start on its worker
to its ``bundle_finished``; a worker trains one bundle at a time, so that start is the later of
its ``bundle_started`` (handed to Ray, which may queue it) and the worker's previous finish.
Prints; writes nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def drivers(path: Path) -> list[dict]:
    """One summary per driver of the event log at ``path``, in order of appearance; a driver
    that finished no bundle is left out."""
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out = []
    for driver in dict.fromkeys(e["driver"] for e in events):
        handed, done = {}, []  # done: (finish time, handed event, worker)
        for e in (e for e in events if e["driver"] == driver):
            if e["event"] == "bundle_started":
                handed[e["bundle"]] = e
            elif e["event"] == "bundle_finished" and e["bundle"] in handed:
                done.append((e["time"], handed[e["bundle"]], e.get("worker")))
        if not done:
            continue
        first_s = rest_s = 0.0
        free_at: dict = {}  # worker -> when it finished its last bundle
        for finish, start, worker in sorted(done, key=lambda bundle: bundle[0]):
            began = max(start["time"], free_at.get(worker, start["time"]))
            if worker in free_at:
                rest_s += finish - began
            else:
                first_s += finish - began
            free_at[worker] = finish
        t0 = min(start["time"] for _, start, _ in done)
        out.append(
            {
                "driver": driver,
                "device": ",".join(sorted({start["device"] for _, start, _ in done})),
                "bundles": len(done),
                "workers": len(free_at),
                "first_s": first_s,
                "rest_s": rest_s,
                "last_done_s": max(finish for finish, _, _ in done) - t0,
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("events", nargs="+", type=Path, help="events.jsonl files")
    for path in parser.parse_args().events:
        for d in drivers(path):
            print(
                f"{path}: {d['device']}, {d['bundles']} bundles on {d['workers']} workers: each "
                f"worker's first {d['first_s']:.1f} s, the others {d['rest_s']:.1f} s (summed), "
                f"all done after {d['last_done_s']:.1f} s"
            )


if __name__ == "__main__":
    main()
