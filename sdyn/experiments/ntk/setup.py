"""A bundle's float64 set-up before GD: each run's data, symmetric init, NTK Gram matrix H(0),
its spectrum and the step size (:func:`set_up`, for the trainer). The forecast of a run's steps
(:mod:`~.forecast`) shares its parts, :func:`initial` and :func:`step_sizes`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sdyn.api import Run
from sdyn.experiments.common import seeded_generator
from sdyn.experiments.ntk.data import STREAM_INIT, make_data
from sdyn.experiments.ntk.network import kernel_normaliser, ntk_gram, symmetric_init
from sdyn.experiments.ntk.theorem import theorem_learning_rate


@dataclass
class Setup:
    """Same-shape runs' float64 set-up (:func:`set_up`); every tensor has the runs (B) first.
    ``eta``: each run's step size; ``b_eff``: ``max_r,i |w_r(0)^T x_i|``; ``label_norm``:
    ``||F(0) - Y||_F = ||Y||_F`` (F(0) = 0 at symmetric init)."""

    X: torch.Tensor  # (B, n, d)
    Y: torch.Tensor  # (B, n, d_out)
    W0: torch.Tensor  # (B, d, m)
    a: torch.Tensor  # (B, d_out, m)
    H0: torch.Tensor  # (B, n d_out, n d_out)
    lam_min: torch.Tensor  # (B,)
    lam_max: torch.Tensor
    eta: torch.Tensor
    b_eff: torch.Tensor
    label_norm: torch.Tensor


def set_up(runs: list[Run], dev: torch.device) -> Setup:
    """Data, symmetric init (Def. 3.7), H(0) (Def. 3.6), its extreme eigenvalues and the step
    size of same-shape runs (equal n and m), float64, on ``dev`` (:func:`initial`,
    :func:`step_sizes`).

    Only the GD steps run in ``experiment.dtype``: a float32 H cannot resolve a wide run's
    drift of ~1e-7 ||H||, nor a lambda_min near 0.
    """
    X, Y, W0, a, H0 = initial(runs, dev)
    evals = torch.linalg.eigvalsh(H0)
    lam_min, lam_max = evals[:, 0], evals[:, -1]
    return Setup(
        X=X,
        Y=Y,
        W0=W0,
        a=a,
        H0=H0,
        lam_min=lam_min,
        lam_max=lam_max,
        eta=step_sizes(runs, lam_min, lam_max),
        b_eff=(X @ W0).abs().flatten(1).amax(dim=1),  # max_r,i |w_r(0)^T x_i|
        label_norm=Y.flatten(1).norm(dim=1),  # ||F(0) - Y||_F: F(0) = 0 at symmetric init
    )


def initial(runs: list[Run], dev: torch.device) -> tuple[torch.Tensor, ...]:
    """Same-shape runs' data, symmetric init (Def. 3.7; each run's its own draw, the stream
    ``(seed, STREAM_INIT, n, m)``) and NTK Gram matrix H(0) (Def. 3.6), float64 on ``dev``:
    X ``(B, n, d)``, Y ``(B, n, d_out)``, W0 ``(B, d, m)``, a ``(B, d_out, m)``,
    H0 ``(B, n d_out, n d_out)``."""
    cfg0 = runs[0].experiment
    data = [make_data(r.experiment, r.data, r.seed) for r in runs]
    X = torch.stack([x for x, _ in data]).to(dev, torch.float64)
    Y = torch.stack([y for _, y in data]).to(dev, torch.float64)
    d = X.shape[-1]
    inits = [
        symmetric_init(
            1,
            d,
            cfg0.m,
            cfg0.d_out,
            r.experiment.sigma,
            seeded_generator(r.seed, STREAM_INIT, cfg0.n, cfg0.m),
        )
        for r in runs
    ]
    W0 = torch.cat([w for w, _ in inits]).to(dev, torch.float64)
    a = torch.cat([a for _, a in inits]).to(dev, torch.float64)
    return X, Y, W0, a, ntk_gram(W0, a, X, cfg0.activation)


def step_sizes(runs: list[Run], lam_min: torch.Tensor, lam_max: torch.Tensor) -> torch.Tensor:
    """Each same-shape run's GD step eta ``(B,)`` from the extreme eigenvalues ``(B,)`` of its
    H(0): ``experiment.lr=auto`` gives ``eta = lr_scale / (c_m lambda_max(H(0)))``;
    ``theorem``, Thm 4.2's step."""
    cfg0 = runs[0].experiment
    c_m = kernel_normaliser(cfg0.activation, cfg0.m)
    return torch.stack(
        [
            r.experiment.lr_scale / (c_m * lam_max[k])
            if r.experiment.lr == "auto"
            else theorem_learning_rate(r.experiment, lam_min[k], cfg0.n * cfg0.d_out)
            for k, r in enumerate(runs)
        ]
    )
