"""Score estimation for a diffusion model with the two-layer softmax network (``experiment=score``).

Source: "Exploring the Frontiers of Softmax" (softmax-NTK paper, arXiv 2405.03251) §6 and
App. F-G; ``shared/theory.md`` §2. The network, its gradient, NTK and GD are the NTK experiment's
(:mod:`sdyn.experiments.ntk`), imported, not copied.

Setting (rows are samples, PyTorch order):

* ``p0`` is a Gaussian mixture in R^d with diagonal covariances, so every marginal ``p_t`` of the
  forward process ``dx = -1/2 g(t) x dt + sqrt(g(t)) dB`` (Eq. 3) is again a Gaussian mixture and
  ``grad log p_t`` is exact: the score error is computed, not estimated by a second model.
  [derived] ``x(t) | x(0) ~ N(alpha_t x(0), (1 - alpha_t^2) I)`` with
  ``alpha_t = exp(-1/2 int_0^t g)``; ``g`` is ``linear`` (VP-SDE) or ``constant``.
* Training set (§6.1): ``x0_i ~ p0``, ``t_i ~ U(T0, T)``, ``xt_i ~ p_{t|0}(.|x0_i)``; input
  ``(t_i, xt_i)``, label ``x0_i`` (a noisy label of ``E[x0 | xt]``).
  [derived] The input is embedded on the unit sphere of R^{d+2} as ``u = z / ||z||`` with
  ``z = (t/T, x/input_scale, input_bias)``: injective (``z = u / u_last * input_bias``), smooth,
  ``||u|| = 1`` (Assumption 6.1), and the constant coordinate keeps the NTK non-degenerate.
* The network ``F`` (d outputs) is trained by the NTK experiment's GD for ``steps`` iterations
  (the early-stopping time T^ of Thm 6.5) with ``eta = lr_scale / (m lambda_max(H(0)))``.
  [derived, Tweedie] score estimate ``s_W(t, x) = (alpha_t F(t, x) - x) / (1 - alpha_t^2)``.
* Score error (Eq. 5 on ``[T0, T]``): ``1/(T-T0) int lambda(t) E||s_W - grad log p_t||^2 dt`` by
  Monte Carlo on held-out draws (t stratified). [derived] ``lambda(t)``: ``variance``
  (``1 - alpha_t^2``, the usual denoising weight), ``regression`` (``(1-alpha_t^2)^2/alpha_t^2``,
  which makes the score error equal the regression error ``E||F - E[x0|xt]||^2`` that Claim G.1
  decomposes) or ``none`` (1).
* NTK regression (Def. F.1, Eq. 25): the kernel predictor trained by GD with the same step size
  and number of steps, ``F_ntk(t) = K* (H*)^-1 (I - (I - eta m H*)^t) vec(Y)`` (its limit is
  ``K* (H*)^-1 vec(Y)``); the coupling gap ``||F_nn - F_ntk||`` on held-out points (Thm F.2).
* Sampling: the reverse SDE (Eq. 4) with the learned score, Euler-Maruyama from ``N(0, I)`` at
  ``T`` down to ``T0``; sample quality by MMD against fresh ``p0`` draws and the mixture's mean
  log-likelihood, with the exact score's sampler (same noise) as the control.

This module knows nothing of Ray or MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from sdyn.experiments.common import (
    BundleResult,
    Claim,
    Run,
    log_spaced_steps,
    require,
    require_recording,
    require_sample_sizes,
    resolve_device,
)
from sdyn.experiments.ntk import (
    forward,
    gd,
    kernel_normaliser,
    loss,
    ntk_gram,
    output_jacobian,
    squared_movement,
    symmetric_init,
)

SCHEDULES = ("linear", "constant")
WEIGHTINGS = ("variance", "regression", "none")


@dataclass
class ScoreConfig:
    """Hyperparameters of one score-estimation run (the ``experiment=score`` schema).

    Units: ``steps`` in GD iterations (the early-stopping time T^); ``T``, ``T0`` in diffusion
    time; ``beta_*`` in 1/time; ``lr_scale`` is ``eta * m * lambda_max(H(0))``.
    """

    name: str = "score"
    n: int = 64  # training points
    m: int = 1024  # width; even (symmetric init)
    sigma: float = 1.0  # init scale, w_r ~ N(0, sigma^2 I)
    steps: int = 512  # GD budget = early-stopping time T^
    lr_scale: float = 1.0  # eta = lr_scale / (m lambda_max(H(0)))
    schedule: str = "linear"  # linear: g = beta_min + (beta_max - beta_min) t/T; constant: beta
    beta_min: float = 0.1
    beta_max: float = 20.0
    beta: float = 1.0
    T: float = 1.0  # end of the forward process
    T0: float = 0.01  # start of the training/evaluation window, and where sampling stops
    weighting: str = "variance"  # lambda(t): variance | regression | none
    input_scale: float = 2.0  # x enters the network as x / input_scale
    input_bias: float = 1.0  # the constant coordinate of the embedding
    n_eval: int = 4000  # held-out Monte Carlo draws of the score error
    n_coupling: int = 500  # the first n_coupling of them also measure the coupling gap
    n_samples: int = 500  # reverse-SDE samples
    sampler_steps: int = 200  # Euler-Maruyama steps of the reverse SDE
    record_points: int = 30  # log-spaced curve points (<= 200 reach MLflow)
    dtype: str = "float64"

    def __post_init__(self) -> None:
        require(self.n >= 2, f"experiment.n must be >= 2, got {self.n}")
        require(
            self.m > 0 and self.m % 2 == 0,
            f"experiment.m must be a positive even width (symmetric init), got {self.m}",
        )
        require(self.sigma > 0, f"experiment.sigma must be > 0, got {self.sigma}")
        require(self.steps >= 1, f"experiment.steps must be >= 1, got {self.steps}")
        require(self.lr_scale > 0, f"experiment.lr_scale must be > 0, got {self.lr_scale}")
        require(
            self.schedule in SCHEDULES,
            f"experiment.schedule must be one of {SCHEDULES}, got {self.schedule!r}",
        )
        require(
            0 < self.beta_min <= self.beta_max,
            f"experiment.beta_min, beta_max must satisfy 0 < beta_min <= beta_max, "
            f"got {self.beta_min}, {self.beta_max}",
        )
        require(self.beta > 0, f"experiment.beta must be > 0, got {self.beta}")
        require(
            0 < self.T0 < self.T,
            f"experiment.T0, T must satisfy 0 < T0 < T, got {self.T0}, {self.T}",
        )
        require(
            self.weighting in WEIGHTINGS,
            f"experiment.weighting must be one of {WEIGHTINGS}, got {self.weighting!r}",
        )
        for key in ("input_scale", "input_bias"):
            value = getattr(self, key)
            require(value > 0, f"experiment.{key} must be > 0, got {value}")
        require(self.n_eval >= 2, f"experiment.n_eval must be >= 2, got {self.n_eval}")
        require(
            1 <= self.n_coupling <= self.n_eval,
            f"experiment.n_coupling must be in [1, n_eval], got {self.n_coupling}",
        )
        require(self.n_samples >= 2, f"experiment.n_samples must be >= 2, got {self.n_samples}")
        require(
            self.sampler_steps >= 1,
            f"experiment.sampler_steps must be >= 1, got {self.sampler_steps}",
        )
        require_recording(self)


@dataclass
class GMMData:
    """``data=gmm``: p0 = sum_k w_k N(mu_k, diag(v_k)) in R^d.

    Defaults: ``components`` equal-weight components with means evenly spaced on a circle of
    ``radius`` in the first two coordinates (zero elsewhere; on a segment for d = 1) and
    isotropic standard deviation ``std``. ``means`` (K x d), ``variances`` (K x d, the diagonal
    covariances) and ``weights`` (K) replace them when given. With the defaults ``||x0|| <= 1``
    for all but a vanishing fraction of draws (Assumption 6.1 for the labels).
    """

    name: str = "gmm"
    d: int = 2
    components: int = 4
    radius: float = 0.6
    std: float = 0.15
    means: list[list[float]] | None = None
    variances: list[list[float]] | None = None
    weights: list[float] | None = None

    def __post_init__(self) -> None:
        require(self.d >= 1, f"data.d must be >= 1, got {self.d}")
        require(self.components >= 1, f"data.components must be >= 1, got {self.components}")
        require(self.radius >= 0, f"data.radius must be >= 0, got {self.radius}")
        require(self.std > 0, f"data.std must be > 0, got {self.std}")
        K, d = self.components, self.d
        for key in ("means", "variances"):
            value = getattr(self, key)
            require(
                value is None or (len(value) == K and all(len(row) == d for row in value)),
                f"data.{key} must be {K} rows (data.components) of {d} numbers (data.d)",
            )
        require(
            self.variances is None or all(v > 0 for row in self.variances for v in row),
            "data.variances must be > 0",
        )
        require(
            self.weights is None or (len(self.weights) == K and all(w > 0 for w in self.weights)),
            f"data.weights must be {K} positive numbers (data.components)",
        )

    def mixture(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(weights (K,), means (K, d), variances (K, d))`` of p0, weights summing to 1."""
        K, d = self.components, self.d
        if self.means is not None:
            means = np.asarray(self.means, dtype=float)
        elif d == 1:
            means = np.linspace(-self.radius, self.radius, K)[:, None]
        else:
            angle = 2 * math.pi * np.arange(K) / K
            means = np.zeros((K, d))
            means[:, 0], means[:, 1] = self.radius * np.cos(angle), self.radius * np.sin(angle)
        if self.variances is not None:
            variances = np.asarray(self.variances, dtype=float)
        else:
            variances = np.full((K, d), self.std**2)
        weights = np.ones(K) if self.weights is None else np.asarray(self.weights, dtype=float)
        return weights / weights.sum(), means, variances


DATA = {"gmm": GMMData}


@dataclass
class SamplesGrid:
    """``+grid=samples``: n over a geometric range, the width tied to n as Thm 6.5 asks.

    Thm 6.5 takes ``m = Omega(lambda^-2 n^3 d^3 ...)``; here ``m(n) = width_factor *
    n^width_exponent`` rounded to an even number and capped at ``width_max`` (a CPU budget; the
    cap is reported per run as ``experiment.m``). The GD budget grows with n as
    ``steps(n) = steps_factor * n^steps_exponent`` (Assumption G.3: the early-stopping error
    ``eps(n, T^)`` must vanish as n grows, so T^ grows with n).
    """

    name: str = "samples"
    n: list[int] = field(default_factory=lambda: [16, 32, 64, 128, 256])
    width_factor: float = 0.0625
    width_exponent: float = 3.0
    width_max: int = 1024
    steps_factor: float = 0.125
    steps_exponent: float = 2.0
    seeds: int = 5

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        require(self.width_factor > 0, f"grid.width_factor must be > 0, got {self.width_factor}")
        require(
            self.width_exponent >= 0,
            f"grid.width_exponent must be >= 0, got {self.width_exponent}",
        )
        require(
            self.width_max >= 2 and self.width_max % 2 == 0,
            f"grid.width_max must be an even width >= 2, got {self.width_max}",
        )
        require(self.steps_factor > 0, f"grid.steps_factor must be > 0, got {self.steps_factor}")
        require(
            self.steps_exponent >= 0,
            f"grid.steps_exponent must be >= 0, got {self.steps_exponent}",
        )
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def width(self, n: int) -> int:
        """``m(n)``: even, at least 2, at most ``width_max``."""
        m = 2 * round(self.width_factor * n**self.width_exponent / 2)
        return min(self.width_max, max(2, m))

    def budget(self, n: int) -> int:
        """``steps(n)``, at least 1."""
        return max(1, round(self.steps_factor * n**self.steps_exponent))

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [{"n": n, "m": self.width(n), "steps": self.budget(n)} for n in self.n]


@dataclass
class WidthGrid:
    """``+grid=width``: the coupling gap to NTK regression vs the width m at fixed n."""

    name: str = "width"
    n: list[int] = field(default_factory=lambda: [64])
    widths: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512, 1024, 2048])
    seeds: int = 3

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        require(len(self.widths) > 0, "grid.widths is empty: give at least one width")
        for m in self.widths:
            require(m > 0 and m % 2 == 0, f"grid widths must be positive and even, got {m}")
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [{"n": n, "m": m} for n in self.n for m in sorted(set(self.widths))]


GRIDS = {"samples": SamplesGrid, "width": WidthGrid}
CONFIG = ScoreConfig


# --------------------------------------------------------------------------------------------
# The forward process and the exact mixture.
# --------------------------------------------------------------------------------------------


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
    """``lambda(t)`` of Eq. (5), elementwise; [derived] choices, see the module docstring."""
    a2 = alpha(t, cfg).square()
    if cfg.weighting == "variance":
        return 1 - a2
    if cfg.weighting == "regression":
        return (1 - a2).square() / a2
    return torch.ones_like(t)


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


def score_from_output(F: torch.Tensor, t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig):
    """[derived, Tweedie] ``s_W(t, x) = (alpha_t F - x) / (1 - alpha_t^2)``.

    Shapes: F, x ``(..., d)``, t ``(...)`` -> ``(..., d)``.
    """
    a = alpha(t, cfg)[..., None]
    return (a * F - x) / (1 - a.square())


def embed(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """[derived] Network input on the unit sphere: ``z / ||z||``, ``z = (t/T, x/s, bias)``.

    Shapes: t ``(...)``, x ``(..., d)`` -> ``(..., d + 2)``.
    """
    bias = torch.full_like(t, cfg.input_bias)
    z = torch.cat([(t / cfg.T)[..., None], x / cfg.input_scale, bias[..., None]], dim=-1)
    return z / z.norm(dim=-1, keepdim=True)


def draw(cfg: ScoreConfig, data: GMMData, size: int, rng: np.random.Generator, t=None):
    """Draw ``(t, x0, xt)``: ``x0 ~ p0``, ``t ~ U(T0, T)`` (unless given), ``xt ~ p_{t|0}``.

    Returns float64 numpy arrays ``(size,)``, ``(size, d)``, ``(size, d)``.
    """
    w, mu, v = data.mixture()
    k = rng.choice(len(w), size=size, p=w)
    x0 = mu[k] + np.sqrt(v[k]) * rng.standard_normal((size, data.d))
    if t is None:
        t = rng.uniform(cfg.T0, cfg.T, size)
    a = alpha(torch.from_numpy(t), cfg).numpy()[:, None]
    xt = a * x0 + np.sqrt(1 - a**2) * rng.standard_normal((size, data.d))
    return t, x0, xt


def make_data(cfg: ScoreConfig, data: GMMData, seed: int):
    """Training set of one run (§6.1), deterministic from ``seed``.

    Returns ``(X, Y)`` float64 tensors: X ``(n, d + 2)`` the embedded inputs ``(t_i, xt_i)``
    (unit norm), Y ``(n, d)`` the noisy labels ``x0_i``.

    Raises:
        ValueError: data that is not a Gaussian mixture.
    """
    if data.name != "gmm":
        raise ValueError(f"the score experiment needs data=gmm, got data={data.name}")
    t, x0, xt = draw(cfg, data, cfg.n, np.random.default_rng([seed, 0]))
    return embed(torch.from_numpy(t), torch.from_numpy(xt), cfg), torch.from_numpy(x0)


def _held_out(cfg: ScoreConfig, data: GMMData, seed: int):
    """Held-out ``(t, xt)`` for the Monte Carlo error: t stratified on ``[T0, T]``."""
    rng = np.random.default_rng([seed, 1])
    strata = (np.arange(cfg.n_eval) + rng.uniform(size=cfg.n_eval)) / cfg.n_eval
    t, _, xt = draw(cfg, data, cfg.n_eval, rng, t=cfg.T0 + (cfg.T - cfg.T0) * strata)
    return torch.from_numpy(t), torch.from_numpy(xt)


# --------------------------------------------------------------------------------------------
# NTK regression and sampling.
# --------------------------------------------------------------------------------------------


def ntk_cross_gram(W, a, X_te, X, activation: str = "softmax") -> torch.Tensor:
    """Test-train NTK ``K* = J_te J^T / c_m`` (App. F's ``K*_te``), output-major on both sides.

    ``[K_{l1,l2}]_{te,j} = (1/c_m) x_te^T x_j sum_r D[te,l1,r] D[j,l2,r]``; ``ntk_cross_gram(W, a,
    X, X)`` is :func:`sdyn.experiments.ntk.ntk_gram`.

    Shapes: W ``(..., d, m)``, a ``(..., d_out, m)``, X_te ``(..., p, d)``, X ``(..., n, d)``
    -> ``(..., p*d_out, n*d_out)``.
    """

    def rows(Z):
        D = output_jacobian(W, a, Z, activation)
        p, d_out, m = D.shape[-3:]
        return D.transpose(-3, -2).reshape(*D.shape[:-3], d_out * p, m), d_out

    E_te, d_out = rows(X_te)
    E, _ = rows(X)
    gram = X_te @ X.transpose(-1, -2)
    reps = [1] * (gram.dim() - 2) + [d_out, d_out]
    m = W.shape[-1]
    return (E_te @ E.transpose(-1, -2)) * gram.repeat(*reps) / kernel_normaliser(activation, m)


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


def _vec(Y: torch.Tensor) -> torch.Tensor:
    """``vec(Y)`` output-major: ``(..., n, d_out) -> (..., d_out*n)``, index ``l*n + i``."""
    return Y.transpose(-1, -2).reshape(*Y.shape[:-2], -1)


def _unvec(v: torch.Tensor, d_out: int) -> torch.Tensor:
    return v.reshape(*v.shape[:-1], d_out, -1).transpose(-1, -2)


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
    """Maximum mean discrepancy with a Gaussian kernel, from the biased (V-statistic) MMD^2.

    Shapes: x ``(..., p, d)``, y ``(..., q, d)``, bandwidth ``(...)`` -> ``(...)``, >= 0.
    """

    def k(u, v):
        return torch.exp(-torch.cdist(u, v).square() / (2 * bandwidth[..., None, None] ** 2))

    value = k(x, x).mean((-2, -1)) + k(y, y).mean((-2, -1)) - 2 * k(x, y).mean((-2, -1))
    return value.clamp_min(0).sqrt()


# --------------------------------------------------------------------------------------------
# The batched trainer.
# --------------------------------------------------------------------------------------------

CURVE_METRICS = ("loss", "rel_loss", "score_error", "coupling_gap", "weight_movement")


def shape_key(run: Run) -> tuple:
    """Runs with equal keys share tensor shapes and the forward process, so one batched loop."""
    c = run.experiment
    return (
        c.n, c.m, c.steps, c.n_eval, c.n_coupling, c.n_samples, c.sampler_steps, c.record_points,
        c.dtype, c.schedule, c.beta_min, c.beta_max, c.beta, c.T, c.T0, c.weighting,
        c.input_scale, c.input_bias, run.data.d,
    )  # fmt: skip


def footprint(run: Run) -> int:
    """Bytes of the largest per-run tensor of a step: the ``(points, m)`` softmax activations."""
    c = run.experiment
    points = max(c.n, c.n_eval, c.n_samples) * run.data.d
    return points * c.m * (8 if c.dtype == "float64" else 4)


def train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of runs by the NTK experiment's GD on denoising data; measure the score.

    Per run: its own training set, held-out draws and sampler noise (all from its seed), its own
    symmetric init and step size. The network trains for the full budget (early stopping at T^);
    curves at log-spaced steps: ``loss``, ``rel_loss`` (training), ``score_error`` (held-out),
    ``coupling_gap`` (RMS of ``||F_nn - F_ntk||`` at the same step over held-out points),
    ``weight_movement`` (``max_r ||w_r(t) - w_r(0)||``).

    Summary per run: ``score_error`` and its standard error ``score_error_se``, ``lambda_min``
    (= lambda of Thm 6.5), ``lambda_max``, ``lambda_resolved`` (1 if ``lambda_min`` exceeds the
    numerical-rank tolerance ``n d eps lambda_max``, else it is rounding noise),
    ``score_error_x_lambda``, ``regression_error``
    (``E||F - E[x0|xt]||^2``), ``coupling_gap`` (RMS over the first ``n_coupling`` held-out
    points) and ``coupling_gap_max``, ``kernel_drift`` (``||H(T^) - H(0)||_F``), ``drift_ratio``
    (= kernel_drift / lambda_min), ``max_weight_movement``, ``eta``, ``final_loss``,
    ``final_rel_loss``, ``sample_mmd``, ``sample_mmd_exact_score``, ``sample_loglik`` (mean
    ``log p0`` of the generated samples), ``true_loglik`` (of fresh p0 draws), and ``status``:
    ``budget_exhausted`` (the budget is the early-stopping time, so a normal run uses all of it)
    or ``diverged`` (NaN/Inf or blown-up training loss); ``converged`` is not used.
    Extra table ``samples`` (for d >= 2): the first two coordinates of the generated and of
    fresh p0 samples, columns ``run, x1, x2, source``.

    Raises:
        ValueError: the runs do not share one shape key, or data is not a Gaussian mixture.
    """
    keys = {shape_key(r) for r in runs}
    if len(keys) != 1:
        raise ValueError(f"a bundle needs runs of one shape, got {len(keys)} shapes")
    cfg, data = runs[0].experiment, runs[0].data
    dev = resolve_device(device)
    dtype = getattr(torch, cfg.dtype)
    B, m, d = len(runs), cfg.m, data.d

    def stack(tensors):
        return torch.stack(list(tensors)).to(dev, dtype)

    train_sets = [make_data(r.experiment, r.data, r.seed) for r in runs]
    X, Y = stack(x for x, _ in train_sets), stack(y for _, y in train_sets)
    inits = [
        symmetric_init(1, d + 2, m, d, r.experiment.sigma, torch.Generator().manual_seed(r.seed))
        for r in runs
    ]
    W0 = torch.cat([w for w, _ in inits]).to(dev, dtype)
    a = torch.cat([a for _, a in inits]).to(dev, dtype)

    H0 = ntk_gram(W0, a, X)
    mu, V = torch.linalg.eigh(H0)
    lam_min, lam_max = mu[:, 0], mu[:, -1]
    # Numerical-rank tolerance (as numpy's matrix_rank): a smaller lambda_min is rounding noise.
    resolved = lam_min > mu.shape[-1] * torch.finfo(dtype).eps * lam_max
    eta = torch.tensor([r.experiment.lr_scale for r in runs], dtype=dtype, device=dev)
    eta = eta / (m * lam_max)

    held = [_held_out(r.experiment, r.data, r.seed) for r in runs]
    t_te, x_te = stack(t for t, _ in held), stack(x for _, x in held)
    U_te = embed(t_te, x_te, cfg)
    s_true = true_score(t_te, x_te, cfg, data)
    lam_t = weighting(t_te, cfg)
    # Kernel predictor in H*'s eigenbasis: F_ntk(t) = (K* V) diag(filter_t) V^T vec(Y).
    U_gap = U_te[:, : cfg.n_coupling]
    KV = ntk_cross_gram(W0, a, U_gap, X) @ V
    VtY = (V.transpose(-1, -2) @ _vec(Y)[..., None])[..., 0]
    record = log_spaced_steps(cfg.steps, cfg.record_points)
    L0 = loss(torch.zeros_like(Y), Y)

    def errors(F):  # per-point weighted squared score error, (B, n_eval)
        return lam_t * (score_from_output(F, t_te, x_te, cfg) - s_true).square().sum(-1)

    def kernel_prediction(step):
        return _unvec((KV @ (gd_filter(mu, eta * m, step) * VtY)[..., None])[..., 0], d)

    calls = iter(record)  # gd calls observe at record[0], record[1], ... in order

    def observe(W, L):
        F = forward(W, a, U_te)
        gap = (F[:, : cfg.n_coupling] - kernel_prediction(next(calls))).norm(dim=-1)
        move = squared_movement(W, W0).amax(dim=-1).sqrt()
        rms_gap = gap.square().mean(-1).sqrt()
        return torch.stack([L, L / L0, errors(F).mean(-1), rms_gap, move], dim=-1)

    eps = torch.zeros(B, dtype=dtype, device=dev)
    W, _, statuses, curves = gd(W0, a, X, Y, eta, eps, cfg.steps, record, "softmax", observe)

    F_te = forward(W, a, U_te)
    err = errors(F_te)
    gap = (F_te[:, : cfg.n_coupling] - kernel_prediction(cfg.steps)).norm(dim=-1)
    regression = (F_te - posterior_mean(t_te, x_te, cfg, data)).square().sum(-1).mean(-1)
    drift = (ntk_gram(W, a, X) - H0).flatten(-2).norm(dim=-1)
    final_loss = loss(forward(W, a, X), Y)
    samples = _sample(runs, W, a, dev, dtype)

    summaries = []
    for k in range(B):
        lam = float(lam_min[k])
        score_error = float(err[k].mean())
        summaries.append(
            {
                "status": statuses[k],
                "score_error": score_error,
                "score_error_se": float(err[k].std() / math.sqrt(cfg.n_eval)),
                "lambda_min": lam,
                "lambda_max": float(lam_max[k]),
                "lambda_resolved": int(resolved[k]),
                "score_error_x_lambda": score_error * lam,
                "regression_error": float(regression[k]),
                "coupling_gap": float(gap[k].square().mean().sqrt()),
                "coupling_gap_max": float(gap[k].max()),
                "kernel_drift": float(drift[k]),
                "drift_ratio": float(drift[k]) / lam if lam > 0 else math.inf,
                "max_weight_movement": float(curves[k, :, 4].nan_to_num(-1).amax()),
                "eta": float(eta[k]),
                "final_loss": float(final_loss[k]),
                "final_rel_loss": float(final_loss[k] / L0[k]),
                **{key: float(value[k]) for key, value in samples["summary"].items()},
            }
        )
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


def _sample(runs: list[Run], W, a, dev, dtype) -> dict:
    """Reverse-SDE samples with the learned and the exact score, and their quality."""
    cfg, data = runs[0].experiment, runs[0].data
    B, d, p = len(runs), data.d, cfg.n_samples
    draws = []
    for r in runs:
        rng = np.random.default_rng([r.seed, 2])
        start = rng.standard_normal((p, d))
        noise = rng.standard_normal((cfg.sampler_steps, p, d))
        _, reference, _ = draw(cfg, data, p, rng)
        draws.append([torch.from_numpy(v) for v in (start, noise, reference)])
    y0 = torch.stack([s for s, _, _ in draws]).to(dev, dtype)
    noise = torch.stack([z for _, z, _ in draws], dim=1).to(dev, dtype)
    reference = torch.stack([ref for _, _, ref in draws]).to(dev, dtype)

    def learned(t, y):
        tt = torch.full(y.shape[:-1], t, dtype=dtype, device=dev)
        return score_from_output(forward(W, a, embed(tt, y, cfg)), tt, y, cfg)

    def exact(t, y):
        return true_score(torch.full(y.shape[:-1], t, dtype=dtype, device=dev), y, cfg, data)

    generated = reverse_sde(learned, y0, noise, cfg)
    control = reverse_sde(exact, y0, noise, cfg)
    bandwidth = torch.cdist(reference, reference).flatten(-2).median(dim=-1).values
    zero = torch.zeros(B, p, dtype=dtype, device=dev)
    summary = {
        "sample_mmd": mmd(generated, reference, bandwidth),
        "sample_mmd_exact_score": mmd(control, reference, bandwidth),
        "sample_loglik": log_density(zero, generated, cfg, data).mean(-1),
        "true_loglik": log_density(zero, reference, cfg, data).mean(-1),
    }
    table = None
    if d >= 2:
        parts = []
        for source, points in (("generated", generated), ("true", reference)):
            xy = points[..., :2].reshape(-1, 2).cpu().numpy()
            parts.append(
                pd.DataFrame(
                    {"run": np.repeat(np.arange(B), p), "x1": xy[:, 0], "x2": xy[:, 1]}
                ).assign(source=source)
            )
        table = pd.concat(parts, ignore_index=True)
    return {"summary": {k: v.cpu() for k, v in summary.items()}, "table": table}


PAPER = "softmax-NTK (arXiv 2405.03251)"
RESOLVED = (("lambda_resolved", 1),)
CLAIMS = (
    Claim(
        id="score_error",
        statement="the weighted score error 1/(T-T0) int lambda(t) E||s_W - grad log p_t||^2 dt "
        "decays at least like the swept term n^-1/2 of Thm 6.5's bound",
        source=f"{PAPER}, Thm 6.5 / G.2",
        kind="power_law",
        quantity="score_error",
        axis="experiment.n",
        theory=-0.5,
        direction="<=",
        quantity_label="weighted score error (held-out Monte Carlo)",
        axis_label="n (training points)",
        note="the bound is O(1/(lambda sqrt n) + eps(n, T^) + approximation terms); lambda and the "
        "approximation terms are not held fixed here (lambda falls with n), so a slower decay "
        "does not contradict Thm 6.5 itself; lambda(t) and s_W = (alpha F - x)/(1 - alpha^2) are "
        "[derived] (experiment.weighting)",
    ),
    Claim(
        id="regression_error",
        statement="the regression error E||F - E[x0|xt]||^2 (the quantity Claim G.1 decomposes) "
        "decays at least like n^-1/2",
        source=f"{PAPER}, Claim G.1 / Thm 6.5",
        kind="power_law",
        quantity="regression_error",
        axis="experiment.n",
        theory=-0.5,
        direction="<=",
        quantity_label="E||F_nn - E[x0|xt]||^2 (held-out)",
        axis_label="n (training points)",
        note="equals the score error under weighting=regression; the GD budget is tuned for the "
        "configured weighting, so this error may include overfitting of the noisy labels",
    ),
    Claim(
        id="score_error_x_lambda",
        statement="score error x lambda decays at least like n^-1/2 (the bound's term "
        "1/(lambda sqrt n) times lambda)",
        source=f"{PAPER}, Thm 6.5",
        kind="power_law",
        quantity="score_error_x_lambda",
        axis="experiment.n",
        theory=-0.5,
        direction="<=",
        where=RESOLVED,
        quantity_label="score error x lambda_min(H*)",
        axis_label="n (training points)",
        note="runs whose lambda_min(H*) is below float64 resolution (lambda_resolved = 0) are "
        "left out",
    ),
    Claim(
        id="lambda",
        statement="lambda = lambda_min(H*) does not grow with n (Cauchy interlacing, in "
        "expectation)",
        source=f"{PAPER}, Assumption 6.2",
        kind="power_law",
        quantity="lambda_min",
        axis="experiment.n",
        theory=0.0,
        direction="<=",
        where=RESOLVED,
        quantity_label="lambda_min(H*)",
        axis_label="n (training points)",
        note="the width is tied to n, so H* also changes with m; runs whose lambda_min is below "
        "float64 resolution are left out",
    ),
    Claim(
        id="coupling_gap",
        statement="the gap between the trained network and GD-trained NTK regression "
        "(Def. F.1) on held-out points shrinks at least like 1/m",
        source=f"{PAPER}, Thm F.2 with Lemma 5.1",
        kind="power_law",
        quantity="coupling_gap",
        axis="experiment.m",
        theory=-1.0,
        direction="<=",
        at_middle="experiment.n",
        quantity_label="RMS ||F_nn - F_ntk|| (held-out, same step)",
        axis_label="m (width)",
        note="Thm F.2 bounds the gap by O(eps_test + eps_H) with the kernel drift eps_H ~ 1/m "
        "(Lemma 5.1 with weight movement ~ 1/m); measured by +grid=width (+grid=samples has one "
        "width per n)",
    ),
    Claim(
        id="sample_quality",
        statement="reverse-SDE samples with the learned score approach p0 as n grows: MMD to "
        "fresh p0 draws does not grow with n",
        source=f"{PAPER}, §6.1 (Eq. 4 with s_W)",
        kind="power_law",
        quantity="sample_mmd",
        axis="experiment.n",
        theory=0.0,
        direction="<=",
        quantity_label="MMD(generated, p0) (Gaussian kernel)",
        axis_label="n (training points)",
        note="floor: the exact score's sampler (same noise) reaches sample_mmd_exact_score",
    ),
)
# The report's figures: the held-out score error vs GD step, a line per n (T is fixed), and the
# generated vs true samples of one run per grid point.
CURVE_PLOT = ("score_error", "experiment.n", "experiment.T")
SCATTER_PLOT = ("samples", "x1", "x2", "source")
