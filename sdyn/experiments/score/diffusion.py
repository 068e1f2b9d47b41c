"""The diffusion mathematics of the score experiment: a Gaussian-mixture p0, its exact scores,
the reference predictors, the training-time density, the reverse-SDE sampler and the MMD.

Source: "Exploring the Frontiers of Softmax" (softmax-NTK paper, arXiv 2405.03251) §6.1;
``docs/theory/softmax-ntk.md#derived`` (the [derived] items below: why, and their readings).
Every function takes the experiment's config ``cfg`` (:class:`~.config.ScoreConfig`) for the
forward process (``schedule``, ``beta_min``, ``beta_max``, ``beta``, ``T``, ``T0``) and the loss
weighting (``weighting``, ``time_sampling``), and the mixture ``data`` (:class:`GMMData`).

* ``p0 = sum_k w_k N(mu_k, diag(v_k))``. The forward process ``dx = -1/2 g(t) x dt +
  sqrt(g(t)) dB`` (Eq. 3) gives [derived] ``x(t) | x(0) ~ N(alpha_t x(0), (1 - alpha_t^2) I)``
  with ``alpha_t = exp(-1/2 int_0^t g)``, so every marginal p_t is again a Gaussian mixture and
  its score, density and posterior mean ``E[x0 | x_t]`` are exact.
* [derived, Tweedie] a predictor ``F(t, x)`` of ``E[x0 | x_t = x]`` gives the score estimate
  ``s(t, x) = (alpha_t F - x) / (1 - alpha_t^2)``. Two references are predictors too: the
  single Gaussian with p0's mean and covariance (its exact posterior mean) and the zero output
  (the symmetric initialisation's network).
* Eq. (6) with weight ``lambda(t)``, written for the label x0, weighs ``||F - x0||^2`` by
  ``c(t) = lambda(t) alpha_t^2 / (1 - alpha_t^2)^2``. The paper's loss
  ``1/2 sum_j ||F(x_j) - y_j||^2`` with ``t_j ~ U(T0, T)`` is Eq. (6) for
  ``lambda = (1 - alpha^2)^2 / alpha^2`` (``weighting=regression``); with ``t_j`` drawn from
  the density proportional to ``c(t)`` (``time_sampling=weighted``) the same sum estimates
  Eq. (6) for the configured ``lambda(t)``.

Shapes: rows are samples; t ``(...)``, x ``(..., d)``. Nothing here knows of Ray or MLflow.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from sdyn.experiments.score.config import GMMData, ScoreConfig


def g_schedule(t: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """The noise rate ``g(t)`` of Eq. (3), elementwise: linear VP schedule or constant."""
    if cfg.schedule == "linear":
        return cfg.beta_min + (cfg.beta_max - cfg.beta_min) * t / cfg.T
    return torch.full_like(t, cfg.beta)


def alpha(t: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """``alpha_t = exp(-1/2 int_0^t g(s) ds)`` elementwise ([derived] from Eq. 3's solution)."""
    if cfg.schedule == "linear":
        integral = cfg.beta_min * t + (cfg.beta_max - cfg.beta_min) * t.square() / (2 * cfg.T)
    else:
        integral = cfg.beta * t
    return torch.exp(-0.5 * integral)


def weighting(t: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """``lambda(t)`` of Eq. (5), elementwise. [derived] choices, the paper leaves it open:
    ``variance`` ``1 - alpha_t^2`` (the usual denoising weight), ``regression``
    ``(1 - alpha_t^2)^2 / alpha_t^2`` (the score error becomes the regression error
    ``E||F - E[x0|x_t]||^2`` that Claim G.1 decomposes), ``none`` 1."""
    a2 = alpha(t, cfg).square()
    if cfg.weighting == "variance":
        return 1 - a2
    if cfg.weighting == "regression":
        return (1 - a2).square() / a2
    return torch.ones_like(t)


def label_weight(t: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """``c(t) = lambda(t) alpha_t^2 / (1 - alpha_t^2)^2``: the weight Eq. (6) puts on
    ``||F - x0||^2`` (and Eq. 5 on ``||F - E[x0|x_t]||^2``), elementwise."""
    a2 = alpha(t, cfg).square()
    return weighting(t, cfg) * a2 / (1 - a2).square()


def sample_times(cfg: ScoreConfig, size: int, rng: np.random.Generator) -> np.ndarray:
    """Training times ``(size,)`` on ``[T0, T]``: ``time_sampling=uniform`` is §6.1's
    ``U(T0, T)``; ``weighted`` draws from the density proportional to :func:`label_weight`
    (inverse CDF on a grid of 4097 times, trapezoidal), so that the paper's unweighted loss
    estimates Eq. (6) with the configured ``lambda(t)`` (see the module docstring)."""
    if cfg.time_sampling == "uniform":
        return rng.uniform(cfg.T0, cfg.T, size)
    grid = np.linspace(cfg.T0, cfg.T, 4097)
    density = label_weight(torch.from_numpy(grid), cfg).numpy()
    cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2)])
    return np.interp(rng.uniform(size=size), cdf / cdf[-1], grid)


def _mixture_tensors(data: GMMData, like: torch.Tensor):
    return (torch.as_tensor(v, dtype=like.dtype, device=like.device) for v in data.mixture())


def _components(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig, data: GMMData):
    """Log joint weights ``(..., K)`` and the means, variances ``(..., K, d)`` of p_t at x."""
    w, mu, v = _mixture_tensors(data, x)
    a = alpha(t, cfg)[..., None, None]
    mean, var = a * mu, a.square() * v + (1 - a.square())
    diff = x[..., None, :] - mean
    log_joint = torch.log(w) - 0.5 * (diff.square() / var + torch.log(2 * math.pi * var)).sum(-1)
    return log_joint, diff, var


def log_density(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig, data: GMMData):
    """``log p_t(x)``, exact: p_t mixes ``N(alpha_t mu_k, alpha_t^2 v_k + 1 - alpha_t^2)``.

    Shapes: t ``(...)``, x ``(..., d)`` -> ``(...)``. ``t = 0`` gives ``log p0``.
    """
    log_joint, _, _ = _components(t, x, cfg, data)
    return torch.logsumexp(log_joint, dim=-1)


def true_score(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig, data: GMMData):
    """``grad_x log p_t(x)``, exact: ``sum_k r_k(x) (alpha_t mu_k - x) / var_k``.

    Shapes: t ``(...)``, x ``(..., d)`` -> ``(..., d)``.
    """
    log_joint, diff, var = _components(t, x, cfg, data)
    r = torch.softmax(log_joint, dim=-1)[..., None]
    return -(r * diff / var).sum(dim=-2)


def posterior_mean(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig, data: GMMData):
    """``E[x0 | x_t = x]``, exact: ``sum_k r_k(x) (mu_k + alpha_t v_k / var_k (x - alpha_t mu_k))``.

    The regression target ``F_*`` of §6.1. Shapes: t ``(...)``, x ``(..., d)`` -> ``(..., d)``.
    """
    log_joint, diff, var = _components(t, x, cfg, data)
    _, mu, v = _mixture_tensors(data, x)
    r = torch.softmax(log_joint, dim=-1)[..., None]
    return (r * (mu + alpha(t, cfg)[..., None, None] * v / var * diff)).sum(dim=-2)


def gaussian_posterior_mean(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig, data: GMMData):
    """The single-Gaussian baseline as a predictor: ``E[x0 | x_t = x]`` when p0 is replaced by
    ``N(m0, S0)`` with p0's mean and covariance (:meth:`GMMData.moments`),
    ``m0 + alpha_t S0 C_t^-1 (x - alpha_t m0)`` with ``C_t = alpha_t^2 S0 + (1 - alpha_t^2) I``.
    Its Tweedie score (:func:`score_from_output`) is that Gaussian's exact score,
    ``-C_t^-1 (x - alpha_t m0)``.

    Shapes: t ``(...)``, x ``(..., d)`` -> ``(..., d)``.
    """
    mean, cov = (torch.as_tensor(v, dtype=x.dtype, device=x.device) for v in data.moments())
    a = alpha(t, cfg)[..., None, None]
    C = a.square() * cov + (1 - a.square()) * torch.eye(data.d, dtype=x.dtype, device=x.device)
    centred = (x - a[..., 0] * mean)[..., None]
    return mean + (a * cov @ torch.linalg.solve(C, centred))[..., 0]


def score_from_output(F: torch.Tensor, t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig):
    """[derived, Tweedie] ``s(t, x) = (alpha_t F - x) / (1 - alpha_t^2)``.

    Shapes: F, x ``(..., d)``, t ``(...)`` -> ``(..., d)``.
    """
    a = alpha(t, cfg)[..., None]
    return (a * F - x) / (1 - a.square())


def sample_p0(data: GMMData, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` draws of p0, a float64 array ``(size, d)``."""
    w, mu, v = data.mixture()
    k = rng.choice(len(w), size=size, p=w)
    return mu[k] + np.sqrt(v[k]) * rng.standard_normal((size, data.d))


def weighted_score_error(
    F: torch.Tensor, t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig, data: GMMData
) -> torch.Tensor:
    """The integrand of the score error (Eq. 5) at held-out points:
    ``lambda(t) ||s(t, x) - grad log p_t(x)||^2`` with ``s`` the Tweedie score of the predictor
    output ``F`` (:func:`score_from_output`). Its mean over ``x ~ p_t`` with t uniform
    (stratified) on ``[T0, T]`` estimates ``1/(T-T0) int lambda(t) E||s - grad log p_t||^2 dt``.

    Shapes: F, x ``(..., d)``, t ``(...)`` -> ``(...)``.
    """
    s = score_from_output(F, t, x, cfg)
    return weighting(t, cfg) * (s - true_score(t, x, cfg, data)).square().sum(-1)


def draw(cfg: ScoreConfig, data: GMMData, size: int, rng: np.random.Generator, t=None):
    """Draw ``(t, x0, xt)``: ``x0 ~ p0``, t from :func:`sample_times` (unless given),
    ``xt ~ p_{t|0}``.

    Returns float64 numpy arrays ``(size,)``, ``(size, d)``, ``(size, d)``.
    """
    x0 = sample_p0(data, size, rng)
    if t is None:
        t = sample_times(cfg, size, rng)
    a = alpha(torch.from_numpy(t), cfg).numpy()[:, None]
    xt = a * x0 + np.sqrt(1 - a**2) * rng.standard_normal((size, data.d))
    return t, x0, xt


def reverse_sde(score, y0: torch.Tensor, noise: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """Euler-Maruyama for the reverse SDE (Eq. 4) from ``t = T`` down to ``t = T0``.

    ``y <- y + h (g y / 2 + g score(t, y)) + sqrt(g h) xi`` on ``len(noise)`` uniform steps.

    Args:
        score: ``score(t, y)`` with t a float and y ``(..., d)``, returning ``(..., d)``.
        y0: the start ``(..., d)``, drawn from N(0, I).
        noise: standard normal increments ``(steps, ..., d)``.

    Returns the samples at ``T0``, ``(..., d)``.
    """
    h = (cfg.T - cfg.T0) / len(noise)
    y = y0
    for k, xi in enumerate(noise):
        t = cfg.T - k * h
        g = float(g_schedule(torch.tensor(t), cfg))
        y = y + h * (0.5 * g * y + g * score(t, y)) + math.sqrt(g * h) * xi
    return y


def mmd(x: torch.Tensor, y: torch.Tensor, bandwidth: torch.Tensor) -> torch.Tensor:
    """Maximum mean discrepancy with a multi-scale Gaussian kernel: the root of the biased
    (V-statistic) MMD^2 averaged over the kernels of widths ``bandwidth / 2^k``, k = 0..3.

    The smaller widths resolve a mixture's modes, which a single kernel as wide as the median
    distance between points smooths over (it then sees little more than the mean and the
    covariance, which the single-Gaussian baseline matches). Its finite-sample floor is that of
    the exact score's samples at the same sample size.

    Shapes: x ``(..., p, d)``, y ``(..., q, d)``, bandwidth ``(...)`` -> ``(...)``, >= 0.
    """
    scales = bandwidth[..., None] / 2.0 ** torch.arange(4).to(bandwidth)  # (..., 4)

    def k(u, v):  # (..., 4, p, q)
        squared = torch.cdist(u, v).square()[..., None, :, :]
        return torch.exp(-squared / (2 * scales[..., None, None].square()))

    value = k(x, x).mean((-2, -1)) + k(y, y).mean((-2, -1)) - 2 * k(x, y).mean((-2, -1))
    return value.mean(-1).clamp_min(0).sqrt()
