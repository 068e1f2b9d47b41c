"""The model [derived]: softmax self-attention's prediction and empirical loss (Eq. 1), the
regulariser, the exact population loss (Eq. 2) and its gradients, and Algorithm 1's spectral
initialisation. Plain tensors, batched over leading dimensions."""

from __future__ import annotations

import torch


def predict(V: torch.Tensor, K: torch.Tensor, X_context: torch.Tensor, X_query: torch.Tensor):
    """Softmax self-attention prediction ``y_hat(x) = V sum_j softmax_j(x_j^T K x) x_j`` [derived].

    Args:
        V: value matrix, ``(..., k, d)``.
        K: key-query product, ``(..., d, d)``.
        X_context: the covariates attended to, ``(..., c, d)``.
        X_query: the covariates to predict for, ``(..., q, d)``.

    Returns:
        ``(..., q, k)``: row i is ``y_hat(x_i)``, attention over the c context rows.
    """
    scores = X_query @ K.transpose(-1, -2) @ X_context.transpose(-1, -2)  # x_j^T K x_i
    return torch.softmax(scores, dim=-1) @ X_context @ V.transpose(-1, -2)


def empirical_loss(V, K, X_context, X_query, Y_query) -> torch.Tensor:
    """Empirical loss ``1/q sum_i ||y_i - y_hat(x_i)||^2`` over the query rows (Eq. 1 [derived]).

    With ``X_context = X_query = X`` this is the in-sample loss L_N; with a minibatch of queries
    and the full context it is an unbiased estimate of L_N. Shapes as :func:`predict`,
    ``Y_query`` ``(..., q, k)`` -> ``(...)``.
    """
    return (predict(V, K, X_context, X_query) - Y_query).square().sum(dim=(-2, -1)) / (
        X_query.shape[-2]
    )


def regularizer_and_gradients(V, K, Sigma_hat, c):
    """Regulariser ``R = c ||V^T V - Sigma_hat K K^T Sigma_hat||_F^2`` and its gradients [derived].

    The balancing term of Tu et al. (2016) for the factorisation ``V (Sigma_hat K)``; it
    vanishes on the manifold of minimisers (Thm 1). With ``D = V^T V - Sigma_hat K K^T
    Sigma_hat``: ``grad_V = 4 c V D``, ``grad_K = -4 c Sigma_hat D Sigma_hat K``.

    Shapes: V ``(..., k, d)``, K and Sigma_hat ``(..., d, d)``, c a float or a tensor
    broadcastable to ``(...)`` -> R ``(...)``, grad_V ``(..., k, d)``, grad_K ``(..., d, d)``.
    """
    c = torch.as_tensor(c, dtype=V.dtype, device=V.device)
    SK = Sigma_hat @ K
    D = V.transpose(-1, -2) @ V - SK @ SK.transpose(-1, -2)
    scale = c[..., None, None]
    return (
        c * D.square().sum(dim=(-2, -1)),
        4.0 * scale * V @ D,
        -4.0 * scale * Sigma_hat @ D @ SK,
    )


def population_loss(V, K, Sigma, W_star, noise_var: float) -> torch.Tensor:
    """Exact population loss (Eq. 2): ``||(V Sigma K - W*) Sigma^{1/2}||_F^2 + k s^2``.

    [derived, exact]: for ``x' ~ N(0, Sigma)``, ``E exp(x'^T K x) = exp(x^T K^T Sigma K x / 2)``
    and ``E x' exp(x'^T K x) = Sigma K x exp(...)``, so the ratio of expectations predicts
    ``V Sigma K x`` (Thm 1, part 1).

    Shapes: V ``(..., k, d)``, K ``(..., d, d)``, Sigma ``(d, d)``, W_star ``(k, d)`` -> ``(...)``.
    """
    E = V @ Sigma @ K - W_star
    return (E @ Sigma * E).sum(dim=(-2, -1)) + irreducible_loss(W_star.shape[0], noise_var)


def irreducible_loss(k: int, noise_var: float) -> float:
    """``L_irr = k s^2``, the population loss of the Bayes predictor ``W* x`` (Thm 1)."""
    return k * noise_var


def population_gradients(V, K, Sigma, W_star):
    """Gradients of :func:`population_loss`: with ``E = V Sigma K - W*``,
    ``grad_V = 2 E Sigma K^T Sigma`` and ``grad_K = 2 Sigma V^T E Sigma``.

    Shapes as :func:`population_loss` -> ``(..., k, d)`` and ``(..., d, d)``.
    """
    E = V @ Sigma @ K - W_star
    return 2.0 * E @ Sigma @ K.transpose(-1, -2) @ Sigma, 2.0 * Sigma @ V.transpose(
        -1, -2
    ) @ E @ Sigma


def spectral_init(X: torch.Tensor, Y: torch.Tensor):
    """Algorithm 1's data-dependent initialisation [derived].

    ``Sigma_hat = X^T X / N`` (the mean is known to be 0), ``W_hat = Y^T X (X^T X)^-1`` (OLS) with
    SVD ``U S Q^T``; ``V0 = U S^{1/2}``, ``K0 = Sigma_hat^-1 S^{1/2} Q^T``, so that
    ``V0 Sigma_hat K0 = W_hat`` and ``V0^T V0 = Sigma_hat K0 K0^T Sigma_hat`` (Lemma 3).

    Sign convention: an SVD fixes each singular pair ``(u_j, q_j)`` only up to a common sign,
    and LAPACK builds differ in the one they return. ``W_hat`` does not depend on it, but V0
    and K0, hence the softmax attention, do (31% in the initial excess loss on one seed). Each
    pair is therefore flipped so that the largest-magnitude entry of ``u_j`` is positive (the
    first such entry on ties).

    Shapes: X ``(..., N, d)``, Y ``(..., N, k)`` -> V0 ``(..., k, d)``, K0 ``(..., d, d)``,
    Sigma_hat ``(..., d, d)``, W_hat ``(..., k, d)``.

    Raises:
        torch.linalg.LinAlgError: ``X^T X`` is singular (fewer than d independent samples).
    """
    gram = X.transpose(-1, -2) @ X
    W_hat = torch.linalg.solve(gram, X.transpose(-1, -2) @ Y).transpose(-1, -2)
    Sigma_hat = gram / X.shape[-2]
    U, S, Qt = torch.linalg.svd(W_hat, full_matrices=False)
    pivot = U.abs().argmax(dim=-2, keepdim=True)  # (..., 1, r): row of each column's largest
    sign = torch.where(U.gather(-2, pivot) < 0, -1.0, 1.0).to(U.dtype)
    U, Qt = U * sign, Qt * sign.transpose(-1, -2)
    root = S.sqrt()
    V0 = U * root[..., None, :]
    K0 = torch.linalg.solve(Sigma_hat, root[..., :, None] * Qt)
    return V0, K0, Sigma_hat, W_hat
