"""The score experiment's data: the network's input embedding, each run's training set
(§6.1), its held-out draws and its initialisation."""

from __future__ import annotations

import numpy as np
import torch

from sdyn.api import Run
from sdyn.experiments.common import seeded_generator
from sdyn.experiments.ntk.network import symmetric_init
from sdyn.experiments.score.config import GMMData, ScoreConfig
from sdyn.experiments.score.diffusion import draw

# Independent random streams of one seed (numpy SeedSequence keys, with n, and m for the init,
# after them): every (n, seed) draws its own training set, held-out points and sampler noise,
# and every run its own initialisation, so the runs a claim pools (seeds at each n, widths at
# each m) share no random draw but those of their (n, seed).
STREAM_DATA, STREAM_HELD_OUT, STREAM_SAMPLER, STREAM_INIT = range(4)


def embed(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """[derived] Network input on the unit sphere: ``z / ||z||``, ``z = (t/T, x/s, bias)``.

    Shapes: t ``(...)``, x ``(..., d)`` -> ``(..., d + 2)``.
    """
    bias = torch.full_like(t, cfg.input_bias)
    z = torch.cat([(t / cfg.T)[..., None], x / cfg.input_scale, bias[..., None]], dim=-1)
    return z / z.norm(dim=-1, keepdim=True)


def make_data(cfg: ScoreConfig, data: GMMData, seed: int):
    """Training set of one run (§6.1), deterministic from ``(seed, n)``: the random stream
    ``(seed, STREAM_DATA, n)``, so the training sets of different n are independent draws.

    Returns ``(X, Y)`` float64 tensors: X ``(n, d + 2)`` the embedded inputs ``(t_i, xt_i)``
    (unit norm), Y ``(n, d)`` the noisy labels ``x0_i``.

    Raises:
        ValueError: data that is not a Gaussian mixture.
    """
    if data.name != "gmm":
        raise ValueError(f"the score experiment needs data=gmm, got data={data.name}")
    t, x0, xt = draw(cfg, data, cfg.n, np.random.default_rng([seed, STREAM_DATA, cfg.n]))
    return embed(torch.from_numpy(t), torch.from_numpy(xt), cfg), torch.from_numpy(x0)


def held_out(cfg: ScoreConfig, data: GMMData, seed: int):
    """Held-out ``(t, xt)`` for the Monte Carlo error, t stratified on ``[T0, T]``: tensors
    ``(n_eval,)`` and ``(n_eval, d)``, from the random stream ``(seed, STREAM_HELD_OUT, n)``."""
    rng = np.random.default_rng([seed, STREAM_HELD_OUT, cfg.n])
    strata = (np.arange(cfg.n_eval) + rng.uniform(size=cfg.n_eval)) / cfg.n_eval
    t, _, xt = draw(cfg, data, cfg.n_eval, rng, t=cfg.T0 + (cfg.T - cfg.T0) * strata)
    return torch.from_numpy(t), torch.from_numpy(xt)


def initial_weights(run: Run) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's symmetric init (Def. 3.7 of the NTK paper, as the NTK experiment draws it)
    from the random stream ``(seed, STREAM_INIT, n, m)``: float64 W0 ``(1, d + 2, m)`` and
    a ``(1, d, m)``."""
    cfg = run.experiment
    g = seeded_generator(run.seed, STREAM_INIT, cfg.n, cfg.m)
    return symmetric_init(1, run.data.d + 2, cfg.m, run.data.d, cfg.sigma, g)
