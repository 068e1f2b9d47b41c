"""What a sweep will cost, before it runs: a cost model measured on the spot by a tiny probe.

    model = measure("ntk", smallest_run, largest_run)    # ~seconds: short trainings
    model.seconds(footprint, steps), model.memory(footprint_of_a_bundle)

The model: a run of ``steps`` GD steps whose largest per-run tensor takes ``footprint`` bytes
(the experiment's ``footprint``) trains in ``per_run_s + footprint (per_byte_s + per_byte_step_s
steps)`` seconds on one CPU thread, and a worker training a bundle of runs holds ``base_rss +
rss_per_byte * sum(footprint)`` bytes resident. The probe trains, in a fresh process on one
thread as a Ray task does, the plan's smallest run and its largest run (the largest of at most
:data:`PROBE_FOOTPRINT`: larger ones are extrapolated by the model) for ``p`` steps (``p =
min(PROBE_STEPS, steps / 2)``, fewer in proportion for a run beyond :data:`PROBE_FOOTPRINT`,
which a plan of only such runs probes), and the largest again for ``p`` and ``5 p`` steps
(:data:`PROBE_LONGER`, at most its budget) recording only its first and last (an experiment's
``record_points``): the difference prices a step without the records a short run crowds in (at n
1024, m 2048 a record costs about 30 steps on 2 Xeon cores, and at 100 record points 200 steps
record 8 more times than 100, 500 steps 16). Each timing is the fastest of
:data:`PROBE_REPEATS`, each run made to train its whole budget (the experiment's
``full_budget``). The memory model is the line through the process's peak resident size
(:func:`_peak_rss`) after the smallest run and after the largest; where those are one run (a plan
of one shape, or of only runs beyond :data:`PROBE_FOOTPRINT`), after it and after a bundle of
two of it. The plan prices each run at the step its experiment forecasts it stops at
(``steps_forecast``; NTK runs stop once they fit), else at its whole budget.

On a GPU nothing is probed (the planning machine may have none): :func:`gpu_seconds` is a
data-sheet estimate from what one iteration of a bundle's step does (FLOP and bytes of memory
traffic, the experiment's ``step_cost``) against a card's data-sheet FP64 rate and memory
bandwidth (:data:`CARDS`), at the share of them a step was measured to reach, with a floor
per iteration (:data:`GPU_LIMIT_SHARE`, :data:`GPU_ITERATION_S`, both from one H100). It stays
an estimate until a sweep on that card measures it.
"""

from __future__ import annotations

import dataclasses
import itertools
import multiprocessing
import resource
import sys
import time
import timeit
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

PROBE_STEPS = 100
# The probe prices a step by the largest run at PROBE_STEPS and this many times as many steps:
# the difference must outweigh the machine's noise (at 2x it swung 2.3-4.2 ms a step on 2 Xeon
# cores, at 5x 3.1-4.9).
PROBE_LONGER = 5
# Each probe training is timed this many times and the fastest kept (timeit's rule: slower
# repeats measure other processes). One timing let a context switch on a busy machine make
# 2p steps as fast as p, pricing a step at nothing.
PROBE_REPEATS = 3
# The largest footprint the probe trains (n 1024, m 2048 in float64 for the NTK): a plan's
# larger runs would make the probe itself take minutes.
PROBE_FOOTPRINT = 16 << 20


@dataclass(frozen=True)
class Card:
    """A GPU's data-sheet ceilings: FLOP/s by dtype (dense; FP64 on the tensor cores where the
    part has them, FP32 without TF32) and memory bandwidth (bytes/s). ``model``: the part of
    ``torch.cuda.get_device_name()`` that names it."""

    model: str
    flops: dict[str, float]
    bandwidth: float


# Vendor data sheets (NVIDIA): H100 Tensor Core GPU (SXM5 80 GB: FP64 tensor core 67 TFLOP/s,
# 3.35 TB/s; PCIe 80 GB: 51 TFLOP/s, 2.0 TB/s; NVL: 60 TFLOP/s, 3.9 TB/s), H200 Tensor Core GPU
# (SXM 141 GB: 67 TFLOP/s, 4.8 TB/s), A100 Tensor Core GPU (SXM 80 GB: 19.5 TFLOP/s,
# 2.039 TB/s), L4 (FP64 0.47, FP32 30.3 TFLOP/s, 300 GB/s). Matched in this order (the first
# model the device's name contains), so "H100 PCIe" is found before "H100".
CARDS = (
    Card("H100 PCIe", {"float64": 51e12, "float32": 51e12}, 2.0e12),
    Card("H100 NVL", {"float64": 60e12, "float32": 60e12}, 3.9e12),
    Card("H100", {"float64": 67e12, "float32": 67e12}, 3.35e12),
    Card("H200", {"float64": 67e12, "float32": 67e12}, 4.8e12),
    Card("A100", {"float64": 19.5e12, "float32": 19.5e12}, 2.039e12),
    Card("L4", {"float64": 0.47e12, "float32": 30.3e12}, 0.3e12),
)
# What a GPU step reaches, measured on one H100 (benchmarks/graph_step.py, float64, the
# CUDA-graph step): its iterations moved their bytes at 29% of the data-sheet bandwidth at
# n 256, m 4096 x 4 runs (0.14 ms an iteration) and at 26% at n 1024, m 65536 x 5 (31% for the
# compiled step). An iteration takes at least that 0.14 ms here: the floor of the smallest
# shapes is lower, and not measured yet.
GPU_LIMIT_SHARE = 0.3
GPU_ITERATION_S = 1.4e-4


def card(name: str) -> Card | None:
    """The :data:`CARDS` entry of a device named ``name`` (``torch.cuda.get_device_name()``),
    or None for a model not listed."""
    return next((c for c in CARDS if c.model in name), None)


def gpu_seconds(card: Card, flops: float, nbytes: float, iterations: int) -> float:
    """Data-sheet estimate of the seconds of ``iterations`` iterations of a bundle's step that
    does ``flops`` FLOP and moves ``nbytes`` bytes per iteration on ``card``: each takes the
    longer of :data:`GPU_ITERATION_S` and the time of whichever binds, the FLOP at the card's
    FP64 rate (an upper bound for float32 steps) or the bytes at its memory bandwidth, at the
    share :data:`GPU_LIMIT_SHARE` of it that a step reaches."""
    bound = max(flops / card.flops["float64"], nbytes / card.bandwidth) / GPU_LIMIT_SHARE
    return iterations * max(GPU_ITERATION_S, bound)


@dataclass(frozen=True)
class CostModel:
    """Seconds and resident bytes of training (see the module docstring); ``probe_s``: how long
    the probe took, wall seconds."""

    per_run_s: float
    per_byte_s: float
    per_byte_step_s: float
    base_rss: float
    rss_per_byte: float
    probe_s: float

    def seconds(self, footprint: int, steps: int) -> float:
        """Estimated seconds for one run on one CPU thread."""
        return self.per_run_s + footprint * (self.per_byte_s + self.per_byte_step_s * steps)

    def memory(self, footprint: int) -> float:
        """Estimated peak resident bytes of a worker training runs of ``footprint`` bytes (the
        sum over a bundle's runs)."""
        return self.base_rss + self.rss_per_byte * footprint


def _peak_rss() -> float:
    """This process's peak resident bytes: on Linux ``VmHWM``, the peak of this process image.
    (``getrusage``'s ``ru_maxrss`` keeps the peak from before ``exec``: a spawned probe reads
    its parent's size at the fork, 816 MiB for a probe of 16 MiB under an 800 MiB parent.)"""
    try:
        with open("/proc/self/status") as status:
            return next(float(line.split()[1]) * 1024 for line in status if line[:6] == "VmHWM:")
    except (OSError, StopIteration):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return float(peak) if sys.platform == "darwin" else peak * 1024.0  # bytes there, else KiB


def budget(run: Any) -> int:
    """GD steps in ``run``'s budget: its experiment's ``steps``; 1 for an experiment with no
    ``steps`` field (a plugin's), whose run the model then times whole, as one step."""
    return getattr(run.experiment, "steps", 1)


def _probe(experiment: str, small: Any, large: Any, steps: int, longer: int) -> dict[str, float]:
    """In a fresh process: train ``small`` and ``large`` at ``steps`` (once where they are the
    same run), and ``large`` at ``steps`` and ``longer`` steps recording twice (where its config
    has ``record_points``); seconds of each (the fastest of :data:`PROBE_REPEATS`; the first
    trainings also compile and load) and the peak resident bytes after ``small`` and after
    ``large`` (where they are the same run, after a bundle of two of it). An experiment with no
    ``steps`` field trains its runs as planned, ``large`` at one length."""
    import torch

    from sdyn import plugins

    torch.set_num_threads(1)  # as dispatch runs a task: one intra-op thread per CPU
    train = plugins.get(experiment).train
    # A run that stops early would time its stopping, not its steps.
    full_budget = plugins.get(experiment).full_budget or (lambda run: run)
    small, large = full_budget(small), full_budget(large)

    stepped = hasattr(large.experiment, "steps")

    def at(run, k: int, sparse: bool = False):
        if not stepped:
            return run
        fields = {"steps": k}
        if sparse and hasattr(run.experiment, "record_points"):
            fields["record_points"] = 2
        return dataclasses.replace(run, experiment=dataclasses.replace(run.experiment, **fields))

    try:  # a config whose own checks refuse the probe's step counts (warmup < steps): whole
        for run, k, sparse in itertools.product((small, large), (steps, longer), (False, True)):
            at(run, k, sparse)
    except ValueError:
        stepped = False

    def timed(run, k: int, sparse: bool = False) -> float:
        run = at(run, k, sparse)
        return min(timeit.repeat(lambda: train([run], "cpu"), repeat=PROBE_REPEATS, number=1))

    out = {"small": timed(small, steps), "rss_1": _peak_rss()}
    if large == small:  # one run probed: a bundle of two of it shows what a run adds
        out["large"] = out["small"]
        train([at(large, steps)] * 2, "cpu")
    else:
        out["large"] = timed(large, steps)
    out["rss_2"] = _peak_rss()
    if stepped:
        out["sparse_1"], out["sparse_2"] = timed(large, steps, True), timed(large, longer, True)
    else:
        out["sparse_1"] = out["sparse_2"] = out["large"]
    return out


def probe_runs(runs: list[Any], footprint) -> tuple[Any, Any]:
    """The probe's ``(small, large)`` of ``runs`` (``footprint(run)``: bytes): the smallest, and
    the largest of at most :data:`PROBE_FOOTPRINT` (the smallest if none is)."""
    by_size = sorted(runs, key=footprint)
    fits = [run for run in by_size if footprint(run) <= PROBE_FOOTPRINT]
    return by_size[0], fits[-1] if fits else by_size[0]


def measure(experiment: str, small: Any, large: Any, footprint) -> CostModel:
    """Probe ``experiment`` with its plan's smallest and largest runs (``footprint(run)``:
    bytes of the largest per-run tensor) and fit the cost model. Runs in a spawned process, so
    neither this process's state nor its peak memory enters the measurement."""
    f_small, f_large = footprint(small), footprint(large)
    # A plan of only runs beyond PROBE_FOOTPRINT probes one: as few steps as keep its work at
    # PROBE_STEPS of PROBE_FOOTPRINT (at n 1024, m 65,536: past 10 min at 100 steps, 100 s at 3).
    scaled = PROBE_STEPS * PROBE_FOOTPRINT // max(f_large, PROBE_FOOTPRINT)
    steps = max(1, min(scaled, budget(large) // 2))
    longer = max(2 * steps, min(PROBE_LONGER * steps, budget(large)))
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        t = pool.submit(_probe, experiment, small, large, steps, longer).result()
    per_byte_step = max(t["sparse_2"] - t["sparse_1"], 0.0) / ((longer - steps) * f_large)
    if f_large > f_small:  # the fixed part (records included) splits into per run and per byte
        per_step = per_byte_step * steps
        per_byte = max((t["large"] - t["small"]) / (f_large - f_small) - per_step, 0.0)
    else:
        per_byte = 0.0
    per_run = max(t["small"] - f_small * (per_byte + per_byte_step * steps), 0.0)
    # Peak memory at two footprints (one run of each, or one run and a bundle of two of it).
    f_1, f_2 = (f_large, 2 * f_large) if f_large == f_small else (f_small, f_large)
    rss_per_byte = max(t["rss_2"] - t["rss_1"], 0.0) / (f_2 - f_1)
    base_rss = max(t["rss_1"] - rss_per_byte * f_1, 0.0)
    return CostModel(
        per_run, per_byte, per_byte_step, base_rss, rss_per_byte, time.perf_counter() - started
    )
