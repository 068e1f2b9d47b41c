"""What MLflow tracking adds to a sweep's wall time: the same sweep with tracking on and off.

Both modes run the sweep's own plan, bundles and Ray dispatch on one embedded Ray instance
(started once, before timing). "off" discards each result as it lands; "on" records it exactly
as ``python -m sdyn.sweep`` does (``sdyn.sweep.train_and_record``: a child run per training run
with params, tags, summary metrics, decimated curves, and a Parquet artifact per bundle) into a
fresh SQLite store. Modes alternate; medians over repeats. Target: overhead <= 10%.

    python benchmarks/tracking_overhead.py [--repeats 3] [HYDRA OVERRIDES...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from sdyn import tracking
from sdyn.engine import bundles, dispatch
from sdyn.sweep import plan, quiet_libraries, train_and_record

DEFAULT = ["+grid=width", "sweep.progress=false"]  # the main job's default sweep


def untracked(p) -> float:
    todo = list(range(len(p.runs)))
    groups = bundles.make_bundles(
        todo,
        lambda k: p.module.shape_key(p.runs[k]),
        lambda k: p.module.footprint(p.runs[k]),
        "cpu",
    )
    started = time.perf_counter()
    dispatch.dispatch(
        p.objects["experiment"].name, [[p.runs[k] for k in g] for g in groups], lambda _: None
    )
    return time.perf_counter() - started


def tracked(p, store: Path, i: int) -> float:
    client, experiment_id = tracking.connect(f"sqlite:///{store}", "sdyn")
    parent = tracking.open_sweep(client, experiment_id, f"bench-{i}", {}, p.hashes)
    _, elapsed = train_and_record(p, list(range(len(p.runs))), client, experiment_id, parent, {})
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/tracking_overhead.json")
    parser.add_argument("overrides", nargs="*", default=DEFAULT)
    args = parser.parse_args()
    quiet_libraries()
    p = plan(args.overrides)
    dispatch.start()
    off, on = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            off.append(untracked(p))
            on.append(tracked(p, Path(tmp) / f"mlflow-{i}.db", i))
            print(f"repeat {i}: off {off[-1]:.1f} s, on {on[-1]:.1f} s")
    t_off, t_on = statistics.median(off), statistics.median(on)
    overhead = t_on / t_off - 1
    print(
        f"{len(p.runs)} runs: tracking off {t_off:.1f} s, on {t_on:.1f} s (medians of "
        f"{args.repeats}): tracking adds {100 * overhead:.1f}% (target <= 10%)"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "overrides": args.overrides,
                "runs": len(p.runs),
                "off_s": off,
                "on_s": on,
                "overhead": overhead,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
