"""The score experiment's data: the network's input embedding, each run's training set
(§6.1) and its held-out draws."""

from __future__ import annotations

import numpy as np
import torch

from sdyn.experiments.score.config import GMMData, ScoreConfig
from sdyn.experiments.score.diffusion import draw


def embed(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """[derived] Network input on the unit sphere: ``z / ||z||``, ``z = (t/T, x/s, bias)``.

    Shapes: t ``(...)``, x ``(..., d)`` -> ``(..., d + 2)``.
    """
    bias = torch.full_like(t, cfg.input_bias)
    z = torch.cat([(t / cfg.T)[..., None], x / cfg.input_scale, bias[..., None]], dim=-1)
    return z / z.norm(dim=-1, keepdim=True)


def make_data(cfg: ScoreConfig, data: GMMData, seed: int):
    """Training set of one run (§6.1), deterministic from ``seed``.

    Returns ``(X, Y)`` float64 tensors: X ``(n, d + 2)`` the embedded inputs ``(t_i, xt_i)``
    (unit norm), Y ``(n, d)`` the noisy labels ``x0_i``.

    Raises:
        ValueError: data that is not a Gaussian mixture.
    """
    if data.name != "gmm":
        raise ValueError(f"the score experiment needs data=gmm, got data={data.name}")
    t, x0, xt = draw(cfg, data, cfg.n, np.random.default_rng([seed, 0]))
    return embed(torch.from_numpy(t), torch.from_numpy(xt), cfg), torch.from_numpy(x0)


def held_out(cfg: ScoreConfig, data: GMMData, seed: int):
    """Held-out ``(t, xt)`` for the Monte Carlo error: t stratified on ``[T0, T]``."""
    rng = np.random.default_rng([seed, 1])
    strata = (np.arange(cfg.n_eval) + rng.uniform(size=cfg.n_eval)) / cfg.n_eval
    t, _, xt = draw(cfg, data, cfg.n_eval, rng, t=cfg.T0 + (cfg.T - cfg.T0) * strata)
    return torch.from_numpy(t), torch.from_numpy(xt)
