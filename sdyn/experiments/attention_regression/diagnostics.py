"""What the claims measure besides the loss: the distance to the manifold of population
minimisers (Thm 1-2, Lemma 3) and the Monte Carlo gradient bias ``||E grad L_N - grad L||``
(Thm 3)."""

from __future__ import annotations

import functools
import math

import torch

from sdyn.api import require
from sdyn.experiments.attention_regression.data import Problem, sample
from sdyn.experiments.attention_regression.kernel import loss_and_gradients

# The Monte Carlo of gradient_bias is done this many draws at a time (memory: draws x N x N).
GRAD_BIAS_CHUNK = 4

# Majorise-minimise iterations of the projection onto the manifold (see manifold_distance).
PROJECTION_ITERS = 30


def manifold_distance(V, K, prob: Problem, iters: int = PROJECTION_ITERS):
    """Distance to the manifold of population minimisers in the metric of Algorithm 1.

    ``dist^2 = min_O ||V - U S^{1/2} O||_F^2 + ||Sigma^{1/2} (K - Sigma^-1 O^T S^{1/2} Q^T)||_F^2``
    over orthogonal O (Thm 1, part 2). The K-part is weighted by Sigma, the metric in which the
    preconditioned step ``K -= eta Sigma^-1 grad_K`` is steepest descent ([derived]: the
    paper's Sigma-tilde norm). Expanded, the objective is ``const - 2 tr(M^T O) +
    tr(O Sigma^-1 O^T diag(S))`` with ``M = S^{1/2} U^T V + S^{1/2} Q^T K^T``; it is minimised by
    majorise-minimise (each step a polar decomposition, the objective never increases), started
    at the polar factor of M. That finds a local minimiser; on random points it matched the best
    of 100 random starts (tests check this). Starting from the previous record step's O instead
    was tried and is worse: it can track a local minimum that has stopped being the global one.

    Shapes: V ``(..., k, d)``, K ``(..., d, d)`` -> distance ``(...)`` and the minimising O
    ``(..., d, d)``.
    """
    Sigma, U, S, Q = (t.to(V) for t in (prob.Sigma, prob.U, prob.S, prob.Q))
    root = S.sqrt()
    Sigma_inv = torch.linalg.inv(Sigma)
    M = root[:, None] * (U.T @ V + Q.T @ K.transpose(-1, -2))
    lipschitz = 2.0 * float(S.max()) * float(torch.linalg.eigvalsh(Sigma_inv).max())

    def polar(A):
        left, _, right = torch.linalg.svd(A)
        return left @ right

    O = polar(M)
    for _ in range(iters):
        O = polar(2.0 * M - 2.0 * S[:, None] * (O @ Sigma_inv) + lipschitz * O)
    V_star = (U * root) @ O
    K_star = Sigma_inv @ O.transpose(-1, -2) @ (root[:, None] * Q.T)
    weighted = torch.linalg.cholesky(Sigma).transpose(-1, -2) @ (K - K_star)
    dist2 = (V - V_star).square().sum(dim=(-2, -1)) + weighted.square().sum(dim=(-2, -1))
    return dist2.sqrt(), O


def gradient_bias(V, K, prob: Problem, n: int, draws: int, generator: torch.Generator):
    """Monte Carlo estimate of ``||E grad L_N(V, K) - grad L(V, K)||_F`` (Thm 3).

    The expectation is over independent draws of the N training samples (the in-sample loss,
    the samples as their own context). Each draw's gradient is paired with a control variate
    whose mean is exactly ``grad L``: the gradient's first-order expansion in the context
    fluctuations. For query i the softmax weights are a self-normalised importance sample of
    the tilted distribution ``N(A_i, Sigma)``, ``A_i = Sigma K x_i``, with the exact likelihood
    ratios ``rho_ij = exp(x_j^T K x_i - x_i^T K^T Sigma K x_i / 2)``; with the self term left
    out, ``f_i = 1/N sum_{j != i} rho_ij (x_j - A_i)`` and ``F_i = 1/N sum_{j != i} rho_ij
    (x_j x_j^T - Sigma - A_i A_i^T)`` have conditional mean 0 given ``(x_i, y_i)``. The gradient
    at the population context moments (``m_i = A_i``, ``C_i = Sigma + A_i A_i^T``) plus its
    terms linear in ``(f_i, F_i)`` therefore has mean ``grad L``, and the difference to the
    sample gradient has mean ``E grad L_N - grad L`` and a per-draw spread of O(1/N) instead
    of O(N^-1/2) (the linear fluctuation cancels).

    Args:
        V: ``(k, d)``; K: ``(d, d)``; the point where the gradients are compared.
        n: samples per draw (N); draws: number of independent draws (>= 2).
        generator: the random stream of the draws.

    Returns:
        ``(bias, se)`` floats: ``sqrt(max(||mean||^2 - se^2, 0))``, unbiased for the squared
        bias, and ``se``, the Monte Carlo standard error of the mean (root of the summed
        per-coordinate variances of the mean), both in the Frobenius norm of ``(grad_V, grad_K)``.

    Raises:
        ValueError: fewer than 2 draws.
    """
    require(draws >= 2, f"gradient_bias needs >= 2 draws, got {draws}")
    Sigma = prob.Sigma.to(V)
    d = Sigma.shape[0]
    total = torch.zeros(V.numel() + K.numel(), dtype=torch.float64)
    square = torch.zeros_like(total)
    done = 0
    while done < draws:
        chunk = min(GRAD_BIAS_CHUNK, draws - done)
        X, Y = (t.to(V) for t in sample(prob, n, generator, (chunk,)))
        _, gV, gK = loss_and_gradients(V, K, X, X, Y)
        KX = X @ K.T  # rows K x_i
        A = KX @ Sigma  # rows A_i = Sigma K x_i (Sigma is symmetric)
        # log rho_ij = [K x_i, -x_i^T K^T Sigma K x_i / 2] . [x_j, 1]: one product, and the
        # exp in place, so the (N, N) matrix is written once; then the self term j = i is zeroed.
        ones = torch.ones_like(X[..., :1])
        half_norm = -0.5 * (KX * A).sum(dim=-1, keepdim=True)
        rho = (torch.cat([KX, half_norm], -1) @ torch.cat([X, ones], -1).transpose(-1, -2)).exp_()
        rho.diagonal(dim1=-2, dim2=-1).zero_()
        # Row sums, sum_j rho_ij x_j and sum_j rho_ij x_j x_j^T in one pass over rho.
        outer = (X[..., :, None] * X[..., None, :]).flatten(-2)
        moments = rho @ torch.cat([ones, X, outer], -1) / n
        mass, rho_X, rho_outer = moments.split([1, d, d * d], dim=-1)
        T = Sigma + A[..., :, None] * A[..., None, :]  # tilted second moments
        f = rho_X - mass * A
        F = rho_outer.unflatten(-1, (d, d)) - mass[..., None] * T
        G0 = 2.0 * (A @ V.T - Y) / n
        G = G0 + 2.0 * f @ V.T / n
        cV = G.transpose(-1, -2) @ A + G0.transpose(-1, -2) @ f
        g0, g = G0 @ V, G @ V
        dot = functools.partial(torch.sum, dim=-1, keepdim=True)
        h = (
            (T @ g[..., None]).squeeze(-1)
            + (F @ g0[..., None]).squeeze(-1)
            - dot(g * A) * A
            - dot(g0 * f) * A
            - dot(g0 * A) * f
        )
        cK = h.transpose(-1, -2) @ X
        diff = torch.cat([(gV - cV).flatten(-2), (gK - cK).flatten(-2)], dim=-1)
        diff = diff.to("cpu", torch.float64)
        total += diff.sum(dim=0)
        square += diff.square().sum(dim=0)
        done += chunk
    mean = total / draws
    variance = (square - draws * mean.square()) / (draws - 1)
    se2 = float(variance.sum()) / draws
    bias2 = float(mean.square().sum()) - se2
    return math.sqrt(max(bias2, 0.0)), math.sqrt(max(se2, 0.0))
