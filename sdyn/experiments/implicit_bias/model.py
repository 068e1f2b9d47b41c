"""The implicit-bias model and its batched trainer (torch): logits, the loss and its
gradients (stable when the softmax saturates), the data sets, the assumption checks, and
training in token coordinates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from sdyn.api import BundleResult, Run, log_spaced_steps, resolve_device
from sdyn.experiments.common import per_run_mv
from sdyn.experiments.implicit_bias.config import (
    CHECKPOINTS,
    LOSSES,
    OPTIMIZERS,
    ImplicitBiasConfig,
    shape_key,
)
from sdyn.experiments.implicit_bias.svm import solve_u_svm, solve_w_svm

# A gradient whose largest coefficient is below this has left float64's normal range (the
# softmax, or the loss of a trained decoder, saturated to machine precision): the run stops.
SATURATION_FLOOR = 1e-280


# --------------------------------------------------------------------------------------------
# The model: logits, scores, the loss and its gradients (stable when the softmax saturates).
# --------------------------------------------------------------------------------------------


def forward(W: torch.Tensor, u: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Outputs ``Phi(X_i) = u^T X_i^T softmax(X_i W x_i1)`` ([derived] Eq. 1,
    ``docs/theory/implicit-bias.md#derived-model``).

    Shapes: W ``(..., d, d)``, u ``(..., d)``, X ``(..., n, T, d)`` -> Phi ``(..., n)``.
    """
    s = torch.softmax(logits(W, X), dim=-1)
    return torch.einsum("...nt,...ntd,...d->...n", s, X, u)


def logits(W: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Attention logits ``z_it = x_it^T W x_i1`` (query = first token).

    Shapes: W ``(..., d, d)``, X ``(..., n, T, d)`` -> z ``(..., n, T)``.
    """
    Wq = X[..., 0, :] @ W.transpose(-1, -2)  # rows (W x_i1)^T, (..., n, d)
    return (X @ Wq.unsqueeze(-1)).squeeze(-1)


@dataclass
class LossTerms:
    """Loss pieces of a batch at given logits and scores (see :func:`loss_terms`).

    Shapes: per run ``(B,)``; per sequence ``(B, n)``; per token ``(B, n, T)``.
    """

    loss: torch.Tensor  # L, (B,)
    excess: torch.Tensor  # L - L* (fixed decoder), computed without cancellation, (B,)
    dz: torch.Tensor  # dL/dz_it, (B, n, T)
    du: torch.Tensor  # (1/n) ell'(m_i) s_it: times y_i, the coefficient of x_it in dL/du
    non_opt: torch.Tensor  # 1 - s_{i,opt} = sum_{t != opt} s_it, (B, n)


def loss_terms(z: torch.Tensor, gamma: torch.Tensor, opt: torch.Tensor, loss: str) -> LossTerms:
    """Loss, excess loss and gradients w.r.t. logits and decoder, stable under saturation.

    With ``s_i = softmax(z_i)`` the margin is ``m_i = sum_t s_it gamma_it``; it is written as
    ``m_i = gamma_{i,opt} - delta_i`` with ``delta_i = sum_t s_it (gamma_{i,opt} - gamma_it)``,
    and ``dm_i/dz_it = s_it sum_t' s_it' (gamma_it - gamma_it')``, so that no quantity is a
    difference of two nearly equal numbers when ``1 - s_{i,opt}`` is below float64's epsilon
    (the naive ``s_it (gamma_it - m_i)`` then loses the whole gradient of the opt token).

    ``L* = 1/n sum_i ell(gamma_{i,opt})`` is the infimum over W for a fixed decoder (softmax
    saturated on the opt tokens); ``excess = L - L*`` is ``1/n sum_i e^{-gamma_opt} expm1(delta)``
    for the exponential loss and ``1/n sum_i log1p(expm1(delta) sigmoid(-gamma_opt))`` for the
    logistic loss.

    Args:
        z: logits ``(B, n, T)``.
        gamma: token scores ``y_i u^T x_it``, ``(B, n, T)``.
        opt: opt token index per sequence, ``(B, n)`` (int64).
        loss: ``exp`` or ``logistic``.

    Returns:
        :class:`LossTerms`; ``du[b, i, t] = (1/n) ell'(m_i) s_it``, which times ``y_i`` is the
        coefficient of ``x_it`` in ``dL/du``.

    Raises:
        ValueError: unknown loss.
    """
    n = z.shape[-2]
    s = torch.softmax(z, dim=-1)
    g_opt = gamma.gather(-1, opt.unsqueeze(-1))  # (B, n, 1)
    is_opt = torch.nn.functional.one_hot(opt, z.shape[-1]).bool()
    delta = (s * (g_opt - gamma)).sum(-1)  # gamma_opt - m_i >= 0 when opt is the argmax
    margin = g_opt.squeeze(-1) - delta
    dev = (s.unsqueeze(-2) * (gamma.unsqueeze(-1) - gamma.unsqueeze(-2))).sum(-1)
    if loss == "exp":
        per = torch.exp(-margin)
        slope = per  # -ell'(m)
        excess = torch.exp(-g_opt.squeeze(-1)) * torch.expm1(delta)
    elif loss == "logistic":
        per = torch.nn.functional.softplus(-margin)
        slope = torch.sigmoid(-margin)
        excess = torch.log1p(torch.expm1(delta) * torch.sigmoid(-g_opt.squeeze(-1)))
    else:
        raise ValueError(f"unknown loss {loss!r}; expected one of {LOSSES}")
    coef = -slope.unsqueeze(-1) / n
    return LossTerms(
        loss=per.mean(-1),
        excess=excess.mean(-1),
        dz=coef * s * dev,
        du=coef * s,
        non_opt=s.masked_fill(is_opt, 0.0).sum(-1),
    )


def loss_and_gradients(
    W: torch.Tensor,
    u: torch.Tensor,
    X: torch.Tensor,
    y: torch.Tensor,
    opt: torch.Tensor,
    loss="exp",
):
    """Loss and its closed-form gradients w.r.t. W and u, in the ambient (d x d) coordinates.

    ``dL/dW = sum_it (dL/dz_it) x_it x_i1^T`` and ``dL/du = sum_it (dL/du)_it y_i x_it`` with
    the coefficients of :func:`loss_terms` (the trainer applies the same coefficients in token
    coordinates). ``opt`` only selects which token the stable formulas pivot on; the values do
    not depend on it.

    Shapes: W ``(B, d, d)``, u ``(B, d)``, X ``(B, n, T, d)``, y ``(B, n)``, opt ``(B, n)``
    -> ``(L (B,), dL/dW (B, d, d), dL/du (B, d))``.
    """
    gamma = y.unsqueeze(-1) * torch.einsum("bntd,bd->bnt", X, u)
    terms = loss_terms(logits(W, X), gamma, opt, loss)
    grad_W = torch.einsum("bnt,bntd,bne->bde", terms.dz, X, X[..., 0, :])
    grad_u = torch.einsum("bnt,bn,bntd->bd", terms.du, y, X)
    return terms.loss, grad_W, grad_u


# --------------------------------------------------------------------------------------------
# Data and assumptions (the max-margin references are in svm.py).
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Dataset:
    """One run's training set: tokens ``X (n, T, d)``, labels ``y (n,)`` in {-1, +1}, opt
    token index ``opt (n,)``, and the fixed decoder ``decoder (d,)`` (None: use ``u_mm``)."""

    X: torch.Tensor
    y: torch.Tensor
    opt: torch.Tensor
    decoder: torch.Tensor | None


def make_data(cfg: ImplicitBiasConfig, data, seed: int) -> Dataset:
    """The training set of one run, deterministic from ``seed`` (float64).

    See :class:`Example1Data`, :class:`AntipodalData` and :class:`DMData` for the models.

    Raises:
        ValueError: unknown data set.
    """
    rng = np.random.default_rng(seed)
    n, T, d, p = cfg.n, data.T, data.d, data.opt_position
    rows = np.arange(n)
    if data.name in ("example1", "antipodal"):
        y = rng.choice([-1.0, 1.0], size=n)
        X = np.zeros((n, T, d))
        X[:, :, 1:] = data.sigma * rng.standard_normal((n, T, d - 1))
        if data.name == "antipodal":
            X[rows, p, 1:] = 0.0
        X[rows, p, 0] = y * data.zeta
        decoder = torch.zeros(d, dtype=torch.float64)
        decoder[0] = 1.0
    elif data.name == "dm":
        X = data.sigma * rng.standard_normal((n, T, d))
        X[rows, p] = data.zeta * rng.standard_normal((n, d))
        y = np.where(X[rows, p, 0] >= 0, 1.0, -1.0)
        decoder = None
    else:
        raise ValueError(f"unknown data set {data.name!r} for the implicit-bias experiment")
    opt = torch.full((n,), p, dtype=torch.int64)
    return Dataset(torch.from_numpy(X), torch.from_numpy(y), opt, decoder)


def check_assumptions(X: torch.Tensor, y, decoder, opt, orth_tol: float) -> dict[str, float]:
    """Whether a data set satisfies Assumptions 1 and 2 (Section 3.1), with the measured margins.

    Assumption 1 [derived; its constants were lost]: tokens are nearly orthogonal,
    ``rho = max |cos(x_it, x_jt')| <= orth_tol`` over all pairs of distinct tokens (across
    sequences too), except pairs of exactly (anti)parallel opt tokens (the antipodal variant).
    Assumption 2: for every sequence the non-opt tokens have equal scores
    ``gamma_it = gamma_it'`` (up to 1e-9 relative), and the opt token's score is strictly larger.

    Shapes: X ``(n, T, d)``, y ``(n,)``, decoder ``(d,)``, opt ``(n,)``.

    Returns:
        ``assumption1`` (1/0), ``a1_ratio`` (rho), ``assumption2`` (1/0), ``a2_spread``
        (largest spread of non-opt scores over the smallest opt-score gap; NaN when some
        opt token does not score strictly highest).
    """
    n, T, _ = X.shape
    flat = X.reshape(n * T, -1)
    norms = flat.norm(dim=-1)
    cosine = (flat @ flat.T) / (norms[:, None] * norms[None, :])
    is_opt = torch.zeros(n, T, dtype=torch.bool)
    is_opt[torch.arange(n), opt] = True
    is_opt = is_opt.reshape(-1)
    skip = torch.eye(n * T, dtype=torch.bool) | (
        is_opt[:, None] & is_opt[None, :] & (cosine.abs() >= 1 - 1e-12)
    )
    rho = float(cosine.abs().masked_fill(skip, 0.0).max()) if n * T > 1 else 0.0
    gamma = y[:, None] * (X @ decoder)
    g_opt = gamma[torch.arange(n), opt]
    others = gamma.masked_fill(is_opt.reshape(n, T), float("nan"))
    spread = float(
        (others.nan_to_num(-math.inf).amax(1) - others.nan_to_num(math.inf).amin(1)).max()
    )
    gap = float((g_opt - others.nan_to_num(-math.inf).amax(1)).min())
    scale = float(gamma.abs().max()) or 1.0
    return {
        "assumption1": int(rho <= orth_tol),
        "a1_ratio": rho,
        "assumption2": int(gap > 0 and spread <= 1e-9 * scale),
        "a2_spread": spread / gap if gap > 0 else math.nan,
    }


# --------------------------------------------------------------------------------------------
# The batched trainer, in token coordinates.
# --------------------------------------------------------------------------------------------

CURVE_METRICS = (
    "loss",  # L(W_t, u_t)
    "excess_loss",  # L - L* (fixed decoder); L itself when the decoder is trained (L* = 0)
    "neg_log_loss",  # -log L, for the joint loss rate exp(-t^(1/3))
    "w_norm",  # ||W_t||_F
    "w_dist",  # ||W_t/||W_t|| - W_mm/||W_mm|| ||_F
    "w_1mcos",  # 1 - cos(W_t, W_mm)
    "one_minus_s_opt",  # mean_i (1 - s_{i,opt}), exact far below float64's epsilon
    "s_opt",  # mean_i s_{i,opt}, the averaged softmax score of Figs. 2-3
    "w_margin",  # smallest W-SVM constraint margin of W_t/||W_t||
    "w_margin_ratio",  # the same over the max margin 1/||W_mm|| (1 at the W-SVM direction)
    "u_norm",  # ||u_t||
    "u_dist",  # ||u_t/||u_t|| - u_mm/||u_mm|| ||
    "u_margin_ratio",  # min_i y_i u_t^T x_{i,opt} / ||u_t|| over the u-SVM margin 1/||u_mm||
)
_RULES = {name: k for k, name in enumerate(OPTIMIZERS)}


@dataclass
class _Prepared:
    """One run's data in token coordinates (``N = n T`` tokens, flattened sequence-major)."""

    K: torch.Tensor  # (N, N): <x_it, x_js> <x_i1, x_j1>, maps W coefficients to logits
    G: torch.Tensor  # (N, N): token Gram matrix
    z0: torch.Tensor  # (N,): logits of W_0
    w0_sq: float  # ||W_0||^2
    wmm_dot: torch.Tensor  # (N,): x_it^T W_mm x_i1 = <W_mm, x_it x_i1^T> (NaN: W-SVM infeasible)
    w0_wmm: float  # <W_0, W_mm>
    u0_x: torch.Tensor  # (N,): u_0^T x_it
    u0_sq: float  # ||u_0||^2
    umm_x: torch.Tensor  # (N,): u_mm^T x_it (NaN: u-SVM infeasible)
    u0_umm: float  # <u_0, u_mm>
    y: torch.Tensor  # (N,): y_i per token
    opt: torch.Tensor  # (n,)
    summary: dict


def _prepare(run: Run) -> _Prepared:
    """Data, references (both SVMs), assumption checks and W_0 of one run, in token coordinates."""
    cfg = run.experiment
    data = make_data(cfg, run.data, run.seed)
    X, y, opt = data.X, data.y, data.opt
    n, T, d = X.shape
    rows = torch.arange(n)
    u_svm = solve_u_svm(X[rows, opt], y)
    nan = math.nan
    u_mm = u_svm.solution if u_svm.feasible else torch.full((d,), nan, dtype=torch.float64)
    fixed = data.decoder
    if fixed is None:  # DM: the fixed decoder is u_mm (u* = e_1 if the u-SVM failed)
        fixed = u_mm if u_svm.feasible else torch.eye(d, dtype=torch.float64)[0]
    u0 = torch.zeros(d, dtype=torch.float64) if cfg.train_decoder else fixed
    w_svm = solve_w_svm(X, opt)
    W_mm = w_svm.solution if w_svm.feasible else torch.full((d, d), nan, dtype=torch.float64)
    generator = torch.Generator().manual_seed(run.seed)
    W0 = torch.randn(d, d, generator=generator, dtype=torch.float64)
    W0 = cfg.init_scale * W0 / W0.norm()

    flat = X.reshape(n * T, d)
    G = flat @ flat.T
    Gq = X[:, 0] @ X[:, 0].T
    K = G * Gq.repeat_interleave(T, 0).repeat_interleave(T, 1)
    g_opt = y * (X[rows, opt] @ fixed)  # opt-token scores of the fixed decoder
    loss_star = 0.0 if cfg.train_decoder else float(_loss_value(g_opt, cfg.loss).mean())
    wmm_norm = float(W_mm.norm())
    umm_norm = float(u_mm.norm())
    summary = {
        "svm_feasible": int(w_svm.feasible),
        "u_svm_feasible": int(u_svm.feasible),
        "wmm_norm": wmm_norm,
        "wmm_margin": 1.0 / wmm_norm,
        "umm_norm": umm_norm,
        "decoder_trained": int(cfg.train_decoder),
        "loss_star": loss_star,
        **check_assumptions(X, y, fixed if not cfg.train_decoder else u_mm, opt, cfg.orth_tol),
    }
    return _Prepared(
        K=K,
        G=G,
        z0=logits(W0, X).reshape(-1),
        w0_sq=float(W0.square().sum()),
        wmm_dot=logits(W_mm, X).reshape(-1),
        w0_wmm=float((W0 * W_mm).sum()),
        u0_x=flat @ u0,
        u0_sq=float(u0 @ u0),
        umm_x=flat @ u_mm,
        u0_umm=float(u0 @ u_mm),
        y=y.repeat_interleave(T),
        opt=opt,
        summary=summary,
    )


def _loss_value(margin: torch.Tensor, loss: str) -> torch.Tensor:
    return torch.exp(-margin) if loss == "exp" else torch.nn.functional.softplus(-margin)


def train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of same-shape runs together, batched over runs (any mix of optimisers).

    Each run keeps its own data, references and W_0 (from its seed), optimiser and step sizes
    (per-run tensors; every rule is the heavy-ball form ``v <- beta v - eta_t g,
    theta <- theta + v`` with ``beta = 0`` except for ``ngd_momentum``). Gradients are scaled by
    their largest coefficient before norms are taken, so the normalised and Polyak steps stay
    exact until the softmax saturates to float64 resolution. Curves are written at log-spaced
    steps (and at :data:`CHECKPOINTS`) into preallocated tensors; those are the only host syncs.

    Status per run: ``converged`` = the gradient fell below float64 resolution (largest
    coefficient below ``SATURATION_FLOOR``: the softmax, or with a trained decoder the loss,
    saturated) before the budget: the run stops there and its curves end (NaN after
    ``saturated_step``); ``budget_exhausted`` = all ``steps`` taken;
    ``diverged`` = the loss or gradient became NaN/Inf.

    Returns per run the summary of :func:`_prepare` (SVM feasibility, ``wmm_norm``,
    ``umm_norm``, ``loss_star``, assumption checks), ``status``, ``saturated_step`` (-1 if
    never), ``final_<metric>`` for every curve metric, ``capped`` (1 if the run's cap bound
    at some step, so that it left the theorems' uncapped rule), and
    ``saturation_rate_theory``, the [derived] per-step contraction of 1 - s_opt with a fixed
    decoder: ``exp(-eta_ngd/||W_mm||)`` for ``ngd`` (``||W_t|| = eta_ngd t`` along W_mm) and
    ``exp(-eta_polyak)`` for ``polyak`` (its step raises the dominant margin by exactly
    ``eta_polyak``, see the claim ``saturation``); NaN for the other rules; curves of
    :data:`CURVE_METRICS`. A run whose W-SVM is infeasible trains as usual with
    ``svm_feasible = 0`` and NaN alignment metrics.

    Raises:
        ValueError: the runs do not share one shape key.
    """
    keys = {shape_key(r) for r in runs}
    if len(keys) != 1:
        raise ValueError(f"a bundle needs runs of one shape, got {len(keys)} shapes")
    cfg0 = runs[0].experiment
    dev = resolve_device(device)
    prepared = [_prepare(r) for r in runs]

    def stack(name):
        values = [getattr(p, name) for p in prepared]
        if isinstance(values[0], torch.Tensor):
            return torch.stack(values).to(dev)
        return torch.tensor(values, dtype=torch.float64, device=dev)

    K, G, z0, y, opt = (stack(k) for k in ("K", "G", "z0", "y", "opt"))
    wmm_dot, u0_x, umm_x = (stack(k) for k in ("wmm_dot", "u0_x", "umm_x"))
    w0_sq, w0_wmm, u0_sq, u0_umm = (stack(k) for k in ("w0_sq", "w0_wmm", "u0_sq", "u0_umm"))
    wmm_norm = torch.tensor([p.summary["wmm_norm"] for p in prepared], device=dev)
    umm_norm = torch.tensor([p.summary["umm_norm"] for p in prepared], device=dev)

    def per_run(get):
        return torch.tensor([float(get(r.experiment)) for r in runs], device=dev)

    B, N = z0.shape
    n = opt.shape[1]
    T = N // n
    rule = torch.tensor([_RULES[r.experiment.optimizer] for r in runs], device=dev)
    trained = torch.tensor([r.experiment.train_decoder for r in runs], device=dev)
    any_trained = bool(trained.any())
    beta = torch.where(rule == _RULES["ngd_momentum"], per_run(lambda c: c.momentum), 0.0)
    eta = {k: per_run(lambda c, k=k: getattr(c, f"eta_{k}")) for k in ("gd", "ngd", "polyak")}
    power = torch.where(rule == _RULES["joint"], per_run(lambda c: c.joint_power), 0.0)
    by_loss = per_run(lambda c: c.normalise == "loss" and c.optimizer != "joint_eq2").bool()
    inf = math.inf
    cap_ngd = per_run(lambda c: c.cap_ngd if c.cap_ngd is not None else inf)
    cap_polyak = per_run(lambda c: c.cap_polyak if c.cap_polyak is not None else inf)
    opt_flat = opt + torch.arange(n, device=dev) * T  # flat index of each opt token
    is_opt = torch.zeros(B, N, dtype=torch.bool, device=dev).scatter_(1, opt_flat, True)

    checkpoints = {t for t in CHECKPOINTS if t <= cfg0.steps}
    record = sorted(set(log_spaced_steps(cfg0.steps, cfg0.record_points)) | checkpoints)
    curves = torch.full((B, len(record), len(CURVE_METRICS)), math.nan, dtype=torch.float64)
    C = torch.zeros(B, N, dtype=torch.float64, device=dev)  # W_t = W_0 + sum C_it x_it x_i1^T
    U = torch.zeros_like(C)  # u_t = u_0 + sum U_it x_it (stays 0 for a fixed decoder)
    VC, VU = torch.zeros_like(C), torch.zeros_like(C)
    active = torch.ones(B, dtype=torch.bool, device=dev)
    diverged = torch.zeros_like(active)
    stopped = torch.full((B,), -1, dtype=torch.long, device=dev)
    capped = torch.zeros_like(active)  # the cap bound at some step: not the theorems' rule

    def observe(z, GU, terms):
        loss = terms.loss
        w_norm = (w0_sq + 2 * (C * z0).sum(-1) + (C * (z - z0)).sum(-1)).clamp_min(0).sqrt()
        cos_w = (w0_wmm + (C * wmm_dot).sum(-1)) / (w_norm * wmm_norm)
        gap = (z.gather(1, opt_flat).repeat_interleave(T, 1) - z).masked_fill(is_opt, inf)
        w_margin = gap.amin(-1) / w_norm
        u_x = u0_x + GU
        u_norm = (u0_sq + 2 * (U * u0_x).sum(-1) + (U * GU).sum(-1)).clamp_min(0).sqrt()
        cos_u = (u0_umm + (U * umm_x).sum(-1)) / (u_norm * umm_norm)
        u_margin = (y * u_x).gather(1, opt_flat).amin(-1) / u_norm
        values = (
            loss,
            torch.where(trained, loss, terms.excess),
            -torch.log(loss),
            w_norm,
            (2 - 2 * cos_w).clamp_min(0).sqrt(),
            1 - cos_w,
            terms.non_opt.mean(-1),
            1 - terms.non_opt.mean(-1),
            w_margin,
            w_margin * wmm_norm,
            u_norm,
            (2 - 2 * cos_u).clamp_min(0).sqrt(),
            u_margin * umm_norm,
        )
        return torch.stack(values, dim=-1)

    # The logits z = z0 + K C and GU = G U are carried along with C and U, by the same updates
    # (K VC_t = beta K VC_{t-1} - a K g~_t): one product with K (and G) per step instead of two.
    # At the record steps they are formed afresh, so rounding cannot build up in the curves.
    z, GU = z0, torch.zeros_like(U)
    KVC, GVU = torch.zeros_like(C), torch.zeros_like(C)
    k_rec = 0
    for t in range(cfg0.steps + 1):
        recording = k_rec < len(record) and t == record[k_rec]
        if recording:
            z = z0 + per_run_mv(K, C)
            GU = per_run_mv(G, U) if any_trained else GU
        gamma = y * (u0_x + GU)
        terms = loss_terms(z.view(B, n, T), gamma.view(B, n, T), opt, cfg0.loss)
        gz = terms.dz.reshape(B, N)
        gu = torch.where(trained[:, None], (terms.du * y.view(B, n, T)).reshape(B, N), 0.0)
        scale = torch.maximum(gz.abs().amax(-1), gu.abs().amax(-1))
        bad = ~torch.isfinite(terms.loss) | ~torch.isfinite(scale)
        still = active & ~bad & (scale >= SATURATION_FLOOR)
        stopped = torch.where(active & ~still, t, stopped)
        diverged |= active & bad
        active = still
        if recording:
            curves[:, k_rec] = observe(z, GU, terms).cpu()
            k_rec += 1
        if t == cfg0.steps:
            break
        # Step of a * g~ with g~ = g / scale, so a = eta_t * scale (eta_t: the rule's step size).
        safe = torch.where(scale > 0, scale, 1.0)
        gz, gu = gz / safe[:, None], gu / safe[:, None]
        Kgz = per_run_mv(K, gz)
        g_norm = (gz * Kgz).sum(-1)
        if any_trained:
            Ggu = per_run_mv(G, gu)
            g_norm = g_norm + (gu * Ggu).sum(-1)
        g_norm = g_norm.clamp_min(0).sqrt()
        excess = torch.where(trained, terms.loss, terms.excess)
        # NGD, momentum and joint*: eta_ngd / N_t (N_t = ||g|| or L; ||g|| for joint_eq2),
        # capped, then the time factor (t+1)^-power (power 0 except for joint).
        normaliser = torch.where(by_loss, terms.loss / safe, g_norm)
        a_ngd = eta["ngd"] / normaliser
        a_polyak = eta["polyak"] * (excess / safe) / g_norm**2
        cap = torch.where(rule == _RULES["polyak"], cap_polyak, cap_ngd) * scale
        a = torch.where(rule == _RULES["polyak"], a_polyak, a_ngd)
        capped |= active & (rule != _RULES["gd"]) & (a > cap)
        a = torch.minimum(a, cap) / (t + 1) ** power
        a = torch.where(rule == _RULES["gd"], eta["gd"] * scale, a)
        a = torch.where(active, a, 0.0)
        keep, beta_, a_ = active[:, None], beta[:, None], a[:, None]
        VC = torch.where(keep, beta_ * VC - a_ * gz, 0.0)
        KVC = torch.where(keep, beta_ * KVC - a_ * Kgz, 0.0)
        C, z = C + VC, z + KVC
        if any_trained:
            VU = torch.where(keep, beta_ * VU - a_ * gu, 0.0)
            GVU = torch.where(keep, beta_ * GVU - a_ * Ggu, 0.0)
            U, GU = U + VU, GU + GVU

    steps_rec = torch.tensor(record)
    stopped_cpu = stopped.cpu()
    final = curves[:, -1].clone()
    for b in range(B):
        if stopped_cpu[b] >= 0:
            curves[b, steps_rec > stopped_cpu[b]] = math.nan
    summaries = []
    for b, (r, p) in enumerate(zip(runs, prepared, strict=True)):
        c = r.experiment
        if diverged[b]:
            status = "diverged"
        else:
            status = "converged" if stopped_cpu[b] >= 0 else "budget_exhausted"
        theory_rate = math.nan
        if c.optimizer == "ngd" and not c.train_decoder:
            theory_rate = math.exp(-c.eta_ngd / p.summary["wmm_norm"])
        elif c.optimizer == "polyak" and not c.train_decoder:
            theory_rate = math.exp(-c.eta_polyak)
        summaries.append(
            {
                "status": status,
                **p.summary,
                "capped": int(capped[b]),
                "saturated_step": int(stopped_cpu[b]) if status == "converged" else -1,
                "saturation_rate_theory": theory_rate,
                **{f"final_{m}": float(final[b, j]) for j, m in enumerate(CURVE_METRICS)},
            }
        )
    frame = pd.DataFrame(
        {
            "run": np.repeat(np.arange(B), len(record)),
            "step": np.tile(np.asarray(record), B),
            **{m: curves[..., j].reshape(-1).numpy() for j, m in enumerate(CURVE_METRICS)},
        }
    )
    return BundleResult(summaries=summaries, curves=frame)
