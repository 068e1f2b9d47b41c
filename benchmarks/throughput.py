"""Throughput of sdyn's batched trainers against the naive baseline, measured in one invocation.

NTK cases. Naive baseline: one run = one Python loop of eager autograd steps (forward, backward,
update), the runs one after another. Production: ``ntk.train`` on bundles as the engine forms
them (``sdyn.engine.bundles``): on a CPU the fused C++ GD loop (``ntk_step.cpp``), on a GPU the
batched step compiled with ``torch.compile``. Both do the same runs for the same number of steps,
set-up (data, init, lambda_max(H(0)) for the step size) included; production records only its
first and last step here (``record_points=2``) so that both do the same arithmetic.

Attention cases (``attention_regression``'s Algorithm 1, ``implicit_bias``'s normalised GD): the
naive baseline is again one eager-autograd Python loop per run (:func:`naive_attention`,
:func:`naive_implicit`), against the experiment's ``train`` on the engine's bundles, which uses
closed-form gradients (``implicit_bias`` in token coordinates) and includes its own set-up
(initialisation, both SVM references, the recorded metrics; the attention case without its
gradient-bias Monte Carlo, which the naive loop does not do).

Threads: production uses ``--threads`` (default: all cores; the C++ kernels share a bundle's runs
among them). Each naive loop is timed at 1 thread and at ``--threads``; the faster counts.

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
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from sdyn import experiments
from sdyn.engine.bundles import make_bundles
from sdyn.experiments import attention_regression, implicit_bias, ntk
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


def naive_attention(runs: list[Run]) -> None:
    """``attention_regression``'s Algorithm 1 (``alg1``, full batch), one run at a time, each a
    Python loop of eager autograd steps: loss (Eq. 1) plus the regulariser, backward, then
    ``V -= lr grad_V`` and ``K -= lr Sigma_hat^-p grad_K`` from the spectral initialisation."""
    for run in runs:
        cfg = run.experiment
        X, Y = attention_regression.make_data(cfg, run.data, run.seed)
        V, K, Sigma_hat, _ = attention_regression.spectral_init(X, Y)
        evals, evecs = torch.linalg.eigh(Sigma_hat)
        precond = (evecs * evals.pow(-cfg.precond_power)) @ evecs.T
        V.requires_grad_(True)
        K.requires_grad_(True)
        for _ in range(cfg.steps):
            SK = Sigma_hat @ K
            loss = attention_regression.empirical_loss(V, K, X, X, Y)
            loss = loss + cfg.reg * (V.T @ V - SK @ SK.T).square().sum()
            loss.backward()
            with torch.no_grad():
                V -= cfg.lr * V.grad
                K -= cfg.lr * precond @ K.grad
            V.grad = K.grad = None


def naive_implicit(runs: list[Run]) -> None:
    """``implicit_bias``'s normalised GD (``ngd``, fixed decoder), one run at a time, each a Python
    loop of eager autograd steps on W (d x d): exponential loss, backward, ``W -= eta g/||g||``."""
    for run in runs:
        cfg = run.experiment
        data = implicit_bias.make_data(cfg, run.data, run.seed)
        d = data.X.shape[-1]
        generator = torch.Generator().manual_seed(run.seed)
        W = torch.randn(d, d, generator=generator, dtype=torch.float64)
        W = (cfg.init_scale * W / W.norm()).requires_grad_(True)
        for _ in range(cfg.steps):
            out = implicit_bias.forward(W, data.decoder, data.X)
            torch.exp(-data.y * out).mean().backward()
            with torch.no_grad():
                W -= cfg.eta_ngd * W.grad / W.grad.norm()
            W.grad = None


def fastest_naive(time_once: Callable[[], float], repeats: int) -> tuple[float, int]:
    """Median seconds of a naive loop at its faster thread count, 1 or the benchmark's (eager
    torch ops on small tensors often lose time to threading), and that count."""
    threads = torch.get_num_threads()
    timings = {}
    for n in sorted({1, threads}):
        torch.set_num_threads(n)
        timings[n] = statistics.median(time_once() for _ in range(repeats))
    torch.set_num_threads(threads)
    best = min(timings, key=timings.get)
    return timings[best], best


@dataclass
class TrainerCase:
    """An attention experiment: its eager-autograd naive loop against its ``train`` on bundles."""

    name: str
    experiment: str
    overrides: dict
    runs: int
    naive: Callable[[list[Run]], None]
    naive_runs: int  # the naive loop is timed on this many of the runs (its cost is per run)


TRAINER_CASES = [
    TrainerCase(
        "attention",
        "attention_regression",
        {"n": 256, "steps": 400, "grad_bias_draws": 0},
        16,
        naive_attention,
        4,
    ),
    TrainerCase("implicit", "implicit_bias", {"n": 8, "steps": 1000}, 16, naive_implicit, 1),
]


def measure_trainer(case: TrainerCase, device: str, repeats: int) -> dict:
    module = experiments.get(case.experiment)
    cfg = replace(module.CONFIG(), record_points=2, **case.overrides)
    data = next(iter(module.DATA.values()))()
    runs = [Run(cfg, data, seed) for seed in range(case.runs)]

    def naive() -> float:
        start = time.perf_counter()
        case.naive(runs[: case.naive_runs])
        return time.perf_counter() - start

    def bundled() -> float:
        start = time.perf_counter()
        for bundle in make_bundles(runs, module.shape_key, module.footprint, device):
            module.train(bundle, device)
        return time.perf_counter() - start

    bundled()  # warm-up
    t_naive, naive_threads = fastest_naive(naive, repeats)
    t_bundle = statistics.median(bundled() for _ in range(repeats))
    naive_rate = case.naive_runs * cfg.steps / t_naive
    prod_rate = case.runs * cfg.steps / t_bundle
    return {
        "case": case.name,
        "experiment": case.experiment,
        "dtype": getattr(cfg, "dtype", "float64"),  # --dtype applies to the NTK cases
        "runs": case.runs,
        "steps": cfg.steps,
        "naive_runs_timed": case.naive_runs,
        "naive_threads": naive_threads,
        "naive_model_steps_per_s": naive_rate,
        "production_model_steps_per_s": prod_rate,
        "speedup": prod_rate / naive_rate,
    }


def measure(case: Case, device: str, dtype: str, repeats: int) -> dict:
    runs = make_runs(case, dtype)
    model_steps = case.runs * case.steps
    # The naive loop at the largest shape costs minutes per repeat: time it on a subset of runs
    # (its per-run cost does not depend on how many runs there are) and say so.
    naive_runs = runs[: max(2, min(case.runs, 8))]
    # Warm-up: compilation of the batched step (torch.compile), allocator, threads.
    production(runs, device), naive(runs[:1], device)
    t_naive, naive_threads = fastest_naive(lambda: naive(naive_runs, device), repeats)
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
        "naive_threads": naive_threads,
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
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help="threads for both paths (default: torch's, one per core); the naive loop's torch ops "
        "and the C++ GD loop (which shares a bundle's runs among them) both use them",
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
    header = f"{'case':<12} {'n':>4} {'m':>5} {'runs':>4} {'naive steps/s (threads)':>24} "
    header += f"{'batched steps/s':>16} {'speedup':>8} {'GFLOP/s':>8}"
    print(header)
    results = []
    for case in CASES:
        r = measure(case, args.device, args.dtype, repeats)
        results.append(r)
        print(
            f"{r['case']:<12} {r['n']:>4} {r['m']:>5} {r['runs']:>4} "
            f"{r['naive_model_steps_per_s']:>20.0f} ({r['naive_threads']}) "
            f"{r['production_model_steps_per_s']:>16.0f} "
            f"{r['speedup']:>7.1f}x {r['production_gflops']:>8.2f}"
        )
    for case in TRAINER_CASES:
        r = measure_trainer(case, args.device, repeats)
        results.append(r)
        print(
            f"{r['case']:<12} {'':>4} {'':>5} {r['runs']:>4} "
            f"{r['naive_model_steps_per_s']:>20.0f} ({r['naive_threads']}) "
            f"{r['production_model_steps_per_s']:>16.0f} "
            f"{r['speedup']:>7.1f}x {'':>8}  ({r['dtype']})"
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
