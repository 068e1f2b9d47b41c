"""Which NTK runs share a bundle, and where it trains: shape and pack keys, the footprint that
sizes bundles and picks the device, and what one step of a bundle costs on a GPU. Config
arithmetic, no torch."""

from __future__ import annotations

import math
import os

from sdyn.api import Run

# Neurons per program of the fused step's first kernel (fused.Blocks.segment's default): each
# writes its partial sums per point.
FUSED_SEGMENT = 512


def shape_key(run: Run) -> tuple:
    """Runs with equal keys have equal tensor shapes and can share one batched step."""
    return (run.experiment.n, run.experiment.m, *step_key(run))


def step_key(run: Run) -> tuple:
    """Runs with equal keys can share one packed step (:class:`Pack`): all but n and m equal."""
    cfg = run.experiment
    d = cfg.d if cfg.d is not None else run.data.d
    return (d, cfg.d_out, cfg.activation, cfg.steps, cfg.record_points, cfg.dtype)


# A packed bundle pads every run to its largest n and m. Packing only runs whose n and m are in
# the same power-of-PACK_RATIO class bounds that waste to PACK_RATIO-fold per axis: padding a
# 120-run part of the width grid (n 8-32, m 2-256) into one bundle did 7x the work of its
# shape-exact bundles (eager PyTorch step on the CPU, 22.2 s against 4.4 s).
PACK_RATIO = 4


def pack_key(run: Run) -> tuple:
    """Runs with equal keys are packed into one GPU bundle (:class:`Pack`): one step key, and n
    and m each in one power-of-:data:`PACK_RATIO` class."""
    n, m = run.experiment.n, run.experiment.m
    classes = (math.floor(math.log(x, PACK_RATIO) + 1e-9) for x in (n, m))  # [4^k, 4^(k+1))
    return (*classes, *step_key(run))


# cluster.device=auto sends runs whose footprint (bytes of the (n, m) activations) is at least
# this to GPU workers when the cluster has GPUs: n m >= 32768 in float64, e.g. n = 64, m = 512.
# Below it the C++ CPU kernel's bundle takes milliseconds. A guess: no GPU was available to
# measure the crossover.
GPU_FOOTPRINT = 1 << 18


def footprint(run: Run) -> int:
    """Bytes of the largest per-run tensor of a step (the ``(n, m)`` softmax activations)."""
    cfg = run.experiment
    return cfg.n * cfg.m * cfg.d_out * (8 if cfg.dtype == "float64" else 4)


def fused_selected() -> bool:
    """Whether ``SDYN_FUSED=1`` is set: on a GPU, each iteration is then fused.py's four Triton
    kernels, which recompute the logits instead of storing them (descent.py trains so;
    :func:`step_cost` prices that step). Off by default until it is measured on a GPU: it is
    checked against gd_iteration under Triton's CPU interpreter only."""
    return os.environ.get("SDYN_FUSED", "0") == "1"


def step_cost(runs: list[Run]) -> tuple[float, float]:
    """FLOP and bytes of device memory traffic of one iteration of a bundle's step on a GPU:
    :func:`fused_step_cost` where :func:`fused_selected`, else :func:`compiled_step_cost`.
    What ``--plan`` prices a GPU bundle by (:func:`sdyn.engine.cost.gpu_seconds`)."""
    return fused_step_cost(runs) if fused_selected() else compiled_step_cost(runs)


def compiled_step_cost(runs: list[Run]) -> tuple[float, float]:
    """FLOP and bytes of device memory traffic of one iteration of a bundle's batched GD step
    (:func:`~.descent.gd_iteration`, compiled), every run padded to the bundle's largest n and
    m as a packed bundle is (:class:`~.network.Pack`).

    Per run, with d inputs and d_out outputs: FLOP ``4nmd`` (the products ``Z = X W`` and
    ``X^T G``), ``4nm d_out`` (``F = m S a^T`` and ``R a``) and ``10nm`` (softmax and the
    gradient's elementwise terms). Bytes: a step that writes the logits Z and the gradient
    factor G, each ``(n, m)``, once and reads each once, with the elementwise work between the
    two products fused (as torch.compile fuses it), ``4nm``, plus reading W, a, X, Y and
    writing W once; times the dtype's size. The bytes are the floor of that structure, not of
    the step: a kernel that never writes Z or G moves only the inputs (:func:`fused_step_cost`).
    """
    n, m, d, d_out, itemsize = padded_shape(runs)
    flops = 4 * n * m * d + 4 * n * m * d_out + 10 * n * m
    elements = 4 * n * m + 2 * d * m + d_out * m + n * d + n * d_out
    return len(runs) * float(flops), len(runs) * float(elements * itemsize)


def fused_step_cost(runs: list[Run], segment: int = FUSED_SEGMENT) -> tuple[float, float]:
    """FLOP and bytes of device memory traffic of one iteration of fused.py's step for a bundle,
    each run at its own n and m: its kernels skip the blocks of points and neurons past a run's
    n and m (the padding inside a block is not counted). ``segment``: neurons per program of
    its first kernel (fused.Blocks.segment).

    FLOP per run: ``6nmd`` (``Z = X W`` in two kernels and ``X^T G``), ``4nm d_out + 2nm`` (the
    outputs with the softmax's sums, and ``sum_l R_l a_l``) and ``12nm`` (two exponentials and
    the elementwise terms). Bytes: W, a and X read by two kernels and W written, Y read, and
    the partials (``2 + d_out`` per point and segment: maximum, sum and outputs) written once
    and read once; times the dtype's size. No ``(n, m)`` array is stored.
    """
    flops = elements = 0
    for run in runs:
        n, m, d, d_out, itemsize = padded_shape([run])
        partials = n * -(-m // segment) * (2 + d_out)
        flops += 6 * n * m * d + 4 * n * m * d_out + 12 * n * m
        elements += 3 * d * m + 2 * d_out * m + 2 * n * d + n * d_out + 2 * partials
    return float(flops), float(elements * itemsize)


def padded_shape(runs: list[Run]) -> tuple[int, int, int, int, int]:
    """``(n, m, d, d_out, itemsize)`` of a bundle's step: its largest n and m (every run padded
    to them, as :class:`~.network.Pack` pads), input and output dimensions, and the bytes of
    one number in its dtype."""
    cfg = runs[0].experiment
    d = cfg.d if cfg.d is not None else runs[0].data.d
    n = max(r.experiment.n for r in runs)
    m = max(r.experiment.m for r in runs)
    return n, m, d, cfg.d_out, 8 if cfg.dtype == "float64" else 4
