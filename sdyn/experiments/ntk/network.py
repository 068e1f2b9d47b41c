"""The model: forward pass (Eq. 1), output Jacobian, loss, gradient, NTK Gram matrix
(Def. 3.6) and symmetric initialisation (Def. 3.7), batched over leading dimensions.

:class:`Pack` pads runs of different widths and sample sizes into one bundle; on a CPU the
outputs and the Gram matrix of a bundle come from the C++ kernel (:mod:`~.kernel`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sdyn.experiments.ntk.config import ACTIVATIONS
from sdyn.experiments.ntk.kernel import bundle_kernel


@dataclass
class Pack:
    """Runs of different widths m and sample sizes n padded into one bundle of shape (M, N).

    A run's padded neurons have ``a = 0`` and logits ``-inf`` (zero softmax weight, zero
    gradient, so their weights stay 0); its padded points have ``x = 0, y = 0`` and weight 0 in
    the loss. Its outputs, loss, gradient and NTK entries are then those of the unpadded run.

    Shapes: ``m`` ``(B, 1, 1)``, each run's width (in the bundle's dtype); ``logit_bias``
    ``(B, 1, M)``, 0 on a run's neurons and -inf on padding; ``point_weight`` ``(B, N, 1)``,
    1 on a run's points and 0 on padding.
    """

    m: torch.Tensor
    logit_bias: torch.Tensor
    point_weight: torch.Tensor

    @classmethod
    def of(cls, widths: list[int], sizes: list[int], M: int, N: int, dtype, device) -> Pack:
        """The pack of runs with widths ``widths`` and sample sizes ``sizes`` in (M, N)."""
        m = torch.tensor(widths, device=device)[:, None, None]
        n = torch.tensor(sizes, device=device)[:, None, None]
        neuron = torch.arange(M, device=device) < m  # (B, 1, M)
        point = torch.arange(N, device=device)[:, None] < n  # (B, N, 1)
        bias = torch.zeros(neuron.shape, dtype=dtype, device=device)
        bias.masked_fill_(~neuron, -math.inf)
        return cls(m=m.to(dtype), logit_bias=bias, point_weight=point.to(dtype))


def _logits(X: torch.Tensor, W: torch.Tensor, pack: Pack | None) -> torch.Tensor:
    Z = X @ W
    return Z if pack is None else Z + pack.logit_bias


def _width(W: torch.Tensor, pack: Pack | None):
    """m: an int, or for a packed bundle the ``(B, 1, 1)`` tensor of each run's width."""
    return W.shape[-1] if pack is None else pack.m


def _sqrt(m):
    return m.sqrt() if isinstance(m, torch.Tensor) else math.sqrt(m)


def kernel_normaliser(activation: str, m: int) -> float:
    """``c_m`` in ``H = J J^T / c_m``: m for softmax (Def. 3.6), 1 for relu/exp."""
    return float(m) if activation == "softmax" else 1.0


def forward(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor, activation: str = "softmax"):
    """Network outputs ``F`` (Eq. 1).

    On a CPU, bundles (3-d inputs, d <= 64, no autograd) take F from the C++ kernel of
    ntk_step.cpp, one pass per block of points: the score experiment evaluates 4000 held-out
    points at every record step, where torch's ``(n, m)`` intermediates fall out of the cache.

    Args:
        W: first layer, ``(..., d, m)``; column ``r`` is neuron ``w_r``.
        a: fixed second layer, ``(..., d_out, m)``.
        X: inputs, ``(..., n, d)``, rows ``x_i`` with ``||x_i|| <= 1``.
        activation: ``softmax`` (the paper), ``relu`` or ``exp`` (Table 1 baselines).

    Returns:
        F: ``(..., n, d_out)``, ``F[i, l] = m <a_l, softmax(W^T x_i)>`` for softmax,
        ``m^-1/2 sum_r a_lr phi(w_r^T x_i)`` otherwise.

    Raises:
        ValueError: unknown activation.
    """
    n, d_out = X.shape[-2], a.shape[-2]
    F = bundle_kernel("forward", W, a, X, activation, (n, d_out))
    if F is not None:
        return F
    Z = X @ W
    m = W.shape[-1]
    if activation == "softmax":
        return m * torch.softmax(Z, dim=-1) @ a.transpose(-1, -2)
    return _elementwise(Z, activation) @ a.transpose(-1, -2) / math.sqrt(m)


def _elementwise(Z: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "relu":
        return torch.relu(Z)
    if activation == "exp":
        return torch.exp(Z)
    raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")


def output_jacobian(
    W: torch.Tensor,
    a: torch.Tensor,
    X: torch.Tensor,
    activation: str = "softmax",
    pack: Pack | None = None,
):
    """``D[..., i, l, r] = dF_{i,l} / d(w_r^T x_i)``, so that ``dF_{i,l}/dw_r = D[i, l, r] x_i``.

    For softmax, ``D = m S_ir (a_lr - <a_l, S_i>) = m S_ir <v_{l,r}, S_i>`` (Claim 3.4, Def. 3.6).
    Shapes: W ``(..., d, m)``, a ``(..., d_out, m)``, X ``(..., n, d)`` -> ``(..., n, d_out, m)``;
    a packed bundle (see :class:`Pack`) has zeros on its padded neurons.
    """
    Z = _logits(X, W, pack)
    m = _width(W, pack)
    m = m[..., None] if isinstance(m, torch.Tensor) else m  # against (..., n, d_out, m)
    if activation == "softmax":
        S = torch.softmax(Z, dim=-1)
        aS = S @ a.transpose(-1, -2)  # <a_l, S_i>, (..., n, d_out)
        # In place on the one (..., n, d_out, m) buffer: this runs at every record step.
        return (a.unsqueeze(-3) - aS.unsqueeze(-1)).mul_(S.unsqueeze(-2)).mul_(m)
    if activation == "relu":
        dphi = (Z > 0).to(Z.dtype)
    elif activation == "exp":
        dphi = torch.exp(Z)
    else:
        raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")
    return a.unsqueeze(-3) * dphi.unsqueeze(-2) / _sqrt(m)


def loss(F: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """Summed squared loss ``L = 1/2 sum_{i,l} (F_il - y_il)^2`` (Def. 3.2).

    Shapes: F, Y ``(..., n, d_out)`` -> L ``(...)``.
    """
    return 0.5 * (F - Y).square().sum(dim=(-2, -1))


def loss_and_gradient(
    W: torch.Tensor,
    a: torch.Tensor,
    X: torch.Tensor,
    Y: torch.Tensor,
    activation: str = "softmax",
    pack: Pack | None = None,
):
    """Loss and its closed-form gradient with respect to W (Claim 3.4), sharing one forward pass.

    ``dL/dw_r = sum_i g_ir x_i`` with ``g_ir = sum_l (F_il - y_il) D[i, l, r]`` (see
    :func:`output_jacobian`); for softmax ``g = m S * (R a - <R, F>/m)`` with ``R = F - Y``, which
    avoids materialising the ``(n, d_out, m)`` Jacobian. In a packed bundle (:class:`Pack`) the
    residuals of padded points are zeroed, so they add nothing to L or the gradient.

    Shapes: W ``(..., d, m)``, a ``(..., d_out, m)``, X ``(..., n, d)``, Y ``(..., n, d_out)``.
    Returns ``(L, grad)`` with L ``(...)`` and grad ``(..., d, m)``.
    """
    Z = _logits(X, W, pack)
    m = _width(W, pack)
    if activation == "softmax":
        S = torch.softmax(Z, dim=-1)
        F = m * S @ a.transpose(-1, -2)
        R = F - Y if pack is None else (F - Y) * pack.point_weight
        G = m * S * (R @ a - (R * F).sum(dim=-1, keepdim=True) / m)
    else:
        phi = _elementwise(Z, activation)
        F = phi @ a.transpose(-1, -2) / _sqrt(m)
        R = F - Y if pack is None else (F - Y) * pack.point_weight
        dphi = (Z > 0).to(Z.dtype) if activation == "relu" else phi
        G = (R @ a) * dphi / _sqrt(m)
    return 0.5 * R.square().sum(dim=(-2, -1)), X.transpose(-1, -2) @ G


def ntk_gram(
    W: torch.Tensor,
    a: torch.Tensor,
    X: torch.Tensor,
    activation: str = "softmax",
    pack: Pack | None = None,
):
    """NTK Gram matrix ``H(W) = J J^T / c_m`` (Def. 3.6), output-major.

    ``[H_{l1,l2}]_{ij} = (1/c_m) x_i^T x_j sum_r D[i,l1,r] D[j,l2,r]``: block ``(l1, l2)`` is the
    ``n x n`` block at rows ``l1*n:(l1+1)*n`` and columns ``l2*n:(l2+1)*n``. On a CPU, bundles
    (3-d inputs, d <= 64) take ``D`` from the C++ kernel of ntk_step.cpp: the kernel-drift
    observation computes this at every record step, about half of a width sweep's training time.

    Shapes: W ``(..., d, m)``, a ``(..., d_out, m)``, X ``(..., n, d)``
    -> H ``(..., n*d_out, n*d_out)``. In a packed bundle (:class:`Pack`) the rows and columns of
    padded points are 0.
    """
    n, m, d_out = X.shape[-2], W.shape[-1], a.shape[-2]
    E = None if pack else bundle_kernel("jacobian", W, a, X, activation, (d_out * n, m))
    if E is None:
        D = output_jacobian(W, a, X, activation, pack)
        E = D.transpose(-3, -2).reshape(*D.shape[:-3], d_out * n, m)
    gram = X @ X.transpose(-1, -2)
    c_m = kernel_normaliser(activation, m) if pack is None or activation != "softmax" else pack.m
    return (E @ E.transpose(-1, -2)) * gram.repeat(*([1] * (gram.dim() - 2)), d_out, d_out) / c_m


def squared_movement(W: torch.Tensor, W0: torch.Tensor) -> torch.Tensor:
    """Squared distance of each neuron from its initialisation, ``||w_r - w_r(0)||^2``.

    Shapes: W, W0 ``(..., d, m)`` -> ``(..., m)``. Summed over d in place: torch's
    ``norm(dim=-2)``, a reduction over the strided axis, is about 20x slower at m = 4096, and
    this runs at every record step.
    """
    move = W - W0
    return move.mul_(move).sum(dim=-2)


def symmetric_init(
    n_models: int, d: int, m: int, d_out: int, sigma: float, generator: torch.Generator, **kw
):
    """Symmetric initialisation (Def. 3.7) of ``n_models`` networks.

    For each pair ``(2r, 2r+1)`` (0-based): ``w_2r = w_2r+1 ~ N(0, sigma^2 I_d)``,
    ``a_:,2r ~ Unif{-1,+1}^d_out`` and ``a_:,2r+1 = -a_:,2r``, so ``F(W(0), x) = 0`` for all x.

    Args:
        generator: the torch generator all draws come from (deterministic for a given seed).
        kw: ``dtype`` / ``device`` passed on to the tensors.

    Returns:
        ``(W, a)`` with shapes ``(n_models, d, m)`` and ``(n_models, d_out, m)``.

    Raises:
        ValueError: m is not a positive even number.
    """
    if m <= 0 or m % 2:
        raise ValueError(f"symmetric init needs an even width m > 0, got {m}")
    dtype = kw.get("dtype", torch.float64)
    W_half = sigma * torch.randn(n_models, d, m // 2, generator=generator, dtype=dtype)
    a_half = torch.randint(0, 2, (n_models, d_out, m // 2), generator=generator).to(dtype) * 2 - 1
    W = W_half.repeat_interleave(2, dim=-1)
    a = torch.stack([a_half, -a_half], dim=-1).reshape(n_models, d_out, m)
    device = kw.get("device", "cpu")
    return W.to(device), a.to(device)
