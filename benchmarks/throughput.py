"""Throughput of sdyn's batched trainers against the naive baseline, measured in one invocation.

Device-honest: each case runs on the device a sweep would train it on (``--device``, the
``cluster.device`` policy: ``auto`` sends large NTK shapes to a GPU when there is one and keeps
the rest on the CPU, see ``sdyn.engine.bundles.choose_device``), and the naive baseline runs on
that same device.

NTK cases. Naive baseline: one run = one Python loop of eager autograd steps (forward, backward,
update), the runs one after another. Production: ``ntk.train`` on bundles as the engine plans
them (``sdyn.engine.bundles.plan``): on a CPU the fused C++ GD loop (``ntk_step.cpp``) on
shape-exact bundles, on a GPU the compiled PyTorch step on bundles packed across widths and
sample sizes. Both do the same runs for the same number of steps, set-up (data, init,
lambda_max(H(0)) for the step size) included; production records only its first and last step
here (``record_points=2``) so that both do the same arithmetic. ``width-grid`` is the default
``+grid=width`` sweep (60 shapes x 5 seeds) at a shorter budget, bundled (and on a GPU packed)
as the sweep does; its naive loop is timed on one seed per shape and scaled by the seeds.

Attention cases (``attention_regression``'s Algorithm 1, ``implicit_bias``'s normalised GD): the
naive baseline is again one eager-autograd Python loop per run (:func:`naive_attention`,
:func:`naive_implicit`), against the experiment's ``train`` on the engine's bundles, which uses
closed-form gradients (``implicit_bias`` in token coordinates) and includes its own set-up
(initialisation, both SVM references, the recorded metrics; the attention case without its
gradient-bias Monte Carlo, which the naive loop does not do).

Threads: production uses ``--threads`` (default: all cores; the C++ kernels share a bundle's runs
among them). Each naive loop is timed at 1 thread and at ``--threads``; the faster counts.

Two more columns for the NTK cases, measured in the same invocation on the same machine:

- **baseline** (``--baseline DIR``): the production path of another version of sdyn, whose
  ``sdyn`` package is in DIR (``python benchmarks/gpu_wheelhouse.py --baseline REF`` puts REF's
  in ``.whl/baseline/``, for a GPU machine, which gets the working tree but not ``.git``; with
  git, ``git archive REF sdyn | tar -x -C DIR``). It runs this script in a subprocess whose
  PYTHONPATH starts with DIR (``--production-of CASE``), on the same runs and device policy;
- **host CPU**: where a case trains on a GPU, its production path with every bundle on the CPU
  (policy ``cpu``, ``--threads`` threads).

The step against the hardware's limits: each NTK case's production path is timed again at twice
the steps, and the difference (set-up excluded) is the time of its steps (not resolved, "-",
where it is not positive: the steps took less than the timings' noise). Their FLOP and bytes
are those of its bundles' steps (``ntk.step_cost``, padding included). On a GPU of
``sdyn.engine.cost.CARDS`` it prints the fraction of the binding limit the steps reach: the
time their FLOP take at the card's data-sheet FP64 rate or their bytes at its memory bandwidth,
whichever is longer (the limit that binds), over the measured time. On a CPU that fraction is
not computed (no bandwidth figure; the FLOP peak is only an estimate, see :func:`peak_flops`).

Prints model-steps/s of each path, the ratios, the achieved GFLOP/s of the NTK cases and their
percent of the device's peak FLOP rate in the case's dtype, and writes JSON with the device of
every case. Timings are medians over repeats (``time.perf_counter``).

    python benchmarks/throughput.py                 # all cases, JSON to benchmarks/results/
    python benchmarks/throughput.py --quick         # fewer repeats
    python benchmarks/throughput.py --cases ntk-large,ntk-widest --baseline .whl/baseline
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import record
import torch

import sdyn
from sdyn import plugins
from sdyn.api import Run
from sdyn.engine.bundles import choose_device, plan
from sdyn.experiments import attention_regression, implicit_bias, ntk
from sdyn.grid import expand

NTK = plugins.get("ntk")  # the experiment (its footprint, bundling, train); ``ntk`` its module


@dataclass
class Case:
    name: str
    n: int
    m: int
    runs: int
    steps: int
    d: int = 8

    grid: bool = False  # the default +grid=width sweep instead of one shape


# ntk-large's runs take 2,000 steps, as a run at that shape does before it fits (at 60, the
# set-up and a GPU's graph capture were most of the time).
CASES = [
    Case("ntk-small", n=16, m=64, runs=64, steps=300),
    Case("ntk-small-2", n=64, m=128, runs=64, steps=300),
    Case("ntk-medium", n=64, m=1024, runs=16, steps=200),
    Case("ntk-large", n=256, m=4096, runs=4, steps=2000),
    Case("width-grid", n=0, m=0, runs=300, steps=300, grid=True),
]
# The large sweep's widest shape (sdyn/sweeps/ntk_width_large.yaml: n 1024, widths up to 65536,
# 5 seeds), run only when --cases names it: on a CPU its naive loop alone takes minutes.
WIDEST = Case("ntk-widest", n=1024, m=65536, runs=5, steps=40)


def make_runs(case: Case, dtype: str) -> list[Run]:
    cfg = ntk.NTKConfig(d=case.d, steps=case.steps, eps=1e-12, record_points=2, dtype=dtype)
    if case.grid:
        return expand(cfg, ntk.SphereData(d=case.d), ntk.WidthGrid())
    cfg = replace(cfg, n=case.n, m=case.m)
    return [Run(replace(cfg), ntk.SphereData(d=case.d), seed) for seed in range(case.runs)]


def devices_of(experiment, runs: list[Run], policy: str) -> list[str]:
    """The device the sweep's ``cluster.device=policy`` gives each run on this machine."""
    gpus = torch.cuda.device_count()
    limit = experiment.gpu_footprint
    return [choose_device(policy, experiment.footprint(r), limit, gpus) for r in runs]


def gpu_card():
    """The data sheet (``sdyn.engine.cost.CARDS``) of this machine's GPU, or None."""
    # Imported here: a --production-of subprocess runs this file on a baseline's sdyn, which
    # may have no cost.CARDS.
    from sdyn.engine import cost

    return cost.card(torch.cuda.get_device_name())


def peak_flops(device: str, dtype: str) -> tuple[float | None, str]:
    """The device's peak FLOP/s in ``dtype`` and how it was found.

    GPUs: :func:`gpu_card`'s data sheet (None for a model not listed). CPUs: an estimate,
    cores x current clock (``cpu MHz`` of /proc/cpuinfo) x FLOP per cycle and core: two FMA
    pipes of 256 bits (16 FP64, 32 FP32), which AVX-512 parts with two full 512-bit pipes
    double (so it may understate them); on a shared VM the cores may be SMT threads.
    """
    if device == "cuda":
        card = gpu_card()
        if card is None:
            return None, f"unknown ({torch.cuda.get_device_name()} not in cost.CARDS)"
        return card.flops[dtype], f"{card.model} data sheet"
    try:
        mhz = next(
            float(line.split(":")[1])
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("cpu MHz")
        )
    except (OSError, StopIteration):
        return None, "unknown (no /proc/cpuinfo clock)"
    per_cycle = 16 if dtype == "float64" else 32
    cores = os.cpu_count()
    how = f"estimate: {cores} cores x {mhz:.0f} MHz x {per_cycle} FLOP/cycle (2 x 256-bit FMA)"
    return cores * mhz * 1e6 * per_cycle, how


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


def planned(experiment, runs: list[Run], policy: str) -> tuple[list[list[Run]], list[str]]:
    """The runs' bundles and their devices, as the sweep plans them (its packing on a GPU)."""
    device = dict(zip(map(id, runs), devices_of(experiment, runs, policy), strict=True))
    return plan(
        runs,
        experiment.shape_key,
        experiment.footprint,
        lambda r: device[id(r)],
        0,
        experiment.bundle_key,
    )


def production(experiment, runs: list[Run], policy: str) -> float:
    """Seconds for the runs trained as the sweep plans them: its devices, bundles and packing."""
    bundles, devices = planned(experiment, runs, policy)
    start = time.perf_counter()
    for bundle, dev in zip(bundles, devices, strict=True):
        experiment.train(bundle, dev)
    if "cuda" in devices:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def naive_attention(runs: list[Run], device: str) -> None:
    """``attention_regression``'s Algorithm 1 (``alg1``, full batch), one run at a time, each a
    Python loop of eager autograd steps: loss (Eq. 1) plus the regulariser, backward, then
    ``V -= lr grad_V`` and ``K -= lr Sigma_hat^-p grad_K`` from the spectral initialisation."""
    for run in runs:
        cfg = run.experiment
        X, Y = (t.to(device) for t in attention_regression.make_data(cfg, run.data, run.seed))
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


def naive_implicit(runs: list[Run], device: str) -> None:
    """``implicit_bias``'s normalised GD (``ngd``, fixed decoder), one run at a time, each a Python
    loop of eager autograd steps on W (d x d): exponential loss, backward, ``W -= eta g/||g||``."""
    for run in runs:
        cfg = run.experiment
        data = implicit_bias.make_data(cfg, run.data, run.seed)
        X, y, decoder = (t.to(device) for t in (data.X, data.y, data.decoder))
        d = X.shape[-1]
        generator = torch.Generator().manual_seed(run.seed)
        W = torch.randn(d, d, generator=generator, dtype=torch.float64).to(device)
        W = (cfg.init_scale * W / W.norm()).requires_grad_(True)
        for _ in range(cfg.steps):
            out = implicit_bias.forward(W, decoder, X)
            torch.exp(-y * out).mean().backward()
            with torch.no_grad():
                W -= cfg.eta_ngd * W.grad / W.grad.norm()
            W.grad = None
    if device == "cuda":
        torch.cuda.synchronize()


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
    naive: Callable[[list[Run], str], None]
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


def measure_trainer(case: TrainerCase, policy: str, repeats: int) -> dict:
    experiment = plugins.get(case.experiment)
    cfg = replace(experiment.config(), record_points=2, **case.overrides)
    data = experiment.data[experiment.default_data]()
    runs = [Run(cfg, data, seed) for seed in range(case.runs)]
    (device,) = set(devices_of(experiment, runs, policy))  # one shape: one device

    def naive() -> float:
        start = time.perf_counter()
        case.naive(runs[: case.naive_runs], device)
        return time.perf_counter() - start

    production(experiment, runs, policy)  # warm-up
    t_naive, naive_threads = fastest_naive(naive, repeats)
    t_bundle = statistics.median(production(experiment, runs, policy) for _ in range(repeats))
    naive_rate = case.naive_runs * cfg.steps / t_naive
    prod_rate = case.runs * cfg.steps / t_bundle
    return {
        "case": case.name,
        "experiment": case.experiment,
        "devices": {device: case.runs},
        "dtype": getattr(cfg, "dtype", "float64"),  # --dtype applies to the NTK cases
        "runs": case.runs,
        "steps": cfg.steps,
        "naive_runs_timed": case.naive_runs,
        "naive_threads": naive_threads,
        "naive_model_steps_per_s": naive_rate,
        "production_model_steps_per_s": prod_rate,
        "speedup": prod_rate / naive_rate,
    }


def with_steps(runs: list[Run], steps: int) -> list[Run]:
    return [replace(r, experiment=replace(r.experiment, steps=steps)) for r in runs]


def production_median(runs: list[Run], policy: str, repeats: int) -> float:
    """Median seconds of :func:`production` after one warm-up (compilation, allocator)."""
    production(NTK, runs, policy)
    return statistics.median(production(NTK, runs, policy) for _ in range(repeats))


def baseline_seconds(tree: Path, case: Case, args: argparse.Namespace) -> float:
    """Median seconds of ``case``'s production path with the ``sdyn`` package in ``tree``: this
    script (``--production-of``) in a subprocess whose PYTHONPATH starts with ``tree``.

    Raises:
        SystemExit: the subprocess failed, or imported another sdyn than ``tree``'s.
    """
    inherited = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    paths = [str(tree), *(p for p in inherited if p and Path(p).resolve() != record.REPO)]
    command = [sys.executable, __file__, "--production-of", case.name, "--device", args.device]
    command += ["--dtype", args.dtype, "--threads", str(args.threads)] + ["--quick"] * args.quick
    env = os.environ | {"PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"throughput.py: the baseline failed on {case.name}:\n{done.stderr}")
    result = json.loads(done.stdout.splitlines()[-1])
    if not Path(result["sdyn"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"throughput.py: the baseline loaded {result['sdyn']}, not {tree}'s")
    return result["seconds"]


def measure(case: Case, args: argparse.Namespace, baseline: Path | None, repeats: int) -> dict:
    policy, dtype = args.device, args.dtype
    runs = make_runs(case, dtype)
    devices = devices_of(NTK, runs, policy)
    # The naive loop at the largest shapes costs minutes per repeat: time it on a subset of
    # runs (its per-run cost does not depend on how many runs there are) and scale.
    if case.grid:  # one seed per shape, each on its run's device
        naive_idx = [k for k, r in enumerate(runs) if r.seed == 0]
    else:
        naive_idx = list(range(max(2, min(case.runs, 8))))
    scale = len(runs) / len(naive_idx)

    def naive_time() -> float:
        return sum(naive([runs[k]], devices[k]) for k in naive_idx)

    naive([runs[0]], devices[0])  # warm-up
    t_naive, naive_threads = fastest_naive(naive_time, repeats)
    t_prod = production_median(runs, policy, repeats)
    # Twice the steps: the difference is the steps' time alone (set-up and records excluded).
    t_steps = production_median(with_steps(runs, 2 * case.steps), policy, repeats) - t_prod
    resolved = t_steps > 0  # else the steps took less than the timings' noise
    flops, nbytes = step_work(runs, policy, case.steps)
    model_steps = len(runs) * case.steps
    r = {
        "case": case.name,
        "n": case.n or "8-128",
        "m": case.m or "2-4096",
        "devices": {d: devices.count(d) for d in sorted(set(devices))},
        "runs": len(runs),
        "steps": case.steps,
        "naive_runs_timed": len(naive_idx),
        "naive_threads": naive_threads,
        "naive_model_steps_per_s": model_steps / (t_naive * scale),
        "production_model_steps_per_s": model_steps / t_prod,
        "speedup": t_naive * scale / t_prod,
        "flops_per_model_step": flops / model_steps,
        "bytes_per_model_step": nbytes / model_steps,
        "naive_gflops": flops / (t_naive * scale) / 1e9,
        "production_gflops": flops / t_prod / 1e9,
        "steps_s": t_steps if resolved else None,
        "steps_gflops": flops / t_steps / 1e9 if resolved else None,
        "steps_gbytes_per_s": nbytes / t_steps / 1e9 if resolved else None,
    }
    if baseline is not None:
        t_base = baseline_seconds(baseline, case, args)
        r["baseline_model_steps_per_s"] = model_steps / t_base
        r["speedup_vs_baseline"] = t_base / t_prod
    if "cuda" in devices:
        r["host_cpu_model_steps_per_s"] = model_steps / production_median(runs, "cpu", repeats)
    card = gpu_card() if devices == ["cuda"] * len(runs) else None
    if card is not None and resolved:
        r |= binding_limit(card, flops, nbytes, t_steps)
    return r


def step_work(runs: list[Run], policy: str, steps: int, cost=None) -> tuple[float, float]:
    """FLOP and bytes of ``steps`` iterations of the runs' bundles as the sweep plans them
    (``cost(bundle)``, per iteration of each bundle, padding included; None: ``ntk.step_cost``,
    looked up only when called: a --production-of run imports this file on a baseline's sdyn,
    which may have none)."""
    bundles, _ = planned(NTK, runs, policy)
    costs = [(cost or NTK.step_cost)(bundle) for bundle in bundles]
    return steps * sum(f for f, _ in costs), steps * sum(b for _, b in costs)


def binding_limit(card, flops: float, nbytes: float, seconds: float) -> dict:
    """Which of ``card``'s data-sheet limits binds ``flops`` FLOP and ``nbytes`` bytes (FP64 rate
    or memory bandwidth: the longer time), and the percent of it that ``seconds`` reach."""
    floors = {"fp64": flops / card.flops["float64"], "bandwidth": nbytes / card.bandwidth}
    limit = max(floors, key=floors.get)
    return {"binding_limit": limit, "percent_of_binding_limit": 100 * floors[limit] / seconds}


def cell(value, form: str) -> str:
    return "-" if value is None else format(value, form)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="the cluster.device policy that places each case (default auto, as a sweep)",
    )
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    parser.add_argument("--quick", action="store_true", help="1 repeat instead of 3")
    parser.add_argument(
        "--threads",
        type=int,
        default=torch.get_num_threads(),
        help="threads for both paths (default: torch's, one per core); the naive loop's torch ops "
        "and the C++ GD loop (which shares a bundle's runs among them) both use them",
    )
    names = [c.name for c in (*CASES, WIDEST, *TRAINER_CASES)]
    parser.add_argument(
        "--cases",
        help=f"comma-separated cases (default: all but {WIDEST.name}); of {', '.join(names)}",
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also time the NTK cases with the sdyn package in DIR (e.g. .whl/baseline)",
    )
    parser.add_argument("--production-of", metavar="CASE", help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", help="the results file (default: a new one under benchmarks/results/throughput/)"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    chosen = args.cases.split(",") if args.cases else [n for n in names if n != WIDEST.name]
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        parser.error(f"unknown cases {', '.join(unknown)}; the cases are {', '.join(names)}")
    baseline = Path(args.baseline) if args.baseline else None
    if baseline is not None and not (baseline / "sdyn" / "__init__.py").is_file():
        parser.error(f"--baseline {baseline}: no sdyn package there")
    ntk_cases = [c for c in (*CASES, WIDEST) if c.name in chosen]
    repeats = 1 if args.quick else 3
    if args.production_of:  # a --baseline subprocess: one case's production path, as JSON
        (case,) = [c for c in (*CASES, WIDEST) if c.name == args.production_of]
        seconds = production_median(make_runs(case, args.dtype), args.device, repeats)
        print(json.dumps({"seconds": seconds, "sdyn": sdyn.__file__}))
        return
    present = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)
    peaks = {dev: peak_flops(dev, args.dtype) for dev in present}
    names_of = {"cpu": "{cpu}, {cores} cores".format(**record.machine())} | (
        {"cuda": torch.cuda.get_device_name()} if "cuda" in peaks else {}
    )
    card = gpu_card() if "cuda" in peaks else None
    print(
        f"policy {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{args.dtype}, median of {repeats}" + (f", baseline {baseline}" if baseline else "")
    )
    for dev, (peak, how) in peaks.items():
        shown = f"{peak / 1e9:.0f} GFLOP/s" if peak else "unknown"
        print(f"  {dev}: {names_of[dev]}; {args.dtype} peak {shown} ({how})")
    if card is not None:
        print(
            f"  cuda: {card.bandwidth / 1e12:.2f} TB/s memory bandwidth ({card.model} data sheet)"
        )
    header = f"{'case':<12} {'device':>10} {'runs':>4} {'naive (threads)':>16} "
    header += f"{'baseline':>9} {'batched':>9} {'host cpu':>9} {'x naive':>8} {'x base':>7} "
    header += f"{'GFLOP/s':>8} {'% peak':>7} {'step GB/s':>9} {'% limit':>13}"
    print("model-steps/s; GFLOP/s and % of the FLOP peak: the batched path, set-up included;")
    print("step GB/s and % of the binding limit: its steps alone (on a listed GPU)")
    print(header)
    results = []
    for case in ntk_cases:
        r = measure(case, args, baseline, repeats)
        # A case split over devices has no one peak; every NTK case here runs on one.
        where = next(iter(r["devices"])) if len(r["devices"]) == 1 else None
        peak = peaks[where][0] if where else None
        r["percent_of_peak"] = 100 * r["production_gflops"] * 1e9 / peak if peak else None
        results.append(r)
        devices = "+".join(f"{c} {d}" for d, c in r["devices"].items())
        vs_base = r.get("speedup_vs_baseline")
        vs_base = f"{vs_base:.1f}x" if vs_base else "-"
        limit = r.get("percent_of_binding_limit")
        limit = f"{limit:.1f} ({r['binding_limit']})" if limit is not None else "-"
        print(
            f"{r['case']:<12} {devices:>10} {r['runs']:>4} "
            f"{r['naive_model_steps_per_s']:>12.0f} ({r['naive_threads']}) "
            f"{cell(r.get('baseline_model_steps_per_s'), '9.0f'):>9} "
            f"{r['production_model_steps_per_s']:>9.0f} "
            f"{cell(r.get('host_cpu_model_steps_per_s'), '9.0f'):>9} "
            f"{r['speedup']:>7.1f}x {vs_base:>7} "
            f"{r['production_gflops']:>8.2f} {cell(r['percent_of_peak'], '.1f'):>7} "
            f"{cell(r['steps_gbytes_per_s'], '9.1f'):>9} {limit:>13}",
            flush=True,
        )
    for case in TRAINER_CASES:
        if case.name not in chosen:
            continue
        r = measure_trainer(case, args.device, repeats)
        results.append(r)
        (device,) = r["devices"]
        print(
            f"{r['case']:<12} {device:>10} {r['runs']:>4} "
            f"{r['naive_model_steps_per_s']:>12.0f} ({r['naive_threads']}) {'-':>9} "
            f"{r['production_model_steps_per_s']:>9.0f} {'-':>9} "
            f"{r['speedup']:>7.1f}x  ({r['dtype']})",
            flush=True,
        )
    figures = {
        "policy": args.device,
        "devices": {
            dev: {"name": names_of[dev], "peak_flops": peak, "peak_source": how}
            | ({"bandwidth": card.bandwidth} if dev == "cuda" and card else {})
            for dev, (peak, how) in peaks.items()
        },
        "dtype": args.dtype,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "cases": results,
    }
    if baseline is not None:
        commit = baseline / "COMMIT"
        figures["baseline"] = {
            "tree": str(baseline),
            "commit": commit.read_text().strip() if commit.is_file() else None,
        }
    print(f"wrote {record.write('throughput', figures, args.out)}")


if __name__ == "__main__":
    main()
