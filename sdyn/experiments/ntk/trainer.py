"""The batched trainer: packing, GD and each run's summary and curves (the float64 set-up before
GD is :mod:`~.setup`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch

from sdyn.api import BundleResult, Run, log_spaced_steps, resolve_device
from sdyn.experiments.ntk.bundling import shape_key, step_key
from sdyn.experiments.ntk.descent import gd
from sdyn.experiments.ntk.network import Pack, kernel_normaliser, loss, ntk_gram, squared_movement
from sdyn.experiments.ntk.setup import Setup, set_up
from sdyn.experiments.ntk.theorem import theorem_B, theorem_checks

CURVE_METRICS = ("loss", "rel_loss", "weight_movement", "kernel_drift", "rms_weight_movement")


_FIELDS = [f.name for f in dataclasses.fields(Setup)]


def _padded(part: Setup, M: int, N: int) -> Setup:
    """``part`` padded to width M and N points (zeros; see :class:`Pack`)."""
    (B, n, _), d_out = part.X.shape, part.Y.shape[-1]
    dm, dn = M - part.W0.shape[-1], N - n
    H0 = part.H0.view(B, d_out, n, d_out, n)
    return Setup(
        X=torch.nn.functional.pad(part.X, (0, 0, 0, dn)),
        Y=torch.nn.functional.pad(part.Y, (0, 0, 0, dn)),
        W0=torch.nn.functional.pad(part.W0, (0, dm)),
        a=torch.nn.functional.pad(part.a, (0, dm)),
        H0=torch.nn.functional.pad(H0, (0, dn, 0, 0, 0, dn)).reshape(B, d_out * N, d_out * N),
        **{k: getattr(part, k) for k in ("lam_min", "lam_max", "eta", "b_eff", "label_norm")},
    )


def train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of runs together by full-batch GD (Def. 3.5), batched over runs.

    Runs of one shape are stacked; runs that differ only in width m and sample size n are
    padded into one packed step (:class:`Pack`), which gives each run what it gets alone (to
    rounding: 1e-10 relative in float64, 1e-5 in float32; tested).

    Each run keeps its own data, init (from its seed), learning rate and eps; once its relative
    loss reaches eps it is frozen, so its curves and drift stop where it first fit the data.
    Curves are written at log-spaced steps into preallocated tensors; the only host
    synchronisations are at those record steps.

    Returns per run the summary scalars ``lambda_min, lambda_max, eta, final_loss, final_rel_loss,
    steps_to_eps (-1 if never), max_weight_movement (max over neurons and t of
    ||w_r(t) - w_r(0)||), rms_weight_movement (root mean square over neurons), max_kernel_drift
    (max over recorded t of ||H(t) - H(0)||_F), drift_ratio
    (= max_kernel_drift / lambda_min), fit_margin (= final_rel_loss / eps), ntk_margin
    (= max(fit_margin, drift_ratio / drift_fraction)), ntk_regime (1 if ntk_margin <= 1)`` and
    ``status``, and the curves of :data:`CURVE_METRICS` at the recorded steps.

    Raises:
        ValueError: the runs differ in more than n and m.
    """
    keys = {step_key(r) for r in runs}
    if len(keys) != 1:
        raise ValueError(f"a bundle needs runs that differ only in n and m, got {len(keys)} kinds")
    cfg0 = runs[0].experiment
    act, steps = cfg0.activation, cfg0.steps
    dev = resolve_device(device)
    dtype = getattr(torch, cfg0.dtype)

    groups: dict[tuple, list[int]] = {}
    for k, r in enumerate(runs):
        groups.setdefault(shape_key(r), []).append(k)
    order = [k for members in groups.values() for k in members]  # runs in the order trained
    parts = [set_up([runs[k] for k in members], dev) for members in groups.values()]
    if len(parts) == 1:
        (setup,), pack, pack64 = parts, None, None
    else:
        widths = [runs[k].experiment.m for k in order]
        sizes = [runs[k].experiment.n for k in order]
        M, N = max(widths), max(sizes)
        padded = [_padded(part, M, N) for part in parts]
        setup = Setup(**{f: torch.cat([getattr(q, f) for q in padded]) for f in _FIELDS})
        pack64 = Pack.of(widths, sizes, M, N, torch.float64, dev)
        pack = Pack.of(widths, sizes, M, N, dtype, dev)
    X, Y, W0, a, H0 = setup.X, setup.Y, setup.W0, setup.a, setup.H0
    ordered = [runs[k] for k in order]
    eps = torch.tensor([r.experiment.eps for r in ordered], dtype=torch.float64, device=dev)

    record = log_spaced_steps(steps, cfg0.record_points)
    L0 = loss(torch.zeros_like(Y), Y)

    def observe(W, L):
        W, L = W.double(), L.double()
        moved = squared_movement(W, W0)  # (B, m), 0 on padded neurons
        drift = (ntk_gram(W, a, X, act, pack64) - H0).flatten(-2).norm(dim=-1)
        mean = moved.mean(dim=-1) if pack64 is None else moved.sum(dim=-1) / pack64.m[:, 0, 0]
        move, rms = moved.amax(dim=-1).sqrt(), mean.sqrt()
        return torch.stack([L, L / L0, move, drift, rms], dim=-1)

    W_train = W0.to(dtype)  # gd casts a, X, Y, eta, eps to it
    eta = setup.eta
    _, hit, statuses, curves = gd(W_train, a, X, Y, eta, eps, steps, record, act, observe, pack)
    # gd's weights are those of its last observation, so that row is the final state.
    k_rec = curves.shape[1]
    final = curves[:, -1]
    max_drift, max_move, max_rms = (
        curves[..., j].nan_to_num(nan=-1).amax(dim=1) for j in (3, 2, 4)
    )

    lam_min, lam_max, b_eff, label_norm = (
        setup.lam_min,
        setup.lam_max,
        setup.b_eff,
        setup.label_norm,
    )
    summaries = [{}] * len(runs)
    for k, r in enumerate(ordered):  # row k of every tensor is run order[k]
        c = r.experiment
        status = statuses[k]
        lam = float(lam_min[k])
        drift_ratio = float(max_drift[k]) / lam if lam > 0 else float("inf")
        fit_margin = float(final[k, 1]) / c.eps if status != "diverged" else float("inf")
        ntk_margin = max(fit_margin, drift_ratio / c.drift_fraction)
        checks = theorem_checks(
            c,
            lam=lam,
            lr_step=kernel_normaliser(act, c.m) * float(eta[k]),
            b_eff=float(b_eff[k]),
            label_norm=float(label_norm[k]),
            max_move=float(max_move[k]),
            max_drift=float(max_drift[k]),
            rel_loss=curves[k, :, 1].numpy(),
            steps=np.asarray(record[:k_rec]),
            last=int(hit[k]) if hit[k] >= 0 else c.steps,
        )
        summaries[order[k]] = {
            "status": status,
            "lambda_min": lam,
            "lambda_max": float(lam_max[k]),
            "eta": float(eta[k]),
            "final_loss": float(final[k, 0]),
            "final_rel_loss": float(final[k, 1]),
            "steps_to_eps": int(hit[k]),
            "max_weight_movement": float(max_move[k]),
            "rms_weight_movement": float(max_rms[k]),
            "max_kernel_drift": float(max_drift[k]),
            "drift_ratio": drift_ratio,
            "fit_margin": fit_margin,
            "ntk_margin": ntk_margin,
            "ntk_regime": int(ntk_margin <= 1.0),
            "kernel_regime": int(drift_ratio <= c.drift_fraction),
            "theorem_B": theorem_B(c, c.n * c.d_out),
            "B_eff": float(b_eff[k]),
            **checks,
        }
    frame = pd.DataFrame(
        {
            "run": np.repeat(np.asarray(order), k_rec),
            "step": np.tile(np.asarray(record[:k_rec]), len(runs)),
            **{name: curves[..., j].reshape(-1).numpy() for j, name in enumerate(CURVE_METRICS)},
        }
    )
    return BundleResult(summaries=summaries, curves=frame)
