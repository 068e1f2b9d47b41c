"""Which NTK runs share a bundle, and where it trains: shape and pack keys, the footprint that
sizes bundles and picks the device, and what one step of a bundle costs. Config arithmetic, no
torch."""

from __future__ import annotations

import math

from sdyn.api import Run


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


def step_cost(runs: list[Run]) -> tuple[float, float]:
    """FLOP and bytes of device memory traffic of one iteration of a bundle's batched GD step
    (:func:`~.descent.gd_iteration`), every run padded to the bundle's largest n and m as a
    packed bundle is (:class:`~.network.Pack`).

    Per run, with d inputs and d_out outputs: FLOP ``4nmd`` (the products ``Z = X W`` and
    ``X^T G``), ``4nm d_out`` (``F = m S a^T`` and ``R a``) and ``10nm`` (softmax and the
    gradient's elementwise terms). Bytes: a step that writes the logits Z and the gradient
    factor G, each ``(n, m)``, once and reads each once, with the elementwise work between the
    two products fused (as torch.compile fuses it), ``4nm``, plus reading W, a, X, Y and
    writing W once; times the dtype's size. The bytes are the floor of that structure, not of
    the step: a kernel that never writes Z or G moves only the inputs.
    """
    n, m, d, d_out, itemsize = padded_shape(runs)
    flops = 4 * n * m * d + 4 * n * m * d_out + 10 * n * m
    elements = 4 * n * m + 2 * d * m + d_out * m + n * d + n * d_out
    return len(runs) * float(flops), len(runs) * float(elements * itemsize)


def padded_shape(runs: list[Run]) -> tuple[int, int, int, int, int]:
    """``(n, m, d, d_out, itemsize)`` of a bundle's step: its largest n and m (every run padded
    to them, as :class:`~.network.Pack` pads), input and output dimensions, and the bytes of
    one number in its dtype."""
    cfg = runs[0].experiment
    d = cfg.d if cfg.d is not None else runs[0].data.d
    n = max(r.experiment.n for r in runs)
    m = max(r.experiment.m for r in runs)
    return n, m, d, cfg.d_out, 8 if cfg.dtype == "float64" else 4
