"""Throughput of sdyn's batched trainers against the naive baseline, measured in one invocation.

NTK cases. Naive baseline: one run = one Python loop of eager autograd steps (forward, backward,
update), the runs one after another. Production: ``ntk.train`` on bundles as the engine forms
them (``sdyn.engine.bundles``): on a CPU the fused C++ GD loop (``ntk_step.cpp``), on a GPU the
batched step compiled with ``torch.compile``. Both do the same runs for the same number of steps,
set-up (data, init, lambda_max(H(0)) for the step size) included; production records only its
first and last step here (``record_points=2``) so that both do the same arithmetic.

Attention cases (``attention_regression``, ``implicit_bias``): their trainers use closed-form
gradients, so the baseline is the same trainer called with one run at a time (one Python loop
per run) against the engine's bundles; this measures what batching gains.

Prints model-steps/s for both, their ratio and the achieved GFLOP/s (FLOP count per model-step
stated per case), and writes JSON. Timings are medians over repeats (``time.perf_counter``).

    python benchmarks/throughput.py                 # all cases, JSON to benchmarks/results/
    python benchmarks/throughput.py --quick         # fewer repeats
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from sdyn import experiments
from sdyn.engine.bundles import make_bundles
from sdyn.experiments import ntk
from sdyn.experiments.common import Run


@dataclass
class Case:
    name: str
    n: int
    m: int
    runs: int
    steps: int
    d: int = 8

    def flops_per_model_step(self) -> float:
        # Z = X W (2nmd), F = m S a^T (2nm d_out), R a (2nm d_out), G = X^T (.) (2nmd),
        # softmax and the elementwise gradient terms (~10 nm); d_out = 1.
        return 4 * self.n * self.m * self.d + 4 * self.n * self.m + 10 * self.n * self.m


CASES = [
    Case("ntk-small", n=16, m=64, runs=64, steps=300),
    Case("ntk-small-2", n=64, m=128, runs=64, steps=300),
    Case("ntk-medium", n=64, m=1024, runs=16, steps=200),
    Case("ntk-large", n=256, m=4096, runs=4, steps=60),
]


def make_runs(case: Case, dtype: str) -> list[Run]:
    cfg = ntk.NTKConfig(
        n=case.n, m=case.m, d=case.d, steps=case.steps, eps=1e-12, record_points=2, dtype=dtype
    )
    return [Run(replace(cfg), ntk.SphereData(d=case.d), seed) for seed in range(case.runs)]


def naive(runs: list[Run], device: str) -> float:
    """Seconds for the runs one at a time, each a Python loop of eager autograd GD steps."""
    start = time.perf_counter()
    for run in runs:
        cfg = run.experiment
        X, Y = (
            t.to(device, getattr(torch, cfg.dtype)) for t in ntk.make_data(cfg, run.data, run.seed)
        )
        W, a = ntk.symmetric_init(
            1, cfg.d, cfg.m, cfg.d_out, cfg.sigma, torch.Generator().manual_seed(run.seed)
        )
        W, a = W[0].to(X), a[0].to(X)
        lam_max = torch.linalg.eigvalsh(ntk.ntk_gram(W, a, X))[-1]
        eta = cfg.lr_scale / (cfg.m * lam_max)
        W.requires_grad_(True)
        for _ in range(cfg.steps):
            loss = ntk.loss(ntk.forward(W, a, X), Y)
            loss.backward()
            with torch.no_grad():
                W -= eta * W.grad
            W.grad = None
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def production(runs: list[Run], device: str) -> float:
    """Seconds for the runs trained as the engine bundles them."""
    bundles = make_bundles(runs, ntk.shape_key, ntk.footprint, device)
    start = time.perf_counter()
    for bundle in bundles:
        ntk.train(bundle, device)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


@dataclass
class TrainerCase:
    """A case run through an experiment's own ``train``: bundles vs one run at a time."""

    name: str
    experiment: str
    overrides: dict
    runs: int


TRAINER_CASES = [
    TrainerCase("attention", "attention_regression", {"n": 256, "steps": 400}, 16),
    TrainerCase("implicit", "implicit_bias", {"n": 8, "steps": 2000}, 16),
]


def measure_trainer(case: TrainerCase, device: str, repeats: int) -> dict:
    module = experiments.get(case.experiment)
    cfg = replace(module.CONFIG(), record_points=2, **case.overrides)
    data = next(iter(module.DATA.values()))()
    runs = [Run(cfg, data, seed) for seed in range(case.runs)]

    def one_at_a_time() -> float:
        start = time.perf_counter()
        for run in runs:
            module.train([run], device)
        return time.perf_counter() - start

    def bundled() -> float:
        start = time.perf_counter()
        for bundle in make_bundles(runs, module.shape_key, module.footprint, device):
            module.train(bundle, device)
        return time.perf_counter() - start

    bundled(), one_at_a_time()  # warm-up
    t_single = statistics.median(one_at_a_time() for _ in range(repeats))
    t_bundle = statistics.median(bundled() for _ in range(repeats))
    steps = case.runs * cfg.steps
    return {
        "case": case.name,
        "experiment": case.experiment,
        "runs": case.runs,
        "steps": cfg.steps,
        "naive_model_steps_per_s": steps / t_single,
        "production_model_steps_per_s": steps / t_bundle,
        "speedup": t_single / t_bundle,
    }


def measure(case: Case, device: str, dtype: str, repeats: int) -> dict:
    runs = make_runs(case, dtype)
    model_steps = case.runs * case.steps
    # The naive loop at the largest shape costs minutes per repeat: time it on a subset of runs
    # (its per-run cost does not depend on how many runs there are) and say so.
    naive_runs = runs[: max(2, min(case.runs, 8))]
    # Warm-up: compilation of the batched step (torch.compile), allocator, threads.
    production(runs, device), naive(runs[:1], device)
    t_naive = statistics.median(naive(naive_runs, device) for _ in range(repeats))
    t_prod = statistics.median(production(runs, device) for _ in range(repeats))
    naive_rate = len(naive_runs) * case.steps / t_naive
    prod_rate = model_steps / t_prod
    flops = case.flops_per_model_step()
    return {
        "case": case.name,
        "n": case.n,
        "m": case.m,
        "runs": case.runs,
        "steps": case.steps,
        "naive_runs_timed": len(naive_runs),
        "naive_model_steps_per_s": naive_rate,
        "production_model_steps_per_s": prod_rate,
        "speedup": prod_rate / naive_rate,
        "flops_per_model_step": flops,
        "naive_gflops": naive_rate * flops / 1e9,
        "production_gflops": prod_rate * flops / 1e9,
    }


def cpu_name() -> str:
    """The CPU's model name (Linux), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--quick", action="store_true", help="1 repeat instead of 3")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (a sweep's Ray tasks use 1 each)"
    )
    parser.add_argument("--out", default="benchmarks/results/throughput.json")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    torch.set_num_threads(args.threads)
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else cpu_name()
    probe = torch.zeros(1, 8, 2, device=args.device, dtype=getattr(torch, args.dtype))
    path = "C++ GD loop" if ntk._kernel(probe) is not None else "torch.compile'd step"
    print(
        f"device {args.device} ({device_name}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {args.dtype}, median of {repeats}; NTK path: {path}"
    )
    header = f"{'case':<12} {'n':>4} {'m':>5} {'runs':>4} {'naive steps/s':>14} "
    header += f"{'batched steps/s':>16} {'speedup':>8} {'GFLOP/s':>8}"
    print(header)
    results = []
    for case in CASES:
        r = measure(case, args.device, args.dtype, repeats)
        results.append(r)
        print(
            f"{r['case']:<12} {r['n']:>4} {r['m']:>5} {r['runs']:>4} "
            f"{r['naive_model_steps_per_s']:>14.0f} {r['production_model_steps_per_s']:>16.0f} "
            f"{r['speedup']:>7.1f}x {r['production_gflops']:>8.2f}"
        )
    for case in TRAINER_CASES:
        r = measure_trainer(case, args.device, repeats)
        results.append(r)
        print(
            f"{r['case']:<12} {'':>4} {'':>5} {r['runs']:>4} "
            f"{r['naive_model_steps_per_s']:>14.0f} {r['production_model_steps_per_s']:>16.0f} "
            f"{r['speedup']:>7.1f}x {'':>8}  (one-run trainer calls as baseline)"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "device": args.device,
        "device_name": device_name,
        "dtype": args.dtype,
        "ntk_path": path,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
    }
    out.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
