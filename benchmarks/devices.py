"""Every experiment's ``train`` on the CPU and on a GPU: the same runs, their seconds and how far
their results differ.

For each installed experiment (``sdyn.plugins.names()``) and each of its grids, the grid's runs
of seed 0 (``--seeds`` for more) are bundled as a sweep bundles them for that device
(``sdyn.engine.bundles.plan``, GPU bundles packed by the experiment's ``pack_key``) and trained
twice on ``cpu`` and twice on ``cuda`` (``--against``). Prints, per grid, the runs, the bundles
per device, the seconds of each device's cold pass (kernel builds, ``torch.compile``, the CUDA
context) and warm pass (``time.perf_counter``, one of each: this checks that the GPU path runs
and agrees; throughput is ``throughput.py``'s), the runs whose ``status`` differs, and the
three summaries that differ most between the devices' warm passes, by their largest relative
difference ``|cpu - cuda| / max(|cpu|, |cuda|, 1e-12)`` over the runs. A grid that fails on a
device gets its error's line and the next grid runs. Writes a results file
(``benchmarks/results/devices/``, or ``--out``) after each grid: per grid the bundles, the
seconds and, per summary, its largest relative difference and the run it is at.

Needs only torch, numpy, scipy, pandas (and cvxpy for ``implicit_bias``): no Ray, MLflow or
Hydra, so it runs on a GPU machine that has none of them.

    python benchmarks/devices.py                    # every experiment, every grid
    python benchmarks/devices.py --only ntk,score   # some experiments
    python benchmarks/devices.py --only score:width # one grid
"""

from __future__ import annotations

import argparse
import math
import time

import record
import torch

from sdyn import plugins
from sdyn.engine.bundles import plan
from sdyn.grid import expand


def train_on(experiment, runs: list, device: str) -> tuple[list[dict], int, float]:
    """Summaries of ``runs`` (in their order) trained in the sweep's bundles on ``device``, the
    number of bundles, and the seconds."""
    bundles, _ = plan(
        runs,
        experiment.shape_key,
        experiment.footprint,
        lambda _: device,
        0,
        experiment.bundle_key,
    )
    summaries = {}
    start = time.perf_counter()
    for bundle in bundles:
        result = experiment.train(bundle, device)
        summaries.update(zip(map(id, bundle), result.summaries, strict=True))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return [summaries[id(r)] for r in runs], len(bundles), time.perf_counter() - start


def differences(cpu: list[dict], other: list[dict]) -> dict[str, tuple[float, int]]:
    """Per numeric summary key, the largest relative difference ``|x - y| / max(|x|, |y|,
    1e-12)`` over the runs and the run it is at; equal values (NaN with NaN, inf with inf)
    differ by 0, a NaN or inf against anything else by inf. Sorted, largest first."""
    worst: dict[str, tuple[float, int]] = {}
    for k, (a, b) in enumerate(zip(cpu, other, strict=True)):
        for key in a.keys() & b.keys():
            x, y = a[key], b[key]
            if isinstance(x, bool) or not isinstance(x, int | float):
                continue
            if x == y or (math.isnan(x) and math.isnan(y)):
                rel = 0.0
            elif math.isfinite(x) and math.isfinite(y):
                rel = abs(x - y) / max(abs(x), abs(y), 1e-12)
            else:
                rel = math.inf
            if rel >= worst.get(key, (-1.0, 0))[0]:
                worst[key] = (rel, k)
    return dict(sorted(worst.items(), key=lambda item: -item[1][0]))


def compare(experiment, runs: list, against: str) -> dict:
    """Both devices' passes over ``runs`` (cold: with compilation and first-use costs; warm: a
    second pass) and how the warm passes' summaries differ."""
    devices = ("cpu", against)
    cold, warm = zip(
        *[(train_on(experiment, runs, d), train_on(experiment, runs, d)) for d in devices],
        strict=True,
    )
    (cpu, cpu_bundles, _), (other, other_bundles, _) = warm
    return {
        "bundles": {"cpu": cpu_bundles, against: other_bundles},
        "seconds_cold": dict(zip(devices, (t for _, _, t in cold), strict=True)),
        "seconds": dict(zip(devices, (t for _, _, t in warm), strict=True)),
        "status_differs": sum(
            a.get("status") != b.get("status") for a, b in zip(cpu, other, strict=True)
        ),
        "differences": differences(cpu, other),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated experiments, or experiment:grid for one grid (default: all)",
    )
    parser.add_argument("--seeds", type=int, default=1, help="seeds per grid point (default 1)")
    parser.add_argument(
        "--against", default="cuda", help="the device compared with the CPU (default cuda)"
    )
    parser.add_argument(
        "--out", help="the results file (default: a new one under benchmarks/results/devices/)"
    )
    args = parser.parse_args()
    if args.against == "cpu":
        raise SystemExit("devices.py: --against cpu compares the CPU with itself; name a GPU")
    if args.against == "cuda" and not torch.cuda.is_available():
        raise SystemExit("devices.py: no GPU visible to torch (torch.cuda.is_available() is False)")
    only: dict[str, set[str]] = {}  # experiment -> its grids to run (empty: all)
    for entry in filter(None, args.only.split(",")):
        name, _, grid_name = entry.partition(":")
        only.setdefault(name, set()).update(filter(None, [grid_name]))
    for name, grids in only.items():
        unknown = grids - plugins.get(name).grids.keys()
        if unknown:
            raise SystemExit(f"devices.py: {name} has no grid {', '.join(sorted(unknown))}")
    gpu_name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"torch {torch.__version__}, {gpu_name}, {torch.get_num_threads()} CPU threads")
    print(
        f"{'experiment':<22} {'grid':<12} {'runs':>5} {'bundles':>8} {'cpu s':>13} "
        f"{args.against + ' s':>13} {'status':>6}  largest relative differences"
    )
    figures = {
        "torch": torch.__version__,
        "gpu": gpu_name,
        "against": args.against,
        "threads": torch.get_num_threads(),
        "seeds": args.seeds,
        "grids": [],
    }
    results = figures["grids"]
    for name in only or plugins.names():
        experiment = plugins.get(name)
        data = experiment.data[experiment.default_data]()
        for grid_name, grid in experiment.grids.items():
            if only.get(name) and grid_name not in only[name]:
                continue
            runs = [r for r in expand(experiment.config(), data, grid()) if r.seed < args.seeds]
            row = {"experiment": name, "grid": grid_name, "runs": len(runs)}
            try:
                row |= compare(experiment, runs, args.against)
            except Exception as exc:  # report it and go on to the next grid
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            results.append(row)
            out = record.write("devices", figures, args.out)  # a cut-off run keeps what it did
            if "error" in row:
                print(f"{name:<22} {grid_name:<12} {len(runs):>5}  error: {row['error']}")
                continue
            bundles = "/".join(str(b) for b in row["bundles"].values())
            cold, warm = row["seconds_cold"], row["seconds"]
            times = [f"{cold[d]:.1f}/{warm[d]:.1f}" for d in ("cpu", args.against)]
            top = ", ".join(
                f"{k} {rel:.1e}" for k, (rel, _) in list(row["differences"].items())[:3]
            )
            print(
                f"{name:<22} {grid_name:<12} {len(runs):>5} {bundles:>8} {times[0]:>13} "
                f"{times[1]:>13} {row['status_differs']:>6}  {top}",
                flush=True,
            )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
