"""The score experiment's schemas: the run's hyperparameters (:class:`ScoreConfig`), its
data set (:class:`GMMData`, the mixture p0) and its grids. No torch: ``--help`` and the
sweep's planning read them alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sdyn.api import require, require_recording, require_sample_sizes

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
    d: int = 2  # dimension of x0
    components: int = 4  # number K of mixture components
    radius: float = 0.6  # radius of the default means' circle (coords 1-2; d = 1: a segment)
    std: float = 0.15  # per-coordinate std of every component (variances=null)
    means: list[list[float]] | None = None  # K x d means; null: evenly spaced on the circle
    variances: list[list[float]] | None = None  # K x d diagonal covariances; null: std^2
    weights: list[float] | None = None  # K positive weights, normalised; null: equal

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

    def moments(self) -> tuple[np.ndarray, np.ndarray]:
        """p0's mean ``(d,)`` and covariance ``(d, d)``: ``sum_k w_k (diag(v_k) + mu_k mu_k^T)
        - mean mean^T``."""
        w, mu, v = self.mixture()
        mean = w @ mu
        second = np.einsum("k,ki,kj->ij", w, mu, mu) + np.diag(w @ v)
        return mean, second - np.outer(mean, mean)


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
