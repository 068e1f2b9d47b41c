"""Which score runs share a bundle, and where it trains: the shape key, and the footprint
that sizes bundles and picks the device. Config arithmetic, no torch."""

from __future__ import annotations

from sdyn.api import Run


def shape_key(run: Run) -> tuple:
    """Runs with equal keys share tensor shapes and the forward process, so one batched loop."""
    c = run.experiment
    return (
        c.n, c.m, c.steps, c.n_eval, c.n_coupling, c.n_samples, c.sampler_steps, c.record_points,
        c.dtype, c.schedule, c.beta_min, c.beta_max, c.beta, c.T, c.T0, c.weighting,
        c.time_sampling, c.input_scale, c.input_bias, run.data.d,
    )  # fmt: skip


# cluster.device=auto: runs of at least this footprint train on GPU workers when the cluster has
# GPUs (every default score run: the held-out evaluation alone is (4000, m) per run). A guess,
# as for the NTK experiment's: no GPU was available to measure the crossover.
GPU_FOOTPRINT = 1 << 18


def footprint(run: Run) -> int:
    """Bytes of the largest per-run tensor: the Jacobian features ``(n d, (d + 2) m)`` or the
    ``(points, m)`` softmax activations."""
    c, d = run.experiment, run.data.d
    points = max(c.n * (d + 2), c.n_eval, c.n_samples) * d
    return points * c.m * (8 if c.dtype == "float64" else 4)
