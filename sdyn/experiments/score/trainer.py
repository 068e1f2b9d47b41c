"""The batched trainer: the NTK experiment's GD on denoising data, the NTK regression it is
compared with, and each run's score, preconditions and samples."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from sdyn.api import BundleResult, Run, log_spaced_steps, resolve_device
from sdyn.experiments.common import per_run_mv
from sdyn.experiments.ntk.descent import gd
from sdyn.experiments.ntk.network import forward, loss, squared_movement
from sdyn.experiments.score.bundling import shape_key
from sdyn.experiments.score.data import embed, held_out, initial_weights, make_data
from sdyn.experiments.score.diffusion import (
    gaussian_posterior_mean,
    posterior_mean,
    weighted_score_error,
)
from sdyn.experiments.score.ntk_regression import (
    gd_filter,
    kernel_drift,
    ntk_features,
    ntk_spectrum,
    small_gram,
    unvec,
    vec,
)
from sdyn.experiments.score.sampling import draw_samples

CURVE_METRICS = (
    "loss", "rel_loss", "score_error", "coupling_gap", "weight_movement", "kernel_drift",
)  # fmt: skip


def train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of runs by the NTK experiment's GD on denoising data; measure the score.

    Per run: the training set, held-out draws and sampler noise of its ``(seed, n)``, its own
    symmetric init (the stream ``(seed, STREAM_INIT, n, m)``) and step size. The network
    trains for the full budget (early stopping at T^); curves at log-spaced steps: ``loss``,
    ``rel_loss`` (training), ``score_error`` (held-out), ``coupling_gap`` (RMS of
    ``||F_nn - F_ntk||`` at the same step over held-out points), ``weight_movement``
    (``max_r ||w_r(t) - w_r(0)||``), ``kernel_drift`` (``||H(t) - H*||_F``).

    Summary per run:

    * the score: ``score_error`` and its standard error ``score_error_se``; ``regression_error``
      (``E||F - E[x0|xt]||^2``); the same two for the references, ``*_gaussian`` (the single
      Gaussian with p0's mean and covariance) and ``*_zero`` (the zero output), on the same
      held-out draws; the exact score's are 0;
    * the NTK and Thm 6.5's preconditions: ``lambda_min`` (= lambda, exactly 0 when ``n d``
      exceeds ``(d + 2) m``), ``lambda_max``, ``lambda_resolution`` (``n d eps lambda_max``,
      numpy's rank tolerance), ``lambda_resolved`` (1 if ``lambda_min`` exceeds it, else it is
      rounding noise), ``max_kernel_drift`` (over the record steps), ``drift_ratio``
      (= max_kernel_drift / lambda_min; where lambda is not resolved, over
      ``lambda_resolution``, a lower bound on the ratio), ``score_error_x_lambda``
      (NaN unless resolved), ``coupling_gap`` (RMS over the first ``n_coupling`` held-out
      points) and ``coupling_gap_max``, ``max_weight_movement``, ``eta``, ``final_loss``,
      ``final_rel_loss``;
    * the samples: ``sample_mmd`` (MMD to fresh p0 draws) and ``sample_likelihood`` (the
      geometric-mean p0 density of the samples, ``exp(mean log p0)``) for the learned score
      and, from the same start and noise, ``*_exact_score``, ``*_gaussian``, ``*_zero``;
      ``true_likelihood`` (of the fresh p0 draws);
    * ``status``: ``budget_exhausted`` (the budget is the early-stopping time, so a normal run
      uses all of it) or ``diverged`` (NaN/Inf or blown-up training loss).

    Extra table ``samples`` (for d >= 2): the first two coordinates of the generated samples,
    of fresh p0 draws and of the mixture's component means, columns ``run, x1, x2, source``
    (``generated``, ``true``, ``mode``).

    Raises:
        ValueError: the runs do not share one shape key, or data is not a Gaussian mixture.
    """
    keys = {shape_key(r) for r in runs}
    if len(keys) != 1:
        raise ValueError(f"a bundle needs runs of one shape, got {len(keys)} shapes")
    cfg, data = runs[0].experiment, runs[0].data
    dev = resolve_device(device)
    # experiment.dtype is the GD steps' precision; the NTK, its spectrum, the kernel predictor,
    # every observation and the sampler stay float64 (lambda_min can be near 0).
    dtype = torch.float64
    B, m, d = len(runs), cfg.m, data.d

    def stack(tensors):
        return torch.stack(list(tensors)).to(dev, dtype)

    train_sets = [make_data(r.experiment, r.data, r.seed) for r in runs]
    X, Y = stack(x for x, _ in train_sets), stack(y for _, y in train_sets)
    inits = [initial_weights(r) for r in runs]
    W0 = torch.cat([w for w, _ in inits]).to(dev, dtype)
    a = torch.cat([a for _, a in inits]).to(dev, dtype)

    J0 = ntk_features(W0, a, X)
    gram0 = small_gram(J0)
    mu, U, JtU = ntk_spectrum(J0, gram0)
    N, D = J0.shape[-2:]
    lam_min = mu[:, 0] if N <= D else torch.zeros_like(mu[:, 0])
    lam_max = mu[:, -1]
    resolution = N * torch.finfo(dtype).eps * lam_max
    resolved = lam_min > resolution
    eta = torch.tensor([r.experiment.lr_scale for r in runs], dtype=dtype, device=dev)
    eta = eta / (m * lam_max)

    held = [held_out(r.experiment, r.data, r.seed) for r in runs]
    t_te, x_te = stack(t for t, _ in held), stack(x for _, x in held)
    U_te = embed(t_te, x_te, cfg)
    F_true = posterior_mean(t_te, x_te, cfg, data)
    # Kernel predictor in H*'s eigenbasis: F_ntk(t) = (K* U) diag(filter_t) U^T vec(Y). Its
    # matrix-vector products are per run (common.per_run_mv; U^T vec(Y) likewise, summed over
    # U's rows): a batched matmul rounds by the batch size.
    KU = ntk_features(W0, a, U_te[:, : cfg.n_coupling]) @ JtU
    UtY = (U * vec(Y)[..., None]).sum(-2)
    record = log_spaced_steps(cfg.steps, cfg.record_points)
    L0 = loss(torch.zeros_like(Y), Y)

    def errors(F):  # (B, n_eval)
        return weighted_score_error(F, t_te, x_te, cfg, data)

    def regression(F):
        return (F - F_true).square().sum(-1).mean(-1)

    def kernel_prediction(step):
        return unvec(per_run_mv(KU, gd_filter(mu, eta * m, step) * UtY), d)

    calls = iter(record)  # gd calls observe at record[0], record[1], ... in order

    def observe(W, L):
        W, L = W.double(), L.double()
        F = forward(W, a, U_te)
        gap = (F[:, : cfg.n_coupling] - kernel_prediction(next(calls))).norm(dim=-1)
        move = squared_movement(W, W0).amax(dim=-1).sqrt()
        drift = kernel_drift(J0, gram0, ntk_features(W, a, X))
        rms_gap = gap.square().mean(-1).sqrt()
        return torch.stack([L, L / L0, errors(F).mean(-1), rms_gap, move, drift], dim=-1)

    eps = torch.zeros(B, dtype=dtype, device=dev)
    W_train = W0.to(getattr(torch, cfg.dtype))  # gd casts a, X, Y, eta, eps to it
    W, _, statuses, curves = gd(W_train, a, X, Y, eta, eps, cfg.steps, record, "softmax", observe)
    W = W.double()

    F_te = forward(W, a, U_te)
    err = errors(F_te)
    gap = (F_te[:, : cfg.n_coupling] - kernel_prediction(cfg.steps)).norm(dim=-1)
    # The learned predictor and the references, scored alike on the same held-out draws.
    predictions = {
        "": F_te,
        "_gaussian": gaussian_posterior_mean(t_te, x_te, cfg, data),
        "_zero": torch.zeros_like(F_te),
    }
    scores = {}
    for suffix, F in predictions.items():
        scores[f"score_error{suffix}"] = err.mean(-1) if F is F_te else errors(F).mean(-1)
        scores[f"regression_error{suffix}"] = regression(F)
    samples = draw_samples(runs, W, a, dev, dtype)
    scores.update(samples["summary"])
    final_loss = loss(forward(W, a, X), Y)
    max_drift, max_move = (curves[..., j].nan_to_num(-1).amax(dim=1) for j in (5, 4))

    summaries = []
    for k in range(B):
        lam, ok = float(lam_min[k]), bool(resolved[k])
        summary = {
            "status": statuses[k],
            **{key: float(value[k]) for key, value in scores.items()},
            "score_error_se": float(err[k].std() / math.sqrt(cfg.n_eval)),
            "lambda_min": lam,
            "lambda_max": float(lam_max[k]),
            "lambda_resolution": float(resolution[k]),
            "lambda_resolved": int(ok),
            "max_kernel_drift": float(max_drift[k]),
            "drift_ratio": float(max_drift[k]) / max(lam, float(resolution[k])),
            "score_error_x_lambda": float(scores["score_error"][k]) * lam if ok else math.nan,
            "coupling_gap": float(gap[k].square().mean().sqrt()),
            "coupling_gap_max": float(gap[k].max()),
            "max_weight_movement": float(max_move[k]),
            "eta": float(eta[k]),
            "final_loss": float(final_loss[k]),
            "final_rel_loss": float(final_loss[k] / L0[k]),
        }
        summaries.append(summary)
    k_rec = curves.shape[1]
    frame = pd.DataFrame(
        {
            "run": np.repeat(np.arange(B), k_rec),
            "step": np.tile(np.asarray(record[:k_rec]), B),
            **{name: curves[..., j].reshape(-1).numpy() for j, name in enumerate(CURVE_METRICS)},
        }
    )
    tables = {"samples": samples["table"]} if d >= 2 else {}
    return BundleResult(summaries=summaries, curves=frame, tables=tables)
