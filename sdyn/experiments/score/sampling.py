"""Reverse-SDE samples (Eq. 4) of the learned score beside the references', scored by MMD
and p0 likelihood."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from sdyn.api import Run
from sdyn.experiments.ntk.network import forward
from sdyn.experiments.score.data import STREAM_SAMPLER, embed
from sdyn.experiments.score.diffusion import (
    gaussian_posterior_mean,
    log_density,
    mmd,
    reverse_sde,
    sample_p0,
    score_from_output,
    true_score,
)


def draw_samples(runs: list[Run], W, a, dev, dtype) -> dict:
    """Reverse-SDE samples with the learned score and, from the same start and noise, the
    exact, the single Gaussian's and the zero network's: ``summary``, their MMD to fresh p0
    draws and geometric-mean p0 density (``(B,)`` tensors by summary name), and ``table``, the
    samples to draw (see :func:`train`)."""
    cfg, data = runs[0].experiment, runs[0].data
    B, d, p = len(runs), data.d, cfg.n_samples
    draws = []
    for r in runs:
        rng = np.random.default_rng([r.seed, STREAM_SAMPLER, r.experiment.n])
        start = rng.standard_normal((p, d))
        noise = rng.standard_normal((cfg.sampler_steps, p, d))
        reference = sample_p0(data, p, rng)
        draws.append([torch.from_numpy(v) for v in (start, noise, reference)])
    y0 = torch.stack([s for s, _, _ in draws]).to(dev, dtype)
    noise = torch.stack([z for _, z, _ in draws], dim=1).to(dev, dtype)
    reference = torch.stack([ref for _, _, ref in draws]).to(dev, dtype)

    def times(t, y):
        return torch.full(y.shape[:-1], t, dtype=dtype, device=dev)

    def predictor(F):  # the Tweedie score of a predictor F(t, y) of E[x0 | x_t = y]
        return lambda t, y: score_from_output(F(times(t, y), y), times(t, y), y, cfg)

    samplers = {
        "": predictor(lambda tt, y: forward(W, a, embed(tt, y, cfg))),
        "_exact_score": lambda t, y: true_score(times(t, y), y, cfg, data),
        "_gaussian": predictor(lambda tt, y: gaussian_posterior_mean(tt, y, cfg, data)),
        "_zero": predictor(lambda tt, y: torch.zeros_like(y)),
    }
    samples = {suffix: reverse_sde(score, y0, noise, cfg) for suffix, score in samplers.items()}
    bandwidth = torch.cdist(reference, reference).flatten(-2).median(dim=-1).values
    zero = torch.zeros(B, p, dtype=dtype, device=dev)

    def likelihood(points):  # geometric-mean p0 density, exp(mean log p0)
        return log_density(zero, points, cfg, data).mean(-1).exp()

    summary = {"true_likelihood": likelihood(reference)}
    for suffix, points in samples.items():
        summary[f"sample_mmd{suffix}"] = mmd(points, reference, bandwidth)
        summary[f"sample_likelihood{suffix}"] = likelihood(points)
    table = None
    if d >= 2:
        modes = torch.as_tensor(data.mixture()[1][:, :2])
        parts = [
            pd.DataFrame(
                {"run": np.repeat(np.arange(B), len(xy) // B), "x1": xy[:, 0], "x2": xy[:, 1]}
            ).assign(source=source)
            for source, xy in (
                ("generated", samples[""][..., :2].reshape(-1, 2).cpu().numpy()),
                ("true", reference[..., :2].reshape(-1, 2).cpu().numpy()),
                ("mode", modes.repeat(B, 1).numpy()),
            )
        ]
        table = pd.concat(parts, ignore_index=True)
    return {"summary": {k: v.cpu() for k, v in summary.items()}, "table": table}
