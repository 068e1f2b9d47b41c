"""Score estimation for a diffusion model with the two-layer softmax network (``experiment=score``).

Source: "Exploring the Frontiers of Softmax" (softmax-NTK paper, arXiv 2405.03251) §6 and
App. F-G; ``shared/theory.md`` §2. The network, its gradient and GD are the NTK experiment's
(:mod:`sdyn.experiments.ntk`), the mixture, its exact scores, the reference predictors and the
sampler are :mod:`sdyn.experiments.diffusion`'s: imported, not copied. This module is the
trainer: data, the NTK regression it is compared with, the preconditions of Thm 6.5, claims.

Setting (rows are samples, PyTorch order):

* Training set (§6.1): ``x0_i ~ p0``, ``t_i`` on ``[T0, T]``, ``xt_i ~ p_{t|0}(.|x0_i)``; input
  ``(t_i, xt_i)``, label ``x0_i`` (a noisy label of ``E[x0 | xt]``). ``time_sampling=weighted``
  (the default) draws ``t_i`` so that the paper's unweighted loss is Eq. (6) with the
  configured ``lambda(t)``; ``uniform`` is §6.1's ``U(T0, T)``, which makes it Eq. (6) with
  ``weighting=regression`` whatever ``weighting`` says (see :mod:`~.diffusion`).
  [derived] The input is embedded on the unit sphere of R^{d+2} as ``u = z / ||z||`` with
  ``z = (t/T, x/input_scale, input_bias)``: injective (``z = u / u_last * input_bias``), smooth,
  ``||u|| = 1`` (Assumption 6.1), and the constant coordinate keeps the NTK non-degenerate.
* The network ``F`` (d outputs) is trained by the NTK experiment's GD for ``steps`` iterations
  (the early-stopping time T^ of Thm 6.5) with ``eta = lr_scale / (m lambda_max(H*))``.
* Score error (Eq. 5 on ``[T0, T]``): ``1/(T-T0) int lambda(t) E||s_W - grad log p_t||^2 dt`` by
  Monte Carlo on held-out draws (t stratified), beside the same estimate for the references:
  the exact score (0 by construction), the single Gaussian with p0's mean and covariance, and
  the zero network (the symmetric initialisation's output).
* NTK (Def. 3.6) through its Jacobian features: ``H* = J J^T`` with ``J`` the ``(n d,
  (d+2) m)`` Jacobian of vec(F) over ``sqrt(m)``, so ``rank(H*) <= (d+2) m`` (at the symmetric
  init, whose neuron pairs give opposite columns, ``<= (d+2) m / 2``): for larger ``n d``,
  ``lambda_min(H*) = 0`` exactly. The spectrum comes from the smaller of ``J J^T`` and
  ``J^T J``. NTK regression (Def. F.1, Eq. 25) trained by GD with the same step size and
  steps: ``F_ntk(t) = K* U diag(filter_t) U^T vec(Y)`` (its limit ``K* (H*)^+ vec(Y)``), and the
  coupling gap ``||F_nn - F_ntk||`` on held-out points (Thm F.2).
* Preconditions of Thm 6.5, per run: ``lambda_min(H*)`` against its numerical resolution
  ``n d eps ||H*||_2`` (Assumption 6.2) and ``max_t ||H(t) - H*||_F / lambda`` against the
  1/2 of Thm F.2, the drift read at every record step.
* Sampling: the reverse SDE (Eq. 4) from ``N(0, I)`` at ``T`` down to ``T0``, with the learned
  score and, from the same noise, the exact score, the single Gaussian's and the zero
  network's; MMD to fresh p0 draws and the geometric-mean p0 density of the samples.

This module knows nothing of Ray or MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from sdyn.api import (
    Assumption,
    BundleResult,
    Claim,
    Describe,
    Experiment,
    Figure,
    Panel,
    Run,
    log_spaced_steps,
    require,
    require_recording,
    require_sample_sizes,
    resolve_device,
)
from sdyn.experiments.diffusion import (
    GMMData,
    draw,
    gaussian_posterior_mean,
    log_density,
    mmd,
    posterior_mean,
    reverse_sde,
    sample_p0,
    score_from_output,
    true_score,
    weighted_score_error,
)
from sdyn.experiments.ntk import (
    forward,
    gd,
    loss,
    output_jacobian,
    squared_movement,
    symmetric_init,
)

SCHEDULES = ("linear", "constant")
WEIGHTINGS = ("variance", "regression", "none")
TIME_SAMPLINGS = ("weighted", "uniform")


@dataclass
class ScoreConfig:
    """Hyperparameters of one score-estimation run (the ``experiment=score`` schema).

    Units: ``steps`` in GD iterations (the early-stopping time T^); ``T``, ``T0`` in diffusion
    time; ``beta_*`` in 1/time; ``lr_scale`` is ``eta * m * lambda_max(H*)``. The defaults
    (width, budget, T0, embedding, init scale, time sampling) were chosen by a pilot study so
    that the learned score beats the single-Gaussian baseline on the default grid (README).
    """

    name: str = "score"
    n: int = 1024  # training points
    m: int = 256  # width; even (symmetric init)
    sigma: float = 0.75  # init scale, w_r ~ N(0, sigma^2 I)
    steps: int = 2048  # GD budget = early-stopping time T^
    lr_scale: float = 1.0  # eta = lr_scale / (m lambda_max(H*))
    schedule: str = "linear"  # linear: g = beta_min + (beta_max - beta_min) t/T; constant: beta
    beta_min: float = 0.1  # g(0) of the linear schedule
    beta_max: float = 20.0  # g(T) of the linear schedule
    beta: float = 1.0  # g of the constant schedule
    T: float = 1.0  # end of the forward process
    T0: float = 0.02  # start of the training/evaluation window, and where sampling stops
    weighting: str = "variance"  # lambda(t): variance | regression | none
    time_sampling: str = "weighted"  # weighted: Eq. (6) with lambda(t); uniform: U(T0, T)
    input_scale: float = 1.5  # x enters the network as x / input_scale
    input_bias: float = 0.5  # the constant coordinate of the embedding
    n_eval: int = 4000  # held-out Monte Carlo draws of the score error
    n_coupling: int = 500  # the first n_coupling of them also measure the coupling gap
    n_samples: int = 500  # reverse-SDE samples
    sampler_steps: int = 200  # Euler-Maruyama steps of the reverse SDE
    record_points: int = 12  # log-spaced curve points, kernel drift at each (<= 200: MLflow)
    dtype: str = "float64"  # float32 | float64: the GD steps' precision (NTK, sampler: float64)

    def __post_init__(self) -> None:
        require(self.n >= 2, f"experiment.n must be >= 2, got {self.n}")
        require(
            self.m > 0 and self.m % 2 == 0,
            f"experiment.m must be a positive even width (symmetric init), got {self.m}",
        )
        require(self.sigma > 0, f"experiment.sigma must be > 0, got {self.sigma}")
        require(self.steps >= 1, f"experiment.steps must be >= 1, got {self.steps}")
        require(self.lr_scale > 0, f"experiment.lr_scale must be > 0, got {self.lr_scale}")
        for key, allowed in (
            ("schedule", SCHEDULES),
            ("weighting", WEIGHTINGS),
            ("time_sampling", TIME_SAMPLINGS),
        ):
            value = getattr(self, key)
            require(value in allowed, f"experiment.{key} must be one of {allowed}, got {value!r}")
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


DATA = {"gmm": GMMData}


@dataclass
class SamplesGrid:
    """``+grid=samples``: n over a geometric range at a fixed budget.

    Every run keeps the experiment's width ``m``, GD budget ``steps`` and step-size rule, so the
    fitted slope in n is the n-dependence alone (the budget-tied view is ``+grid=samples_tied``).
    """

    name: str = "samples"
    n: list[int] = field(default_factory=lambda: [1024, 1448, 2048, 2896, 4096])  # sample sizes n
    seeds: int = 5  # seeds per point: 0 .. seeds-1

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded): n alone."""
        return [{"n": n} for n in self.n]


@dataclass
class TiedGrid:
    """``+grid=samples_tied``: n with the width and the GD budget tied to it, as Thm 6.5 asks.

    Thm 6.5 takes ``m = Omega(lambda^-2 n^3 d^3 ...)``; here ``m(n) = width_factor *
    n^width_exponent`` rounded to an even number and capped at ``width_max`` (a CPU budget; the
    cap is reported per run as ``experiment.m``). The GD budget grows with n as
    ``steps(n) = steps_factor * n^steps_exponent`` (Assumption G.3: the early-stopping error
    ``eps(n, T^)`` must vanish as n grows, so T^ grows with n). The slope in n then mixes the
    effect of n with that of the budget.
    """

    name: str = "samples_tied"
    n: list[int] = field(default_factory=lambda: [16, 32, 64, 128, 256])  # training-set sizes n
    width_factor: float = 0.0625  # m(n) = width_factor * n^width_exponent, rounded even
    width_exponent: float = 3.0  # exponent of n in m(n) (Thm 6.5: m = Omega(n^3 ...))
    width_max: int = 1024  # cap on m(n), a CPU budget (experiment.m records the m used)
    steps_factor: float = 0.125  # steps(n) = steps_factor * n^steps_exponent, rounded, >= 1
    steps_exponent: float = 2.0  # exponent of n in the GD budget (Assumption G.3: T^ grows)
    seeds: int = 5  # seeds per point: 0 .. seeds-1

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
    n: list[int] = field(default_factory=lambda: [64])  # training-set sizes n
    widths: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512, 1024, 2048])  # even m
    seeds: int = 3  # seeds per point: 0 .. seeds-1

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        require(len(self.widths) > 0, "grid.widths is empty: give at least one width")
        for m in self.widths:
            require(m > 0 and m % 2 == 0, f"grid widths must be positive and even, got {m}")
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [{"n": n, "m": m} for n in self.n for m in sorted(set(self.widths))]


GRIDS = {"samples": SamplesGrid, "samples_tied": TiedGrid, "width": WidthGrid}
CONFIG = ScoreConfig


# --------------------------------------------------------------------------------------------
# Data.
# --------------------------------------------------------------------------------------------


def embed(t: torch.Tensor, x: torch.Tensor, cfg: ScoreConfig) -> torch.Tensor:
    """[derived] Network input on the unit sphere: ``z / ||z||``, ``z = (t/T, x/s, bias)``.

    Shapes: t ``(...)``, x ``(..., d)`` -> ``(..., d + 2)``.
    """
    bias = torch.full_like(t, cfg.input_bias)
    z = torch.cat([(t / cfg.T)[..., None], x / cfg.input_scale, bias[..., None]], dim=-1)
    return z / z.norm(dim=-1, keepdim=True)


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
# The NTK through its Jacobian features, and NTK regression.
# --------------------------------------------------------------------------------------------


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
    """Eigenpairs of ``H = J J^T`` from ``gram = small_gram(J)``: ``(mu, U)``.

    ``mu`` ``(B, k)`` ascending, ``U`` ``(B, N, k)`` orthonormal eigenvectors, ``k = min(N, D)``.
    With ``N > D`` the other ``N - D`` eigenvalues of H are exactly 0 (and ``lambda_min(H) =
    0``); their eigenvectors are orthogonal to ``range(J)`` and do not enter the NTK predictor.
    There ``U = J V mu^-1/2`` from ``J^T J = V diag(mu) V^T``, with the columns of eigenvalues
    at or below ``N eps mu_max`` (rounding noise) set to 0.
    """
    mu, V = torch.linalg.eigh(gram)
    N, D = J.shape[-2:]
    if N <= D:
        return mu, V
    floor = N * torch.finfo(mu.dtype).eps * mu[:, -1:]
    scale = torch.where(mu > floor, mu.clamp_min(floor).rsqrt(), 0.0)
    return mu, (J @ V) * scale[:, None, :]


def kernel_drift(J0: torch.Tensor, gram0: torch.Tensor, J: torch.Tensor) -> torch.Tensor:
    """``||H(W) - H*||_F`` per run, from the features ``J0`` of H* (``gram0 = small_gram(J0)``)
    and ``J`` of H(W), never forming ``N x N`` matrices when ``N > D``: there
    ``||J J^T - J0 J0^T||_F^2 = ||J^T J||^2 + ||J0^T J0||^2 - 2 ||J0^T J||^2``.

    Shapes: J0, J ``(B, N, D)`` -> ``(B,)``.
    """
    if J.shape[-2] <= J.shape[-1]:
        return (J @ J.mT - gram0).flatten(1).norm(dim=-1)
    squares = [G.flatten(1).square().sum(-1) for G in (J.mT @ J, gram0, J0.mT @ J)]
    return (squares[0] + squares[1] - 2 * squares[2]).clamp_min(0).sqrt()


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


# --------------------------------------------------------------------------------------------
# The batched trainer.
# --------------------------------------------------------------------------------------------

CURVE_METRICS = (
    "loss", "rel_loss", "score_error", "coupling_gap", "weight_movement", "kernel_drift",
)  # fmt: skip


def shape_key(run: Run) -> tuple:
    """Runs with equal keys share tensor shapes and the forward process, so one batched loop."""
    c = run.experiment
    return (
        c.n, c.m, c.steps, c.n_eval, c.n_coupling, c.n_samples, c.sampler_steps, c.record_points,
        c.dtype, c.schedule, c.beta_min, c.beta_max, c.beta, c.T, c.T0, c.weighting,
        c.time_sampling, c.input_scale, c.input_bias, run.data.d,
    )  # fmt: skip


# cluster.device=auto: runs of at least this footprint train on GPU workers when the cluster has
# GPUs (every default score run: the held-out evaluation alone is (4000, m) per run). A guess,
# as for the NTK experiment's: no GPU was available to measure the crossover.
GPU_FOOTPRINT = 1 << 18


def footprint(run: Run) -> int:
    """Bytes of the largest per-run tensor: the Jacobian features ``(n d, (d + 2) m)`` or the
    ``(points, m)`` softmax activations."""
    c, d = run.experiment, run.data.d
    points = max(c.n * (d + 2), c.n_eval, c.n_samples) * d
    return points * c.m * (8 if c.dtype == "float64" else 4)


def train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of runs by the NTK experiment's GD on denoising data; measure the score.

    Per run: its own training set, held-out draws and sampler noise (all from its seed), its own
    symmetric init and step size. The network trains for the full budget (early stopping at T^);
    curves at log-spaced steps: ``loss``, ``rel_loss`` (training), ``score_error`` (held-out),
    ``coupling_gap`` (RMS of ``||F_nn - F_ntk||`` at the same step over held-out points),
    ``weight_movement`` (``max_r ||w_r(t) - w_r(0)||``), ``kernel_drift`` (``||H(t) - H*||_F``).

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
    inits = [
        symmetric_init(1, d + 2, m, d, r.experiment.sigma, torch.Generator().manual_seed(r.seed))
        for r in runs
    ]
    W0 = torch.cat([w for w, _ in inits]).to(dev, dtype)
    a = torch.cat([a for _, a in inits]).to(dev, dtype)

    J0 = ntk_features(W0, a, X)
    gram0 = small_gram(J0)
    mu, U = ntk_spectrum(J0, gram0)
    N, D = J0.shape[-2:]
    lam_min = mu[:, 0] if N <= D else torch.zeros_like(mu[:, 0])
    lam_max = mu[:, -1]
    resolution = N * torch.finfo(dtype).eps * lam_max
    resolved = lam_min > resolution
    eta = torch.tensor([r.experiment.lr_scale for r in runs], dtype=dtype, device=dev)
    eta = eta / (m * lam_max)

    held = [_held_out(r.experiment, r.data, r.seed) for r in runs]
    t_te, x_te = stack(t for t, _ in held), stack(x for _, x in held)
    U_te = embed(t_te, x_te, cfg)
    F_true = posterior_mean(t_te, x_te, cfg, data)
    # Kernel predictor in H*'s eigenbasis: F_ntk(t) = (K* U) diag(filter_t) U^T vec(Y).
    KU = ntk_features(W0, a, U_te[:, : cfg.n_coupling]) @ (J0.mT @ U)
    UtY = (U.mT @ _vec(Y)[..., None])[..., 0]
    record = log_spaced_steps(cfg.steps, cfg.record_points)
    L0 = loss(torch.zeros_like(Y), Y)

    def errors(F):  # (B, n_eval)
        return weighted_score_error(F, t_te, x_te, cfg, data)

    def regression(F):
        return (F - F_true).square().sum(-1).mean(-1)

    def kernel_prediction(step):
        return _unvec((KU @ (gd_filter(mu, eta * m, step) * UtY)[..., None])[..., 0], d)

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
    samples = _sample(runs, W, a, dev, dtype)
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


def _sample(runs: list[Run], W, a, dev, dtype) -> dict:
    """Reverse-SDE samples with the learned score and, from the same start and noise, the
    exact, the single Gaussian's and the zero network's: ``summary``, their MMD to fresh p0
    draws and geometric-mean p0 density (``(B,)`` tensors by summary name), and ``table``, the
    samples to draw (see :func:`train`)."""
    cfg, data = runs[0].experiment, runs[0].data
    B, d, p = len(runs), data.d, cfg.n_samples
    draws = []
    for r in runs:
        rng = np.random.default_rng([r.seed, 2])
        start = rng.standard_normal((p, d))
        noise = rng.standard_normal((cfg.sampler_steps, p, d))
        reference = sample_p0(data, p, rng)
        draws.append([torch.from_numpy(v) for v in (start, noise, reference)])
    y0 = torch.stack([s for s, _, _ in draws]).to(dev, dtype)
    noise = torch.stack([z for _, z, _ in draws], dim=1).to(dev, dtype)
    reference = torch.stack([ref for _, _, ref in draws]).to(dev, dtype)

    def times(t, y):
        return torch.full(y.shape[:-1], t, dtype=dtype, device=dev)

    def predictor(F):  # the Tweedie score of a predictor F(t, y) of E[x0 | x_t = y]
        return lambda t, y: score_from_output(F(times(t, y), y), times(t, y), y, cfg)

    samplers = {
        "": predictor(lambda tt, y: forward(W, a, embed(tt, y, cfg))),
        "_exact_score": lambda t, y: true_score(times(t, y), y, cfg, data),
        "_gaussian": predictor(lambda tt, y: gaussian_posterior_mean(tt, y, cfg, data)),
        "_zero": predictor(lambda tt, y: torch.zeros_like(y)),
    }
    samples = {suffix: reverse_sde(score, y0, noise, cfg) for suffix, score in samplers.items()}
    bandwidth = torch.cdist(reference, reference).flatten(-2).median(dim=-1).values
    zero = torch.zeros(B, p, dtype=dtype, device=dev)

    def likelihood(points):  # geometric-mean p0 density, exp(mean log p0)
        return log_density(zero, points, cfg, data).mean(-1).exp()

    summary = {"true_likelihood": likelihood(reference)}
    for suffix, points in samples.items():
        summary[f"sample_mmd{suffix}"] = mmd(points, reference, bandwidth)
        summary[f"sample_likelihood{suffix}"] = likelihood(points)
    table = None
    if d >= 2:
        modes = torch.as_tensor(data.mixture()[1][:, :2])
        parts = [
            pd.DataFrame(
                {"run": np.repeat(np.arange(B), len(xy) // B), "x1": xy[:, 0], "x2": xy[:, 1]}
            ).assign(source=source)
            for source, xy in (
                ("generated", samples[""][..., :2].reshape(-1, 2).cpu().numpy()),
                ("true", reference[..., :2].reshape(-1, 2).cpu().numpy()),
                ("mode", modes.repeat(B, 1).numpy()),
            )
        ]
        table = pd.concat(parts, ignore_index=True)
    return {"summary": {k: v.cpu() for k, v in summary.items()}, "table": table}


PAPER = "softmax-NTK (arXiv 2405.03251)"
RESOLVED = (("lambda_resolved", 1),)
# Thm 6.5's preconditions, as the runs record them (checked on every run of a claim).
LAMBDA_POSITIVE = Assumption(
    "lambda_resolved",
    "==",
    1,
    "Assumption 6.2 needs lambda = lambda_min(H*) > 0, above float64 resolution",
    show="lambda_min",
)
KERNEL_STABLE = Assumption(
    "drift_ratio",
    "<=",
    0.5,
    "Thm F.2 (in Thm 6.5's proof) needs max_t ||H(t) - H*||_F <= lambda/2",
)
THEOREM_6_5 = (LAMBDA_POSITIVE, KERNEL_STABLE)
# Beside each Thm 6.5 claim: the preconditions, and lambda's decay (no verdicts of their own).
PRECONDITIONS = (
    Describe(("lambda_min", "lambda_resolution", "drift_ratio")),
    Describe(("lambda_min",), "experiment.n", 0.0, where=RESOLVED),
    Describe(("score_error_x_lambda",), "experiment.n", -0.5, where=RESOLVED),
)
VACUOUS = (
    "where lambda_min(H*) is 0 or below float64 resolution the bound's 1/(lambda sqrt n) is "
    "infinite and Thm 6.5 says nothing"
)
SCORE_REFERENCES = (
    (0.0, "exact score"),
    ("score_error_gaussian", "single Gaussian (p0's mean, covariance)"),
    ("score_error_zero", "zero network (the init)"),
)
SAMPLE_GRIDS = ("samples", "samples_tied")
CLAIMS = (
    Claim(
        id="score_error",
        statement="at a fixed width, GD budget and step-size rule, the weighted score error "
        "1/(T-T0) int lambda(t) E||s_W - grad log p_t||^2 dt decays at least like the swept "
        "term n^-1/2 of Thm 6.5's bound",
        source=f"{PAPER}, Thm 6.5 / G.2",
        kind="power_law",
        quantity="score_error",
        axis="experiment.n",
        theory=-0.5,
        direction="<=",
        grids=("samples",),
        assumptions=THEOREM_6_5,
        describe=PRECONDITIONS,
        references=SCORE_REFERENCES,
        quantity_label="weighted score error (held-out Monte Carlo)",
        axis_label="training points $n$",
        note="the bound is O(1/(lambda sqrt n) + eps(n, T^) + approximation terms); "
        f"{VACUOUS}; lambda(t) and s_W = (alpha F - x)/(1 - alpha^2) are [derived] "
        "(experiment.weighting)",
    ),
    Claim(
        id="score_error_tied",
        statement="with the width and the GD budget tied to n (m ~ n^3 capped, T^ ~ n^2), the "
        "weighted score error decays at least like n^-1/2",
        source=f"{PAPER}, Thm 6.5 / G.2",
        kind="power_law",
        quantity="score_error",
        axis="experiment.n",
        theory=-0.5,
        direction="<=",
        grids=("samples_tied",),
        assumptions=THEOREM_6_5,
        describe=PRECONDITIONS,
        references=SCORE_REFERENCES,
        quantity_label="weighted score error (held-out Monte Carlo)",
        axis_label="training points $n$ (width and budget grow with it)",
        note="the budget-tied view: the slope mixes n with the growing budget and width; "
        f"+grid=samples isolates n; {VACUOUS}",
    ),
    Claim(
        id="regression_error",
        statement="at a fixed budget, the regression error E||F - E[x0|xt]||^2 (the quantity "
        "Claim G.1 decomposes) decays at least like n^-1/2",
        source=f"{PAPER}, Claim G.1 / Thm 6.5",
        kind="power_law",
        quantity="regression_error",
        axis="experiment.n",
        theory=-0.5,
        direction="<=",
        grids=("samples",),
        assumptions=THEOREM_6_5,
        references=(
            (0.0, "exact posterior mean"),
            ("regression_error_gaussian", "single Gaussian (p0's mean, covariance)"),
            ("regression_error_zero", "zero network (the init)"),
        ),
        quantity_label=r"$\mathbb{E}\|F_{\rm nn} - \mathbb{E}[x_0|x_t]\|^2$ (held-out)",
        axis_label="training points $n$",
        note="equals the score error under weighting=regression; the training times follow the "
        "configured weighting, so this error weighs large t more than the training loss does",
    ),
    Claim(
        id="score_vs_gaussian",
        statement="the learned score beats the single Gaussian with p0's mean and covariance: "
        "the ratio of their weighted score errors on the same held-out draws is below 1",
        source="baseline comparison (not a theorem)",
        kind="column_ratio",
        quantity="score_error",
        reference="score_error_gaussian",
        by="experiment.n",
        axis="experiment.n",
        theory=1.0,
        direction="<=",
        grids=SAMPLE_GRIDS,
        references=SCORE_REFERENCES,
        quantity_label="learned score's error",
        axis_label="single Gaussian's error (same held-out draws)",
        note="per n, the geometric mean over seeds of score_error / score_error_gaussian",
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
        assumptions=THEOREM_6_5,
        describe=PRECONDITIONS[:1],
        quantity_label=r"RMS $\|F_{\rm nn} - F_{\rm ntk}\|$ (held-out, same step)",
        axis_label="width $m$",
        note="Thm F.2 bounds the gap by O(eps_test + eps_H) with the kernel drift eps_H ~ 1/m "
        "(Lemma 5.1 with weight movement ~ 1/m); measured by +grid=width (the samples grids "
        "have one width per n)",
    ),
    Claim(
        id="sample_mmd",
        statement="at the largest n, the learned score's reverse-SDE samples are as close to "
        "p0 as the exact score's (same start, noise and sample size): MMD ratio 1",
        source=f"{PAPER}, §6.1 (Eq. 4 with s_W; a quality bar, not a theorem)",
        kind="column_ratio",
        quantity="sample_mmd",
        reference="sample_mmd_exact_score",
        axis="experiment.n",
        at_largest="experiment.n",
        theory=1.0,
        direction="==",
        grids=SAMPLE_GRIDS,
        references=(
            ("sample_mmd_gaussian", "single Gaussian's samples"),
            ("sample_mmd_zero", "zero network's samples"),
        ),
        quantity_label="MMD(learned score's samples, $p_0$)",
        axis_label="MMD(exact score's samples, $p_0$), the floor",
        note="geometric mean over seeds of sample_mmd / sample_mmd_exact_score; violated: the "
        "samples are measurably farther from p0 than the exact score's",
    ),
    Claim(
        id="sample_likelihood",
        statement="at the largest n, the learned score's samples are as likely under p0 as "
        "the exact score's (same start, noise and sample size): likelihood ratio 1",
        source=f"{PAPER}, §6.1 (Eq. 4 with s_W; a quality bar, not a theorem)",
        kind="column_ratio",
        quantity="sample_likelihood",
        reference="sample_likelihood_exact_score",
        axis="experiment.n",
        at_largest="experiment.n",
        theory=1.0,
        direction="==",
        grids=SAMPLE_GRIDS,
        references=(
            ("true_likelihood", "fresh p0 draws (the truth)"),
            ("sample_likelihood_gaussian", "single Gaussian's samples"),
        ),
        quantity_label="learned score's samples: $\\exp(\\mathrm{mean}\\,\\log p_0)$",
        axis_label="exact score's samples: $\\exp(\\mathrm{mean}\\,\\log p_0)$",
        note="the geometric-mean p0 density of the samples, exp(mean log p0(y_j)); the ratio "
        "is exp of the mean log-likelihood difference. Below 1: samples off the modes; above "
        "1: collapsed onto them. The exact score's samples stop at T0 and sit below the "
        "truth's",
    ),
)
# The report's figures: the held-out score error vs GD step, a line per n (T is fixed), with
# the references' errors; and the generated vs true samples of one run per grid point, with
# the mixture's modes marked.
FIGURES = (
    Figure(
        "curves",
        "Held-out score error vs GD step",
        (Panel("score_error", "weighted score error", references=SCORE_REFERENCES),),
        "experiment.n",
        at_middle="experiment.T",
    ),
)
SCATTER_PLOT = ("samples", "x1", "x2", "source", "mode")

EXPERIMENT = Experiment(
    name="score",
    config=CONFIG,
    grids=GRIDS,
    train=train,
    claims=CLAIMS,
    data=DATA,
    validate=lambda run: make_data(run.experiment, run.data, 0),
    shape_key=shape_key,
    scatter_plot=SCATTER_PLOT,
    footprint=footprint,
    gpu_footprint=GPU_FOOTPRINT,
    figures=FIGURES,
)
