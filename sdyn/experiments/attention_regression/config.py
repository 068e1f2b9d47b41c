"""The experiment's schemas and the shape of a run, without torch: the run config
(:class:`AttentionConfig`), the data set (:class:`GaussianLinearData`), the grids, and the
bundling key and memory footprint that size bundles (``--help`` and ``--plan`` read these
without loading the model)."""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, field

from sdyn.api import Run, require, require_recording, require_sample_sizes

OPTIMIZERS = ("alg1", "sgd", "alg1_random_init", "adam")
CONTEXTS = ("dataset", "batch")


@dataclass
class AttentionConfig:
    """Hyperparameters of one run (the ``experiment=attention_regression`` schema).

    Units: ``steps`` in optimiser iterations; ``lr`` is the step size eta of every optimiser
    (Adam's per-coordinate step); ``reg`` is the regulariser's coefficient c; ``batch`` is b,
    the number of query samples per step (0 = all N: full-batch gradients).
    """

    name: str = "attention_regression"
    n: int = 256  # training samples N
    optimizer: str = "alg1"  # alg1 | sgd | alg1_random_init | adam
    steps: int = 400  # iteration budget T
    lr: float = 0.1  # step size eta
    batch: int = 0  # minibatch size b (without replacement); 0 = full batch (b = N)
    context: str = "dataset"  # dataset: queries attend to all N samples (Eq. 1); batch: to the b
    reg: float = 0.25  # c in R = c ||V^T V - Sigma_hat K K^T Sigma_hat||_F^2 [derived]
    precond_power: float = 1.0  # Algorithm 1 multiplies grad_K by Sigma_hat^-p [derived: p=1]
    init_scale: float = 1.0  # random init: every entry of V and K ~ N(0, init_scale^2)
    adam_beta1: float = 0.9  # Adam's first-moment decay, in [0, 1)
    adam_beta2: float = 0.999  # Adam's second-moment decay, in [0, 1)
    adam_eps: float = 1e-8  # Adam's epsilon in the denominator
    grad_bias_draws: int = 64  # Monte Carlo draws of N samples for gradient_bias; 0 = skip
    plateau_fraction: float = 0.25  # plateau = median over the last fraction of the budget
    record_points: int = 100  # log-spaced curve points (<= 200 reach MLflow)
    dtype: str = "float64"  # float32 | float64: the training precision

    def __post_init__(self) -> None:
        require(self.n >= 2, f"experiment.n must be >= 2, got {self.n}")
        require(
            self.optimizer in OPTIMIZERS,
            f"experiment.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}",
        )
        require(self.steps >= 1, f"experiment.steps must be >= 1, got {self.steps}")
        require(self.lr > 0, f"experiment.lr must be > 0, got {self.lr}")
        require(
            0 <= self.batch <= self.n,
            f"experiment.batch must be in [0, n={self.n}] (0 = full batch), got {self.batch}",
        )
        require(
            self.context in CONTEXTS,
            f"experiment.context must be one of {CONTEXTS}, got {self.context!r}",
        )
        require(self.reg >= 0, f"experiment.reg must be >= 0, got {self.reg}")
        require(self.init_scale > 0, f"experiment.init_scale must be > 0, got {self.init_scale}")
        for key in ("adam_beta1", "adam_beta2"):
            value = getattr(self, key)
            require(0 <= value < 1, f"experiment.{key} must be in [0, 1), got {value}")
        require(self.adam_eps > 0, f"experiment.adam_eps must be > 0, got {self.adam_eps}")
        require(
            self.grad_bias_draws == 0 or self.grad_bias_draws >= 2,
            f"experiment.grad_bias_draws must be 0 (skip) or >= 2, got {self.grad_bias_draws}",
        )
        require(
            0 < self.plateau_fraction <= 1,
            f"experiment.plateau_fraction must be in (0, 1], got {self.plateau_fraction}",
        )
        require_recording(self)


@dataclass
class GaussianLinearData:
    """``data=gaussian_linear``: x ~ N(0, Sigma), y = W* x + N(0, s^2 I_k)
    (``docs/theory/attention-regression.md#setting``).

    Sigma and W* are drawn once from ``problem_seed`` (the same problem for every run and seed;
    a run's seed draws its N samples). Construction: ``Sigma = Q_s diag(lambda) Q_s^T`` with
    ``lambda`` geometric from 1 down to ``1/cond`` (so ``||Sigma|| = 1``, condition number
    ``cond``) and ``Q_s`` Haar-orthogonal; ``W* = U diag(sigma) Q^T`` with ``sigma`` geometric from
    ``w_norm`` down to ``w_norm / w_cond``, ``U`` ``(k, d)`` Haar-orthonormal columns, ``Q`` Haar.

    A1 (Sigma full rank): ``cond`` finite. A2 (k >= d, W* full column rank): ``w_cond`` finite.
    A3 [derived]: on the whole manifold ``||Sigma^{1/2} K^T Sigma K Sigma^{1/2}|| <= cond *
    w_norm``; requiring ``cond * w_norm < 1/2`` keeps ``E exp(x^T K^T Sigma K x)`` finite, i.e.
    the softmax weights have finite variance, the integrability the gradient bound needs.
    """

    name: str = "gaussian_linear"
    d: int = 4  # covariate dimension
    k: int = 6  # response dimension (k >= d)
    cond: float = 2.0  # condition number of Sigma
    w_norm: float = 0.2  # ||W*||_op
    w_cond: float = 2.0  # sigma_max(W*) / sigma_min(W*)
    noise_var: float = 0.01  # s^2; L_irr = k s^2
    problem_seed: int = 0  # draws Sigma and W* once: one problem for every seed

    def __post_init__(self) -> None:
        require(self.d >= 1, f"data.d must be >= 1, got {self.d}")
        require(self.k >= self.d, f"data.k must be >= data.d={self.d} (A2), got {self.k}")
        require(1 <= self.cond < math.inf, f"data.cond must be in [1, inf) (A1), got {self.cond}")
        require(self.w_norm > 0, f"data.w_norm must be > 0, got {self.w_norm}")
        require(
            1 <= self.w_cond < math.inf, f"data.w_cond must be in [1, inf) (A2), got {self.w_cond}"
        )
        require(self.noise_var >= 0, f"data.noise_var must be >= 0, got {self.noise_var}")
        require(
            self.cond * self.w_norm < 0.5,
            f"data.cond * data.w_norm must be < 1/2 (A3), got {self.cond * self.w_norm:g}",
        )


DATA = {"gaussian_linear": GaussianLinearData}


@dataclass
class SamplesGrid:
    """``+grid=samples``: N over a geometric range, each with every optimiser in ``optimizers``.

    Every run uses the experiment's own budget and batch (full-batch gradients by default, so
    the plateau is the algorithm's, not minibatch noise).
    """

    name: str = "samples"
    n: list[int] = field(default_factory=lambda: [16, 40, 100, 250, 630, 1600])  # sample sizes N
    optimizers: list[str] = field(default_factory=lambda: ["alg1"])  # experiment.optimizer values
    seeds: int = 5  # seeds per point: 0 .. seeds-1

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        _check_optimizers(self.optimizers)
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [{"n": n, "optimizer": o} for n in self.n for o in self.optimizers]


@dataclass
class ItersGrid:
    """``+grid=iters``: long runs at one N, every optimiser side by side (Fig. 1 and Fig. 2).

    ``steps`` is this grid's axis, the iteration budgets T (one or more); it replaces
    ``experiment.steps``.
    Adam takes ``adam_lr``, the others ``lr`` (one step size for Algorithm 1 and SGD, as App. A).
    """

    name: str = "iters"
    n: int = 256  # training samples N of every run
    steps: list[int] = field(default_factory=lambda: [2000])  # budgets T (for experiment.steps)
    optimizers: list[str] = field(default_factory=lambda: list(OPTIMIZERS))  # optimisers compared
    lr: float = 0.1  # step size eta of every optimiser but Adam
    adam_lr: float = 0.01  # Adam's step size
    seeds: int = 5  # seeds per optimiser: 0 .. seeds-1

    def __post_init__(self) -> None:
        require(self.n >= 2, f"grid.n must be >= 2, got {self.n}")
        require(len(self.steps) > 0, "grid.steps is empty: give at least one budget")
        for steps in self.steps:
            require(steps >= 1, f"grid.steps values must be >= 1, got {steps}")
        _check_optimizers(self.optimizers)
        require(self.lr > 0, f"grid.lr must be > 0, got {self.lr}")
        require(self.adam_lr > 0, f"grid.adam_lr must be > 0, got {self.adam_lr}")
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [
            {
                "n": self.n,
                "steps": steps,
                "optimizer": o,
                "lr": self.adam_lr if o == "adam" else self.lr,
            }
            for steps in self.steps
            for o in self.optimizers
        ]


def _check_optimizers(optimizers: list[str]) -> None:
    require(len(optimizers) > 0, "grid.optimizers is empty: give at least one optimiser")
    for o in optimizers:
        require(o in OPTIMIZERS, f"grid.optimizers values must be in {OPTIMIZERS}, got {o!r}")
    require(len(set(optimizers)) == len(optimizers), "grid.optimizers has duplicates")


GRIDS = {"samples": SamplesGrid, "iters": ItersGrid}
CONFIG = AttentionConfig


def shape_key(run: Run) -> tuple:
    """Runs with equal keys have equal tensor shapes and can share one batched step loop."""
    c = run.experiment
    return (
        c.n,
        c.batch,
        c.context,
        c.steps,
        c.record_points,
        c.plateau_fraction,
        c.grad_bias_draws,
        c.dtype,
        astuple(run.data),
    )


# cluster.device=auto keeps every run on CPU tasks: its C++ kernel, and a step of tiny kernels
# that a GPU would spend on launches.
GPU_FOOTPRINT = None


def footprint(run: Run) -> int:
    """Bytes of the largest per-run tensor: the ``(queries, context)`` attention weights."""
    c = run.experiment
    queries = c.batch or c.n
    context = c.n if c.context == "dataset" else queries
    return queries * context * (8 if c.dtype == "float64" else 4)
