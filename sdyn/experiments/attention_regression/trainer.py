"""The batched trainer: a bundle of same-shape runs (seeds, optimisers, step sizes) trained
at once along a leading run axis, with their curves and summaries."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from sdyn.api import BundleResult, Run, log_spaced_steps, resolve_device
from sdyn.experiments.attention_regression.config import shape_key
from sdyn.experiments.attention_regression.data import (
    STREAM_BATCH,
    STREAM_GRAD_BIAS,
    STREAM_INIT,
    make_data,
    problem,
    seeded_generator,
)
from sdyn.experiments.attention_regression.diagnostics import gradient_bias, manifold_distance
from sdyn.experiments.attention_regression.kernel import loss_and_gradients
from sdyn.experiments.attention_regression.model import (
    empirical_loss,
    irreducible_loss,
    population_loss,
    regularizer_and_gradients,
    spectral_init,
)

# Minibatch indices are drawn this many steps at a time (memory: steps x N per run).
BATCH_CHUNK = 256

CURVE_METRICS = ("excess", "excess_gap", "distance", "regularizer", "train_loss", "loss")


def _minibatches(runs: list[Run], n: int, b: int, steps: int, chunk: int):
    """Per run, the query indices of each step: ``(B, steps_in_chunk, b)``, chunk by chunk.

    Each step draws b distinct samples uniformly (without replacement), from the run's own
    stream, so runs of one seed share their minibatches whatever their optimiser (App. A).
    """
    generators = [seeded_generator(r.seed, STREAM_BATCH) for r in runs]
    for start in range(0, steps, chunk):
        size = min(chunk, steps - start)
        yield torch.stack(
            [torch.rand(size, n, generator=g).argsort(dim=-1)[:, :b] for g in generators]
        )


def train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of same-shape runs together, batched over runs (optimisers may differ).

    Per run: data from its seed; init spectral (``alg1``) or random (``sgd``,
    ``alg1_random_init``, ``adam``: the same random point for one seed); each step takes the
    gradient of the minibatch loss (``batch`` queries, ``context`` as configured), adds the
    regulariser's (``alg1*``: coefficient ``reg``; others 0), multiplies grad_K by
    ``Sigma_hat^-p`` (``alg1*``; others the identity), and moves by ``lr`` (Adam: its moment
    normalised direction). Curves of :data:`CURVE_METRICS` are written at log-spaced steps into
    preallocated tensors; the only host synchronisations are at those steps.

    Curves: ``excess = L - L_irr`` (exact); ``excess_gap = |excess / plateau_excess - 1|``, the
    excess above its plateau, relative, filled after the run (from either side: from the
    spectral init the excess may rise to its plateau, as the finite-N minimiser need not beat
    the init); ``distance`` to the manifold (:func:`manifold_distance`); ``regularizer = reg *
    ||V^T V - Sigma_hat K K^T Sigma_hat||_F^2``, the value R would have, for every optimiser;
    ``train_loss = L_N`` (Eq. 1: all N samples as queries and as context); ``loss = L``, the
    population loss (Eq. 2; Figs. 1-2 plot it against ``L* = L_irr``).

    Summary per run: ``status`` (``budget_exhausted``: used its budget, the normal end;
    ``diverged``: a non-finite loss or parameter at a record step, the run is frozen there;
    ``converged`` is not used: every run needs its whole curve), ``l_irr``, ``init_excess``,
    ``init_distance``, ``final_*`` of every curve metric, ``plateau_excess`` and
    ``plateau_distance`` (medians over the record steps in the last ``plateau_fraction`` of the
    budget), ``gradient_bias`` and ``gradient_bias_se`` (:func:`gradient_bias`
    at the reference minimiser ``(V*, K*)``; NaN when ``grad_bias_draws`` is 0).

    Raises:
        ValueError: the runs do not share one shape key.
    """
    keys = {shape_key(r) for r in runs}
    if len(keys) != 1:
        raise ValueError(f"a bundle needs runs of one shape, got {len(keys)} shapes")
    cfg0, data = runs[0].experiment, runs[0].data
    dev = resolve_device(device)
    dtype = getattr(torch, cfg0.dtype)
    prob = problem(data)
    Sigma, W_star = prob.Sigma.to(dev, dtype), prob.W_star.to(dev, dtype)
    n, steps, B = cfg0.n, cfg0.steps, len(runs)
    b = cfg0.batch or n

    samples = [make_data(r.experiment, data, r.seed) for r in runs]
    X = torch.stack([x for x, _ in samples])
    Y = torch.stack([y for _, y in samples])
    V_spec, K_spec, Sigma_hat, _ = spectral_init(X, Y)
    inits = []
    for r in runs:
        g = seeded_generator(r.seed, STREAM_INIT)
        scale = r.experiment.init_scale
        shapes = ((data.k, data.d), (data.d, data.d))
        inits.append([scale * torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes])
    spectral = torch.tensor([r.experiment.optimizer == "alg1" for r in runs])
    V = torch.where(spectral[:, None, None], V_spec, torch.stack([v for v, _ in inits]))
    K = torch.where(spectral[:, None, None], K_spec, torch.stack([k for _, k in inits]))

    structured = torch.tensor([r.experiment.optimizer.startswith("alg1") for r in runs])
    evals, evecs = torch.linalg.eigh(Sigma_hat)
    power = torch.tensor([r.experiment.precond_power for r in runs], dtype=torch.float64)
    precond = (evecs * evals.pow(-power[:, None])[:, None, :]) @ evecs.transpose(-1, -2)
    precond = torch.where(
        structured[:, None, None], precond, torch.eye(data.d, dtype=precond.dtype)
    )
    reg_ref = torch.tensor([r.experiment.reg for r in runs], dtype=torch.float64)
    reg = torch.where(structured, reg_ref, 0.0)

    X, Y, V, K = (t.to(dev, dtype) for t in (X, Y, V, K))
    Sigma_hat, precond, reg, reg_ref = (
        t.to(dev, dtype) for t in (Sigma_hat, precond, reg, reg_ref)
    )
    lr = torch.tensor([r.experiment.lr for r in runs], dtype=dtype, device=dev)[:, None, None]
    adam = torch.tensor([r.experiment.optimizer == "adam" for r in runs], device=dev)[:, None, None]
    beta1 = torch.tensor([r.experiment.adam_beta1 for r in runs], dtype=dtype, device=dev)
    beta2 = torch.tensor([r.experiment.adam_beta2 for r in runs], dtype=dtype, device=dev)
    adam_eps = torch.tensor([r.experiment.adam_eps for r in runs], dtype=dtype, device=dev)
    beta1, beta2, adam_eps = (t[:, None, None] for t in (beta1, beta2, adam_eps))
    moments = [torch.zeros_like(V), torch.zeros_like(K), torch.zeros_like(V), torch.zeros_like(K)]

    record = log_spaced_steps(steps, cfg0.record_points)
    curves = torch.full((B, len(record), len(CURVE_METRICS)), float("nan"), dtype=torch.float64)
    active = torch.ones(B, dtype=torch.bool, device=dev)
    l_irr = irreducible_loss(data.k, data.noise_var)

    def observe(train_loss):
        excess = population_loss(V, K, Sigma, W_star, data.noise_var) - l_irr
        finite = torch.isfinite(V).flatten(1).all(1) & torch.isfinite(K).flatten(1).all(1)
        safe = finite[:, None, None]
        Vs, Ks = torch.where(safe, V, 0.0), torch.where(safe, K, 0.0)  # SVD needs finite input
        distance, _ = manifold_distance(Vs, Ks, prob)
        balance, _, _ = regularizer_and_gradients(V, K, Sigma_hat, reg_ref)
        values = torch.stack([excess, excess, distance, balance, train_loss, excess + l_irr], -1)
        return torch.where(finite[:, None], values, float("nan"))

    full_batch = b == n
    context_all = cfg0.context == "dataset"
    batches = _minibatches(runs, n, b, steps, BATCH_CHUNK) if not full_batch else None
    idx_chunk, k_rec = None, 0
    for t in range(steps + 1):
        at_record = k_rec < len(record) and t == record[k_rec]
        if full_batch:
            Xq, Yq = X, Y
        elif t < steps:
            if t % BATCH_CHUNK == 0:
                idx_chunk = next(batches).to(dev)
            idx = idx_chunk[:, t % BATCH_CHUNK]
            Xq = torch.gather(X, 1, idx[..., None].expand(-1, -1, data.d))
            Yq = torch.gather(Y, 1, idx[..., None].expand(-1, -1, data.k))
        if t < steps or full_batch:
            loss, gV, gK = loss_and_gradients(V, K, X if context_all else Xq, Xq, Yq)
        if at_record:
            train_loss = loss if full_batch else empirical_loss(V, K, X, X, Y)
            values = observe(train_loss)
            curves[:, k_rec] = values.cpu()
            bad = ~torch.isfinite(values).all(dim=-1)
            active &= ~bad.to(dev)
            k_rec += 1
            if not bool(active.any()):
                break
        if t == steps:
            break
        _, rV, rK = regularizer_and_gradients(V, K, Sigma_hat, reg)
        gV, gK = gV + rV, precond @ (gK + rK)
        moments = [
            beta1 * moments[0] + (1 - beta1) * gV,
            beta1 * moments[1] + (1 - beta1) * gK,
            beta2 * moments[2] + (1 - beta2) * gV.square(),
            beta2 * moments[3] + (1 - beta2) * gK.square(),
        ]
        c1, c2 = 1 - beta1 ** (t + 1), 1 - beta2 ** (t + 1)
        adam_V = moments[0] / c1 / ((moments[2] / c2).sqrt() + adam_eps)
        adam_K = moments[1] / c1 / ((moments[3] / c2).sqrt() + adam_eps)
        move = torch.where(active, 1.0, 0.0).to(dtype)[:, None, None] * lr
        V = V - move * torch.where(adam, adam_V, gV)
        K = K - move * torch.where(adam, adam_K, gK)

    curves = curves[:, :k_rec]
    steps_done = torch.tensor(record[:k_rec], dtype=torch.float64)
    tail = steps_done >= (1 - cfg0.plateau_fraction) * steps
    plateau = torch.tensor([_median(curves[k, tail, 0]) for k in range(B)], dtype=torch.float64)
    curves[..., 1] = (curves[..., 0] / plateau[:, None] - 1).abs()

    V_star, K_star = (t.to(dev, dtype) for t in prob.reference_point())
    bias = [
        gradient_bias(
            V_star,
            K_star,
            prob,
            n,
            cfg0.grad_bias_draws,
            seeded_generator(r.seed, STREAM_GRAD_BIAS),
        )
        if cfg0.grad_bias_draws
        else (math.nan, math.nan)
        for r in runs
    ]

    summaries = []
    for k in range(B):
        last = curves[k, -1]
        diverged = not bool(torch.isfinite(last).all()) or not bool(active[k])
        summary = {
            "status": "diverged" if diverged else "budget_exhausted",
            "l_irr": l_irr,
            "init_excess": float(curves[k, 0, 0]),
            "init_distance": float(curves[k, 0, 2]),
            "plateau_excess": float(plateau[k]),
            "plateau_distance": _median(curves[k, tail, 2]),
            "gradient_bias": bias[k][0],
            "gradient_bias_se": bias[k][1],
        }
        summary.update({f"final_{m}": float(last[j]) for j, m in enumerate(CURVE_METRICS)})
        summaries.append(summary)
    frame = pd.DataFrame(
        {
            "run": np.repeat(np.arange(B), k_rec),
            "step": np.tile(np.asarray(record[:k_rec]), B),
            **{name: curves[..., j].reshape(-1).numpy() for j, name in enumerate(CURVE_METRICS)},
        }
    )
    return BundleResult(summaries=summaries, curves=frame)


def _median(values: torch.Tensor) -> float:
    """Median of a 1-D tensor; NaN if it is empty or holds a NaN (a diverged run)."""
    if values.numel() == 0 or bool(torch.isnan(values).any()):
        return math.nan
    return float(values.median())
