"""The NTK through its Jacobian features (its spectrum and drift without ``N x N`` matrices
where ``N > D``), and the spectral filter of GD-trained NTK regression (Def. F.1, Eq. 25)."""

from __future__ import annotations

import math

import torch

from sdyn.experiments.ntk.network import output_jacobian


def ntk_features(W: torch.Tensor, a: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Jacobian features ``J`` of the softmax network with ``H(W) = J J^T`` (Def. 3.6).

    ``J[(l, i), (r, k)] = D[i, l, r] x_ik / sqrt(m)`` with ``D`` from
    :func:`sdyn.experiments.ntk.output_jacobian`: rows output-major (index ``l*n + i``, as
    :func:`sdyn.experiments.ntk.ntk_gram`), columns the ``d_in`` coordinates of each neuron.
    ``ntk_features(W, a, X_te) @ ntk_features(W, a, X).mT`` is App. F's ``K*_te``.

    Shapes: W ``(B, d_in, m)``, a ``(B, d_out, m)``, X ``(B, n, d_in)`` ->
    ``(B, d_out n, m d_in)``.
    """
    D = output_jacobian(W, a, X)  # (B, n, d_out, m)
    B, n, d_out, m = D.shape
    J = D.transpose(1, 2)[..., None] * X[:, None, :, None, :]
    return J.reshape(B, d_out * n, m * X.shape[-1]) / math.sqrt(m)


def small_gram(J: torch.Tensor) -> torch.Tensor:
    """The smaller of ``J J^T`` (``N x N``, which is H) and ``J^T J`` (``D x D``): both have
    H's nonzero eigenvalues. Shapes: J ``(B, N, D)`` -> ``(B, min(N, D), min(N, D))``."""
    return J @ J.mT if J.shape[-2] <= J.shape[-1] else J.mT @ J


def ntk_spectrum(J: torch.Tensor, gram: torch.Tensor):
    """Eigenpairs of ``H = J J^T`` from ``gram = small_gram(J)``: ``(mu, U, JtU)``.

    ``mu`` ``(B, k)`` ascending, ``U`` ``(B, N, k)`` orthonormal eigenvectors, ``k = min(N, D)``,
    and ``JtU = J^T U`` ``(B, D, k)``, by which the NTK predictor reads them at new points
    (``K* U = J_te J^T U``). With ``N > D`` the other ``N - D`` eigenvalues of H are exactly 0
    (and ``lambda_min(H) = 0``); their eigenvectors are orthogonal to ``range(J)`` and do not
    enter the NTK predictor. There ``U = J V mu^-1/2`` from ``J^T J = V diag(mu) V^T``, with
    the columns of eigenvalues at or below ``N eps mu_max`` (rounding noise) set to 0, and
    ``JtU = V mu^1/2`` on the same columns: taken so, not as ``J^T U``, whose small-``mu``
    columns would carry ``J``'s rounding divided by ``sqrt(mu)`` (measured: the coupling gap
    moved by 1e-6 relative with the thread count).
    """
    mu, V = torch.linalg.eigh(gram)
    N, D = J.shape[-2:]
    if N <= D:
        return mu, V, J.mT @ V
    floor = N * torch.finfo(mu.dtype).eps * mu[:, -1:]
    kept = mu > floor
    scale = torch.where(kept, mu.clamp_min(floor).rsqrt(), 0.0)
    root = torch.where(kept, mu.clamp_min(0).sqrt(), 0.0)
    return mu, (J @ V) * scale[:, None, :], V * root[:, None, :]


def kernel_drift(J0: torch.Tensor, gram0: torch.Tensor, J: torch.Tensor) -> torch.Tensor:
    """``||H(W) - H*||_F`` per run, from the features ``J0`` of H* (``gram0 = small_gram(J0)``)
    and ``J`` of H(W) (``H = J J^T``), never forming ``N x N`` matrices when ``N > D``.

    There, with ``Delta = J - J0``, exactly ``H(W) - H* = X + X^T + Delta Delta^T`` with
    ``X = J0 Delta^T``, so from the ``D x D`` matrices ``G0 = J0^T J0`` (``gram0``),
    ``E = Delta^T Delta`` and ``C = J0^T Delta``:
    ``||H(W) - H*||_F^2 = 2 <G0, E> + 2 tr(C^2) + ||E||_F^2 + 4 tr(C E)``. Every term is of the
    drift's own size, so the drift keeps float64's resolution relative to itself; a difference
    of squared norms (``||J^T J||^2 + ||G0||^2 - 2 ||J0^T J||^2``, each of size ``||H||^2``) was
    off by up to 1e-3 at drifts of 4e-6 ``||H||`` (n = 1024, m = 256), at the same two
    products. With ``N <= D``, the ``N x N`` difference (good to ``eps ||H||``, as the
    features are).

    Shapes: J0, J ``(B, N, D)`` -> ``(B,)``.
    """
    if J.shape[-2] <= J.shape[-1]:
        return (J @ J.mT - gram0).flatten(1).norm(dim=-1)
    delta = J - J0
    E, C = delta.mT @ delta, J0.mT @ delta
    # ||E||^2 by norm, not square().sum(): one run's long sum is split across threads, a
    # bundle's is not (the sums of products held the bundle test's 1e-14).
    squares = 2 * (gram0 * E + C * C.mT) + 4 * C * E
    total = squares.flatten(1).sum(-1) + E.flatten(1).norm(dim=-1).square()
    return total.clamp_min(0).sqrt()


def gd_filter(mu: torch.Tensor, rate: torch.Tensor, steps: int | float) -> torch.Tensor:
    """``(1 - (1 - rate mu)^steps) / mu`` elementwise: GD's spectral filter on ``H*`` (Eq. 25).

    ``rate = eta m`` ``(B,)``, mu ``(B, k)`` eigenvalues of ``H*``. Equals ``rate * steps`` in the
    limit ``mu -> 0`` and ``1/mu`` as ``steps -> inf`` (for ``0 < rate mu < 2``).
    """
    q = rate[:, None] * mu
    zero = q == 0
    q = torch.where(zero, torch.ones_like(q), q)
    near = q.abs() < 0.5  # 1 - (1-q)^steps cancels for small q: expm1/log1p keep the digits
    near_value = -torch.expm1(steps * torch.log1p(-torch.where(near, q, 0.0))) / q
    far_value = (1 - torch.pow(1 - q, steps)) / q
    value = torch.where(near, near_value, far_value)
    return rate[:, None] * torch.where(zero, torch.full_like(q, float(steps)), value)


def vec(Y: torch.Tensor) -> torch.Tensor:
    """``vec(Y)`` output-major: ``(..., n, d_out) -> (..., d_out*n)``, index ``l*n + i``."""
    return Y.transpose(-1, -2).reshape(*Y.shape[:-2], -1)


def unvec(v: torch.Tensor, d_out: int) -> torch.Tensor:
    """The inverse of :func:`vec`: ``(..., d_out*n) -> (..., n, d_out)``."""
    return v.reshape(*v.shape[:-1], d_out, -1).transpose(-1, -2)
