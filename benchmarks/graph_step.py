"""The NTK step on a GPU: CUDA-graph replays against the compiled step, in one process.

For each case (``throughput.py``'s ``ntk-large``, n 256, m 4096, and ``ntk-widest``, the large
sweep's widest shape), trains the case's runs as a sweep bundles them, once with
``descent.CUDA_GRAPHS`` on and once off (with ``--fused``, a third time: graphs of fused.py's
Triton kernels, ``SDYN_FUSED=1``), each path: a cold call (compilation, capture), then
the median of ``--repeats`` warm calls at the case's steps and at twice them (the difference is
the steps alone: set-up and records excluded). Prints as it goes (so that a run stopped at its
time limit keeps what it measured) model-steps/s of each path, their ratio, and the steps' share
of the card's binding limit (``sdyn.engine.cost.CARDS``: FP64 rate or memory bandwidth, whichever
the steps' FLOP and bytes make longer); checks that every path ends every run in the same status
as the compiled step, with summaries equal to 1e-9. Writes JSON
(``benchmarks/results/graph_step/``). ``--fused-blocks PxCxSxMxNxW,...`` times the fused step
again for each choice of fused.py's block shapes (``fused.Blocks``), to choose them.

With ``SDYN_COMPILE=0`` the step is eager PyTorch, not ``torch.compile``'d: the graphs then
replay the eager step's kernels, with no compilation to pay (the results file says
``compiled: false``).

    python benchmarks/graph_step.py                       # on a GPU
    python benchmarks/graph_step.py --cases ntk-large --repeats 3
    python benchmarks/graph_step.py --fused               # and the fused Triton step
    python benchmarks/graph_step.py --fused-blocks 64x64x512x64x16x4,32x64x256x32x32x2
    SDYN_COMPILE=0 python benchmarks/graph_step.py --cases ntk-large
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from functools import partial

import record
import throughput
import torch

from sdyn import native
from sdyn.experiments.ntk import bundling, descent
from sdyn.experiments.ntk import fused as fused_kernels  # Triton: a GPU's torch ships it


def train(runs, policy: str):
    """Seconds to train ``runs`` as the sweep plans them, and their summaries."""
    bundles, devices = throughput.planned(throughput.NTK, runs, policy)
    start = time.perf_counter()
    summaries = []
    for bundle, device in zip(bundles, devices, strict=True):
        summaries += throughput.NTK.train(bundle, device).summaries
    torch.cuda.synchronize()
    return time.perf_counter() - start, summaries


def same(a: dict, b: dict) -> bool:
    """Summaries equal: statuses and counts exactly, floats to a relative 1e-9."""
    for key, value in a.items():
        if isinstance(value, float) and math.isfinite(value):
            if not math.isclose(b[key], value, rel_tol=1e-9, abs_tol=1e-12):
                return False
        elif not (b[key] == value or (value != value and b[key] != b[key])):
            return False
    return True


def measure(
    case: throughput.Case, graphs: bool, blocks: fused_kernels.Blocks | None, repeats: int
) -> dict:
    """``blocks``: None for the PyTorch iteration, else the fused step with these blocks."""
    descent.CUDA_GRAPHS = graphs
    os.environ["SDYN_FUSED"] = "0" if blocks is None else "1"
    if blocks is not None:
        fused_kernels.BLOCKS = blocks
    fused = "" if blocks is None else str(blocks)
    runs = throughput.make_runs(case, "float64")
    cold, summaries = train(runs, "cuda")
    warm = statistics.median(train(runs, "cuda")[0] for _ in range(repeats))
    twice = throughput.with_steps(runs, 2 * case.steps)
    steps_s = statistics.median(train(twice, "cuda")[0] for _ in range(repeats)) - warm
    card = throughput.gpu_card()
    r = {
        "case": case.name,
        "graphs": graphs,
        "fused": fused,
        "runs": len(runs),
        "steps": case.steps,
        "cold_s": cold,
        "warm_s": warm,
        "model_steps_per_s": len(runs) * case.steps / warm,
        "steps_s": steps_s,
        "summaries": summaries,
    }
    if card is not None and steps_s > 0:
        cost = partial(bundling.fused_step_cost, segment=blocks.segment) if blocks else None
        flops, nbytes = throughput.step_work(runs, "cuda", case.steps, cost)
        r |= throughput.binding_limit(card, flops, nbytes, steps_s)
    limit = ""
    if "binding_limit" in r:
        limit = f", {r['percent_of_binding_limit']:.1f}% of {r['binding_limit']}"
    print(
        f"{case.name} graphs={graphs} fused={fused}: cold {cold:.2f} s, warm {warm:.3f} s "
        f"({r['model_steps_per_s']:,.0f} model-steps/s), steps alone {steps_s:.3f} s{limit}",
        flush=True,
    )
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="ntk-large,ntk-widest")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--fused", action="store_true", help="also time the fused Triton step")
    parser.add_argument(
        "--fused-blocks",
        default="",
        help="comma-separated PxCxSxMxNxW (fused.Blocks): the fused step again with these",
    )
    parser.add_argument("--out", help="the results file (default: under benchmarks/results/)")
    args = parser.parse_args()
    try:
        chosen = [fused_kernels.Blocks.parse(b) for b in args.fused_blocks.split(",") if b]
    except ValueError as exc:
        sys.exit(f"graph_step.py: {exc}")
    if not torch.cuda.is_available():
        sys.exit("graph_step.py: needs a GPU (CUDA graphs are a GPU's)")
    cases = {c.name: c for c in (*throughput.CASES, throughput.WIDEST)}
    step = "torch.compile'd" if native.ENABLED else "eager (SDYN_COMPILE=0)"
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {step} step", flush=True)
    results = []
    blocks = [fused_kernels.BLOCKS] * args.fused + chosen
    variants = [(True, None), (False, None)] + [(True, b) for b in blocks]
    for name in args.cases.split(","):
        # The compiled step without graphs (variants[1]) is what the others are checked against.
        on, off, *triton = (measure(cases[name], *v, args.repeats) for v in variants)
        for r in (on, *triton):
            agree = all(map(same, r.pop("summaries"), off["summaries"]))
            print(
                f"{name}: graphs={r['graphs']} fused={r['fused']} "
                f"{r['model_steps_per_s'] / off['model_steps_per_s']:.1f}x the compiled step "
                f"without graphs; summaries agree: {agree}",
                flush=True,
            )
            r["agree"] = agree
        off.pop("summaries")
        results += [on, off, *triton]
    path = record.write("graph_step", {"compiled": native.ENABLED, "cases": results}, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
