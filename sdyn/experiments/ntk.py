"""Two-layer softmax network trained by GD in the NTK regime.

Source: "Exploring the Frontiers of Softmax" (softmax-NTK paper), §3-5 and App. A-F; the formulas
used here are collected in ``shared/theory.md`` §1. Rows are samples (PyTorch order): ``X`` is
``(n, d)`` where the paper writes ``(d, n)``.

Model (Eq. 1), width ``m``, fixed second layer ``a``::

    softmax:  F(x)_l = m * <a_l, softmax(W^T x)>
    relu:     F(x)_l = m^-1/2 * sum_r a_lr relu(w_r^T x)      (MOSW22, Table 1 baseline)
    exp:      F(x)_l = m^-1/2 * sum_r a_lr exp(w_r^T x)       (GMS23 with the same m^-1/2 scaling)

The NTK Gram matrix is ``H = J J^T / c_m`` with ``J`` the Jacobian of vec(F) w.r.t. W and
``c_m = m`` for softmax (Def. 3.6) and ``c_m = 1`` for relu/exp (their usual normalisation), so
that ``H = O(1)`` in every case and one GD step moves the outputs by ``-eta c_m H (F - Y)``.

Everything is batched over leading dimensions: one call trains many runs at once. This module
knows nothing of Ray or MLflow.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from sdyn import native
from sdyn.api import (
    Assumption,
    BundleResult,
    Claim,
    Describe,
    Experiment,
    Figure,
    Panel,
    Run,
    SearchGrid,
    log_spaced_steps,
    require,
    require_recording,
    require_sample_sizes,
    resolve_device,
)

ACTIVATIONS = ("softmax", "relu", "exp")
STATUSES = ("converged", "budget_exhausted", "diverged")
# A run whose loss grows by this factor over its start has left any regime the theory covers.
DIVERGENCE_FACTOR = 1e6


@dataclass
class NTKConfig:
    """Hyperparameters of one NTK run (the ``experiment=ntk`` schema).

    Units: ``steps`` in GD iterations; ``eps`` is a relative loss ``L(t)/L(0)``; ``sigma`` is the
    init standard deviation of each weight; ``lr_scale`` is ``eta * c_m * lambda_max(H(0))``.
    """

    name: str = "ntk"
    n: int = 16  # training points
    m: int = 256  # width; even (symmetric init)
    d: int | None = None  # input dimension; None = the data set's own (sphere: 8, diabetes: 10)
    d_out: int = 1  # output dimension (Cor. 4.3: 1)
    activation: str = "softmax"  # softmax (Eq. 1) | relu (MOSW22) | exp (GMS23): the model
    sigma: float = 1.0  # init scale, w_r ~ N(0, sigma^2 I_d)
    eps: float = 1e-3  # target relative loss
    steps: int = 30000  # GD budget: covers Thm 4.2's step count on the default width grid
    lr: str = "auto"  # auto: eta = lr_scale / (c_m lambda_max(H(0))); theorem: Thm 4.2's eta
    lr_scale: float = 1.0  # eta c_m lambda_max(H(0)) (lr=auto); <= 1: Lemma 5.3's stable step
    theorem_C: float = 10.0  # Def. 4.1's constant C > 10 (only for lr=theorem)
    theorem_delta: float = 0.1  # failure probability delta in B (only for lr=theorem)
    drift_fraction: float = 0.5  # NTK regime: max_t ||H(t) - H(0)||_F <= drift_fraction * lambda
    record_points: int = 100  # log-spaced curve points (full in Parquet; 50 reach the MLflow UI)
    dtype: str = "float64"  # float32 | float64: the GD steps' precision (H(0), spectrum: float64)

    def __post_init__(self) -> None:
        require(self.n >= 2, f"experiment.n must be >= 2, got {self.n}")
        require(
            self.m > 0 and self.m % 2 == 0,
            f"experiment.m must be a positive even width (symmetric init), got {self.m}",
        )
        require(self.d is None or self.d >= 1, f"experiment.d must be >= 1, got {self.d}")
        require(self.d_out >= 1, f"experiment.d_out must be >= 1, got {self.d_out}")
        require(
            self.activation in ACTIVATIONS,
            f"experiment.activation must be one of {ACTIVATIONS}, got {self.activation!r}",
        )
        require(self.sigma > 0, f"experiment.sigma must be > 0, got {self.sigma}")
        require(0 < self.eps < 1, f"experiment.eps must be in (0, 1), got {self.eps}")
        require(self.steps >= 1, f"experiment.steps must be >= 1, got {self.steps}")
        require(
            self.lr in ("auto", "theorem"), f"experiment.lr must be auto|theorem, got {self.lr}"
        )
        require(self.lr_scale > 0, f"experiment.lr_scale must be > 0, got {self.lr_scale}")
        require(self.theorem_C > 0, f"experiment.theorem_C must be > 0, got {self.theorem_C}")
        require(
            0 < self.theorem_delta < 1,
            f"experiment.theorem_delta must be in (0, 1), got {self.theorem_delta}",
        )
        require(
            self.drift_fraction > 0,
            f"experiment.drift_fraction must be > 0, got {self.drift_fraction}",
        )
        require_recording(self)


@dataclass
class SphereData:
    """``data=sphere``: x uniform on the unit sphere of R^d, y from a fixed random teacher.

    The teacher ``y_l = tanh(u_l^T relu(G x)) / sqrt(d_out)`` is drawn once from ``teacher_seed``
    (the same target function for every seed), so ``||y|| < 1`` as the theory requires.
    """

    name: str = "sphere"
    d: int = 8  # default input dimension
    teacher_width: int = 32  # hidden width of the teacher tanh(u^T relu(G x)) (rows of G)
    teacher_seed: int = 0  # draws the teacher once: one target function for every seed

    def __post_init__(self) -> None:
        require(self.d >= 1, f"data.d must be >= 1, got {self.d}")
        require(
            self.teacher_width >= 1, f"data.teacher_width must be >= 1, got {self.teacher_width}"
        )


@dataclass
class DiabetesData:
    """``data=diabetes``: scikit-learn's bundled diabetes regression set (442 points, d = 10).

    Features are standardised and each row projected onto the unit sphere (``||x|| = 1``, the
    usual NTK convention; dividing by the largest norm instead leaves most points near the origin
    and the Gram matrix badly conditioned); the target is centred and divided by its largest
    magnitude, so ``|y| <= 1`` (theory.md §1). Each seed draws its ``n`` points without
    replacement.
    """

    name: str = "diabetes"
    d: int = 10  # fixed: the data set's 10 features

    def __post_init__(self) -> None:
        require(self.d == 10, f"data.d is fixed at 10 for diabetes, got {self.d}")


DATA = {"sphere": SphereData, "diabetes": DiabetesData}


@dataclass
class WidthGrid:
    """``+grid=width``: for each n, a geometric range of widths, and ``seeds`` seeds per point.

    With ``widths`` left null, each n gets ``num_widths`` even widths from ``width_min`` growing
    by ``width_ratio`` (the same list for every n, so thresholds are read on one scale); an
    explicit list replaces it.
    """

    name: str = "width"
    n: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])  # training-set sizes n
    widths: list[int] | None = None  # explicit even widths m; null: the geometric range below
    width_min: int = 2  # first width of the range (widths=null)
    width_ratio: float = 2.0  # factor between widths of the range (> 1)
    num_widths: int = 12  # widths in the range (rounded even, repeats dropped)
    seeds: int = 5  # seeds per point: 0 .. seeds-1

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        for m in self.width_list():
            require(m > 0 and m % 2 == 0, f"grid widths must be positive and even, got {m}")
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")
        require(self.width_ratio > 1, f"grid.width_ratio must be > 1, got {self.width_ratio}")
        require(self.num_widths >= 1, f"grid.num_widths must be >= 1, got {self.num_widths}")

    def width_list(self) -> list[int]:
        """The widths swept at every n (even, increasing, distinct)."""
        if self.widths is not None:
            require(len(self.widths) > 0, "grid.widths is empty: give at least one width")
            return sorted(set(self.widths))
        raw = (self.width_min * self.width_ratio**k for k in range(self.num_widths))
        return sorted({max(2, 2 * round(w / 2)) for w in raw})

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [{"n": n, "m": m} for n in self.n for m in self.width_list()]


@dataclass
class ThresholdGrid(SearchGrid):
    """``+grid=threshold``: per n and seed, a search for the width thresholds (sdyn/search.py).

    The ladder of widths runs from ``width_min`` to ``width_max`` by ``resolution`` (rounded to
    even widths, distinct): the fixed grid that would read each threshold to the same
    resolution. The search brackets each threshold by steps of ``coarse_ratio`` from the
    ladder's geometric middle, then halves the bracket until its ends are neighbours on the
    ladder. ``claims``: the threshold claims whose success criteria are searched (None: every
    one along ``experiment.m``; ``width_threshold`` and ``width_threshold_lambda`` share theirs).
    ``anchor``: also probe width_max for every n and seed, where the threshold claims read
    lambda and check Thm 4.2's budget (as on the width grid); without it they read them at the
    widest width probed, near the threshold, and the search spares the costliest runs.
    """

    axis: ClassVar[str] = "m"
    name: str = "threshold"
    n: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])  # training-set sizes n
    width_min: int = 2  # lowest rung of the width ladder (even)
    width_max: int = 4096  # highest rung of the ladder (even)
    resolution: float = 2.0**0.25  # factor between rungs: the precision of each threshold (> 1)
    coarse_ratio: float = 4.0  # step factor while bracketing (>= resolution)
    claims: list[str] | None = None  # threshold claims searched; null: every one along experiment.m
    anchor: bool = True  # also probe width_max: lambda and Thm 4.2's budget read there
    seeds: int = 5  # seeds per n: 0 .. seeds-1, each searched on its own

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        for key in ("width_min", "width_max"):
            value = getattr(self, key)
            require(
                value > 0 and value % 2 == 0, f"grid.{key} must be positive and even, got {value}"
            )
        require(
            self.width_max > self.width_min,
            f"grid.width_max must exceed grid.width_min, got {self.width_max} <= {self.width_min}",
        )
        require(self.resolution > 1, f"grid.resolution must be > 1, got {self.resolution}")
        require(
            self.coarse_ratio >= self.resolution,
            f"grid.coarse_ratio must be >= grid.resolution, got {self.coarse_ratio}",
        )
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def width_list(self) -> list[int]:
        """The ladder: even widths from width_min to width_max, ``resolution`` apart or more."""
        count = math.floor(math.log(self.width_max / self.width_min, self.resolution) + 1e-9)
        raw = [self.width_min * self.resolution**k for k in range(count + 1)]
        return sorted({max(2, 2 * round(w / 2)) for w in raw} | {self.width_max})

    def points(self) -> list[dict]:
        """Every rung of every n's ladder (the search probes some of them)."""
        return [{"n": n, "m": m} for n in self.n for m in self.width_list()]


GRIDS = {"width": WidthGrid, "threshold": ThresholdGrid}
CONFIG = NTKConfig


# --------------------------------------------------------------------------------------------
# The model: forward pass, output Jacobian, loss, gradient, NTK Gram matrix.
# --------------------------------------------------------------------------------------------


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
    F = _bundle_kernel("forward", W, a, X, activation, (n, d_out))
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
    E = None if pack else _bundle_kernel("jacobian", W, a, X, activation, (d_out * n, m))
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


# --------------------------------------------------------------------------------------------
# Data and learning rate.
# --------------------------------------------------------------------------------------------


def make_data(cfg: NTKConfig, data, seed: int):
    """Training set of one run, deterministic from ``seed``.

    Returns ``(X, Y)`` as float64 tensors ``(n, d)`` and ``(n, d_out)`` with ``||x_i|| <= 1`` and
    ``||y_i|| <= 1``.

    Raises:
        ValueError: ``cfg.d`` disagrees with the data set, or diabetes has fewer than n points.
    """
    d = cfg.d if cfg.d is not None else data.d
    rng = np.random.default_rng(seed)
    if data.name == "sphere":
        X = rng.standard_normal((cfg.n, d))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
        teacher = np.random.default_rng(data.teacher_seed)
        G = teacher.standard_normal((data.teacher_width, d)) * math.sqrt(2.0)
        U = (
            teacher.standard_normal((cfg.d_out, data.teacher_width))
            * 2
            / math.sqrt(data.teacher_width)
        )
        Y = np.tanh(np.maximum(X @ G.T, 0) @ U.T) / math.sqrt(cfg.d_out)
    elif data.name == "diabetes":
        if d != data.d:
            raise ValueError(f"data=diabetes has d={data.d} features; experiment.d={d} disagrees")
        X_all, y_all = _diabetes()
        if cfg.n > len(X_all):
            raise ValueError(f"data=diabetes has {len(X_all)} points; experiment.n={cfg.n}")
        if cfg.d_out != 1:
            raise ValueError(f"data=diabetes has one target; experiment.d_out={cfg.d_out}")
        idx = rng.choice(len(X_all), size=cfg.n, replace=False)
        X, Y = X_all[idx], y_all[idx, None]
    else:
        raise ValueError(f"unknown data set {data.name!r} for the NTK experiment")
    return torch.from_numpy(X), torch.from_numpy(Y)


def _diabetes():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    y = y - y.mean()
    return X, y / np.abs(y).max()


def theorem_B(cfg: NTKConfig, outputs: int) -> float:
    """Def. 4.1's ``B = max(C sigma sqrt(log(outputs / delta)), 1)``.

    ``outputs`` is the number of scalar outputs fitted, ``n d`` in Thm 4.2 (``d`` outputs per
    point) and ``n`` in Cor. 4.3 (one output): ``n * d_out`` here. ``C = theorem_C``,
    ``delta = theorem_delta``. B bounds ``|w_r^T x_i|`` with probability ``1 - delta``; with
    C > 10 it is far above the measured ``max_r,i |w_r(0)^T x_i|``.
    """
    return max(cfg.theorem_C * cfg.sigma * math.sqrt(math.log(outputs / cfg.theorem_delta)), 1.0)


def theorem_learning_rate(cfg: NTKConfig, lam: torch.Tensor, outputs: int) -> torch.Tensor:
    """Thm 4.2's ``eta = 0.1 lambda / (m n^2 d^2 exp(16 B))``, ``n d = outputs`` (Cor. 4.3:
    ``0.1 lambda / (m n^2 exp(16 B))`` for one output) and B from :func:`theorem_B`; the
    exponent is capped at e^700 (float range).

    The constant makes this step astronomically small (B >= 10): it is offered to show the gap
    between the proof and practice, not to train.
    """
    B = theorem_B(cfg, outputs)
    return 0.1 * lam / (cfg.m * outputs**2 * math.exp(min(16 * B, 700.0)))


# --------------------------------------------------------------------------------------------
# The batched trainer.
# --------------------------------------------------------------------------------------------

CURVE_METRICS = ("loss", "rel_loss", "weight_movement", "kernel_drift", "rms_weight_movement")


def shape_key(run: Run) -> tuple:
    """Runs with equal keys have equal tensor shapes and can share one batched step."""
    return (run.experiment.n, run.experiment.m, *_step_key(run))


def _step_key(run: Run) -> tuple:
    """Runs with equal keys can share one packed step (:class:`Pack`): all but n and m equal."""
    cfg = run.experiment
    d = cfg.d if cfg.d is not None else run.data.d
    return (d, cfg.d_out, cfg.activation, cfg.steps, cfg.record_points, cfg.dtype)


# A packed bundle pads every run to its largest n and m. Packing only runs whose n and m are in
# the same power-of-PACK_RATIO class bounds that waste to PACK_RATIO-fold per axis: padding a
# 120-run part of the width grid (n 8-32, m 2-256) into one bundle did 7x the work of its
# shape-exact bundles (eager PyTorch step on the CPU, 22.2 s against 4.4 s).
PACK_RATIO = 4


def pack_key(run: Run) -> tuple:
    """Runs with equal keys are packed into one GPU bundle (:class:`Pack`): one step key, and n
    and m each in one power-of-:data:`PACK_RATIO` class."""
    n, m = run.experiment.n, run.experiment.m
    classes = (math.floor(math.log(x, PACK_RATIO) + 1e-9) for x in (n, m))  # [4^k, 4^(k+1))
    return (*classes, *_step_key(run))


# cluster.device=auto sends runs whose footprint (bytes of the (n, m) activations) is at least
# this to GPU workers when the cluster has GPUs: n m >= 32768 in float64, e.g. n = 64, m = 512.
# Below it the C++ CPU kernel's bundle takes milliseconds. A guess: no GPU was available to
# measure the crossover.
GPU_FOOTPRINT = 1 << 18


def footprint(run: Run) -> int:
    """Bytes of the largest per-run tensor of a step (the ``(n, m)`` softmax activations)."""
    cfg = run.experiment
    return cfg.n * cfg.m * cfg.d_out * (8 if cfg.dtype == "float64" else 4)


def gd_iteration(
    W, a, X, Y, eta, eps, L0, active, diverged, hit, t, activation: str = "softmax", pack=None
):
    """One iteration of :func:`gd` for a bundle of B runs: loss at W(t), bookkeeping, GD step.

    A run's status is decided on ``L(t)`` before it steps: it reaches eps (recorded in ``hit``
    and frozen), or diverges (NaN/Inf, or ``L(t)/L(0) > DIVERGENCE_FACTOR``; frozen), or steps
    ``W <- W - eta grad`` (Def. 3.5). Pure tensor code, so ``torch.compile`` can fuse it.

    Shapes: W ``(B, d, m)``, a ``(B, d_out, m)``, X ``(B, n, d)``, Y ``(B, n, d_out)``; eta, eps,
    L0 ``(B,)``; active, diverged ``(B,)`` bool; hit ``(B,)`` long; t a 0-d long tensor;
    pack: a :class:`Pack` for a packed bundle. Returns ``(W_next, L, active, diverged, hit)``.
    """
    L, grad = loss_and_gradient(W, a, X, Y, activation, pack)
    rel = L / L0
    bad = ~torch.isfinite(L) | (rel > DIVERGENCE_FACTOR)
    reached = (rel <= eps) & ~bad
    hit = torch.where(active & reached & (hit < 0), t, hit)
    diverged = diverged | (active & bad)
    active = active & ~reached & ~bad
    return W - torch.where(active, eta, 0.0)[:, None, None] * grad, L, active, diverged, hit


# The step loop is where a sweep spends its time. On a CPU it runs in a fused C++ kernel
# (ntk_step.cpp: every iteration of a run in one cache-resident pass, no Python per step); on a
# GPU, or where the kernel cannot be built, gd_iteration runs torch.compile'd (fused loops, and
# dynamic shapes, so one compilation serves every width and n), or eager where torch.compile
# cannot work (e.g. no C++ compiler), with a warning. SDYN_COMPILE=0 keeps the eager path.
_COMPILED = {"fn": None, "failed": not native.ENABLED}
_KERNEL_SOURCE = native.SOURCES / "ntk_step.cpp"
_KERNEL_MAX_D = 64  # ntk_step.cpp keeps a block's inputs on the stack


def _iteration(*args):
    if not _COMPILED["failed"]:
        if _COMPILED["fn"] is None:
            _COMPILED["fn"] = torch.compile(gd_iteration, dynamic=True)
        try:
            return _COMPILED["fn"](*args)
        except Exception as exc:  # any compiler failure: the eager path is always correct
            _COMPILED["failed"] = True
            warnings.warn(
                f"torch.compile unavailable ({type(exc).__name__}); eager GD step", stacklevel=2
            )
    return gd_iteration(*args)


def _kernel(W: torch.Tensor, name: str = "gd"):
    """The C++ function ``ntk_<name>_<dtype>`` of ntk_step.cpp (``gd``: the GD loop,
    ``jacobian``: the output Jacobian, ``forward``: the outputs) for W's dtype, or None where it
    does not apply (GPU, d > 64, no build)."""
    real = {torch.float64: ctypes.c_double, torch.float32: ctypes.c_float}.get(W.dtype)
    if W.device.type != "cpu" or W.shape[-2] > _KERNEL_MAX_D or real is None:
        return None
    suffix = "f64" if W.dtype == torch.float64 else "f32"
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    per_block = [i64] * 5 + [ctypes.c_int] + [ptr] * 4 + [i64]  # jacobian, forward
    argtypes = {
        "gd": [i64] * 5 + [ctypes.c_int] + [ptr] * 7 + [real, i64, i64] + [ptr] * 4 + [i64],
        "jacobian": per_block,
        "forward": per_block,
    }[name]
    return native.function(_KERNEL_SOURCE, f"ntk_{name}_{suffix}", argtypes)


def _bundle_kernel(name: str, W, a, X, activation: str, shape: tuple[int, ...]):
    """The output, ``(B, *shape)``, of ntk_step.cpp's ``name`` (``forward`` or ``jacobian``) on a
    bundle: W ``(B, d, m)``, a ``(B, d_out, m)``, X ``(B, n, d)``, none requiring grad. None where
    the kernel does not apply (other shapes, autograd, or see :func:`_kernel`)."""
    bundle = W.dim() == a.dim() == X.dim() == 3 and W.shape[0] == a.shape[0] == X.shape[0]
    plain = not (W.requires_grad or a.requires_grad or X.requires_grad)
    kernel = _kernel(W, name) if bundle and plain and activation in ACTIVATIONS else None
    if kernel is None:
        return None
    W, a, X = (t.to(W.dtype).contiguous() for t in (W, a, X))
    out = W.new_empty(W.shape[0], *shape)
    ptrs = (t.data_ptr() for t in (W, a, X, out))
    code = ACTIVATIONS.index(activation)
    (B, d, m), n, d_out = W.shape, X.shape[1], a.shape[1]
    kernel(B, n, d, m, d_out, code, *ptrs, torch.get_num_threads())
    return out


@dataclass
class _GDState:
    """The bundle's state between iterations; see :func:`gd_iteration` for the fields."""

    W: torch.Tensor
    L: torch.Tensor
    active: torch.Tensor
    diverged: torch.Tensor
    hit: torch.Tensor


def gd(
    W0,
    a,
    X,
    Y,
    eta,
    eps,
    steps: int,
    record: list[int],
    activation="softmax",
    observe=None,
    pack: Pack | None = None,
):
    """Full-batch GD on W (Def. 3.5), batched over runs; a run is frozen once it fits or diverges.

    Run k stops moving at the first step where its relative loss ``L(t)/L(0)`` (with ``L(0)`` the
    loss of the zero output, the symmetric init's) is at most ``eps[k]``, or where its loss is
    NaN/Inf or has grown by :data:`DIVERGENCE_FACTOR`. The only host synchronisations are at the
    ``record`` steps. Every iteration is :func:`gd_iteration`; on a CPU the C++ kernel
    ``ntk_step.cpp`` runs the iterations between two record steps.

    Args:
        W0: initial first layers ``(B, d, m)``; a: fixed second layers ``(B, d_out, m)``.
        X: inputs ``(B, n, d)``; Y: labels ``(B, n, d_out)``.
        eta: per-run step sizes ``(B,)``; eps: per-run target relative losses ``(B,)`` (0: train
            for the whole budget).
        steps: the GD budget (iterations).
        record: increasing steps in ``[0, steps]`` (non-empty) at which ``observe`` is called.
        activation: see :func:`forward`.
        observe: ``observe(W, L) -> (B, k)`` metrics of the current weights ``W`` ``(B, d, m)``
            whose loss is ``L`` ``(B,)``, called at ``record[0], record[1], ...`` in order; None
            records nothing.
        pack: a :class:`Pack` when the bundle holds runs of different widths or sample sizes,
            padded (it takes the PyTorch step: the C++ kernel knows no padding).

    Returns:
        ``(W, hit, statuses, curves)``: the final weights ``(B, d, m)``, those of the last
        observation (``record[-1]``, or the step where every run had stopped); ``hit`` ``(B,)``, the
        first step with relative loss <= eps (-1 if never); ``statuses``, per run one of
        :data:`STATUSES` (converged: reached eps; diverged: NaN/Inf or blown-up loss;
        budget_exhausted: neither); ``curves`` ``(B, k_rec, k)`` on the CPU, the observations at
        ``record[:k_rec]`` (``k_rec < len(record)`` when every run stopped early).
    """
    a, X, Y, eta, eps = (t.to(W0.dtype) for t in (a, X, Y, eta, eps))
    L0 = loss(torch.zeros_like(Y), Y)
    active = torch.ones(W0.shape[0], dtype=torch.bool, device=W0.device)
    state = _GDState(
        W=W0.clone(memory_format=torch.contiguous_format),  # the kernel steps it in place
        L=torch.full_like(L0, math.nan),
        active=active,
        diverged=torch.zeros_like(active),
        hit=torch.full(active.shape, -1, dtype=torch.long, device=W0.device),
    )
    kernel = _kernel(state.W) if pack is None else None
    if kernel is not None:
        a, X, Y, eta, eps = (t.contiguous() for t in (a, X, Y, eta, eps))
        code = ACTIVATIONS.index(activation)
        B, d, m = state.W.shape

        def advance(t0: int, t1: int) -> None:  # iterations t0 <= t < t1, in place
            p = [t.data_ptr() for t in (state.W, a, X, Y, eta, eps, L0)]
            out = [t.data_ptr() for t in (state.L, state.active, state.diverged, state.hit)]
            shape = (B, X.shape[-2], d, m, a.shape[-2], code)
            # As many threads as torch's own ops use (1 in a sweep's Ray tasks).
            kernel(*shape, *p, DIVERGENCE_FACTOR, t0, t1, *out, torch.get_num_threads())
    else:
        # The step counter lives on the device: ticks[t] is a view, no host-to-device copy.
        ticks = torch.arange(steps + 1, device=X.device)

        def advance(t0: int, t1: int) -> None:
            for t in range(t0, t1):
                flags = (state.active, state.diverged, state.hit, ticks[t])
                args = (state.W, a, X, Y, eta, eps, L0, *flags, activation, pack)
                state.W, state.L, state.active, state.diverged, state.hit = _iteration(*args)

    curves, t = None, 0
    for k_rec, step in enumerate(record):
        advance(t, step)
        W_rec = state.W.clone()  # W(step): the next iteration computes L(step), then steps
        advance(step, step + 1)
        row = observe(W_rec, state.L) if observe else state.L.new_zeros(len(state.L), 0)
        if curves is None:  # preallocated on the device once the number of metrics is known
            shape = (len(row), len(record), row.shape[-1])
            curves = torch.full(shape, math.nan, dtype=row.dtype, device=row.device)
        curves[:, k_rec] = row
        t = step + 1
        if not bool(state.active.any()):  # the only host synchronisation, at record steps
            break
    statuses = [
        "diverged" if bad_k else ("converged" if hit_k >= 0 else "budget_exhausted")
        for bad_k, hit_k in zip(state.diverged.tolist(), state.hit.tolist(), strict=True)
    ]
    return W_rec, state.hit, statuses, curves[:, : k_rec + 1].cpu()  # one copy to the host


def theorem_checks(
    cfg: NTKConfig,
    *,
    lam: float,
    lr_step: float,
    b_eff: float,
    label_norm: float,
    max_move: float,
    max_drift: float,
    rel_loss: np.ndarray,
    steps: np.ndarray,
    last: int,
) -> dict[str, float]:
    """One run's quantities that test Thm 4.2's lemmas run by run (softmax-NTK paper).

    With ``N = n d_out`` outputs, B from :func:`theorem_B` (Def. 4.1) and ``B_eff`` the
    measured ``max_r,i |w_r(0)^T x_i|`` beside it:

    * ``weight_movement_bound_ratio`` (``_eff``): ``max_r,t ||w_r(t) - w_r(0)||`` over
      Def. A.2's ``D = 4 m^-1 lambda^-1 exp(3B) sqrt(N) ||F(0) - Y||_F``;
    * ``kernel_drift_bound_ratio`` (``_eff``): ``max_t ||H(t) - H(0)||_F`` over Lemma 5.1's
      ``R N exp(10B)`` with ``R`` the measured largest movement;
    * ``linear_rate_ratio``: ``max_t (L(t)/L(0)) / (1 - m eta lambda / 4)^t`` over the recorded
      steps ``1 <= t <= last`` (Lemma 5.3's loss induction; <= 1 where it holds);
    * ``contraction_ratio``: the run's mean per-step log contraction of the loss up to ``last``
      over Lemma 5.3's ``-log(1 - m eta lambda / 4)`` (how many times faster than guaranteed);
    * ``theorem_steps``: the steps Lemma 5.3's rate needs to reach ``rel. loss <= eps``, i.e.
      Thm 4.2's ``T = O((m eta lambda)^-1 log(1/eps))``; ``budget_covers_theorem`` is 1 when
      ``cfg.steps`` is at least that.

    Ratios are formed in log space (``exp(10B)`` overflows for large B). Where ``lambda <= 0``
    the lemmas say nothing: the ratios are NaN and ``theorem_steps`` is inf.

    Args:
        cfg: the run's config. lam: ``lambda_min(H(0))``. lr_step: ``c_m eta`` (``m eta`` for
            softmax), the step that multiplies ``H`` in the output dynamics.
        b_eff: ``max_r,i |w_r(0)^T x_i|``. label_norm: ``||Y||_F = ||F(0) - Y||_F`` (symmetric
            init). max_move, max_drift: the run's maxima over neurons and recorded steps.
        rel_loss, steps: the recorded ``L(t)/L(0)`` and their steps, shape (k,) each.
        last: the last step GD moved the run (its step to eps, else the budget).
    """
    outputs = cfg.n * cfg.d_out
    lemma = lr_step * lam / 4.0
    nan = math.nan
    if not (lam > 0 and 0 < lemma < 1):
        keys = ("weight_movement_bound_ratio", "weight_movement_bound_ratio_eff",
                "kernel_drift_bound_ratio", "kernel_drift_bound_ratio_eff",
                "linear_rate_ratio", "contraction_ratio")  # fmt: skip
        return {**dict.fromkeys(keys, nan), "theorem_steps": math.inf, "budget_covers_theorem": 0}
    log_contraction = math.log1p(-lemma)  # < 0
    B = theorem_B(cfg, outputs)
    log_d = math.log(4.0 / (cfg.m * lam)) + 0.5 * math.log(outputs) + math.log(label_norm)

    def ratio(log_measured: float, log_bound: float) -> float:
        return math.exp(log_measured - log_bound) if math.isfinite(log_measured) else nan

    log_move = math.log(max_move) if max_move > 0 else -math.inf
    log_drift = math.log(max_drift) if max_drift > 0 else -math.inf
    valid = (steps >= 1) & (steps <= last) & np.isfinite(rel_loss) & (rel_loss > 0)
    t, rel = steps[valid], rel_loss[valid]
    theorem_steps = math.log(cfg.eps) / log_contraction
    return {
        "weight_movement_bound_ratio": ratio(log_move, log_d + 3 * B),
        "weight_movement_bound_ratio_eff": ratio(log_move, log_d + 3 * b_eff),
        "kernel_drift_bound_ratio": ratio(log_drift, log_move + math.log(outputs) + 10 * B),
        "kernel_drift_bound_ratio_eff": ratio(log_drift, log_move + math.log(outputs) + 10 * b_eff),
        "linear_rate_ratio": (
            math.exp(float(np.max(np.log(rel) - t * log_contraction))) if t.size else nan
        ),
        "contraction_ratio": (
            float(np.log(rel[-1]) / (t[-1] * log_contraction)) if t.size else nan
        ),
        "theorem_steps": theorem_steps,
        "budget_covers_theorem": int(cfg.steps >= theorem_steps),
    }


@dataclass
class _Setup:
    """A shape group's float64 set-up (see :func:`_set_up`); tensors have B leading."""

    X: torch.Tensor  # (B, n, d)
    Y: torch.Tensor  # (B, n, d_out)
    W0: torch.Tensor  # (B, d, m)
    a: torch.Tensor  # (B, d_out, m)
    H0: torch.Tensor  # (B, n d_out, n d_out)
    lam_min: torch.Tensor  # (B,)
    lam_max: torch.Tensor
    eta: torch.Tensor
    b_eff: torch.Tensor
    label_norm: torch.Tensor


def _set_up(runs: list[Run], dev: torch.device) -> _Setup:
    """Data, symmetric init, H(0), its spectrum and the step size of same-shape runs, float64.

    Only the GD steps run in ``experiment.dtype``: a float32 H cannot resolve a wide run's
    drift of ~1e-7 ||H||, nor a lambda_min near 0.
    """
    cfg0 = runs[0].experiment
    act, m, n = cfg0.activation, cfg0.m, cfg0.n
    data = [make_data(r.experiment, r.data, r.seed) for r in runs]
    X = torch.stack([x for x, _ in data]).to(dev, torch.float64)
    Y = torch.stack([y for _, y in data]).to(dev, torch.float64)
    d = X.shape[-1]
    inits = [
        symmetric_init(
            1, d, m, cfg0.d_out, r.experiment.sigma, torch.Generator().manual_seed(r.seed)
        )
        for r in runs
    ]
    W0 = torch.cat([w for w, _ in inits]).to(dev, torch.float64)
    a = torch.cat([a for _, a in inits]).to(dev, torch.float64)
    H0 = ntk_gram(W0, a, X, act)
    evals = torch.linalg.eigvalsh(H0)
    lam_min, lam_max = evals[:, 0], evals[:, -1]
    c_m = kernel_normaliser(act, m)
    eta = torch.stack(
        [
            r.experiment.lr_scale / (c_m * lam_max[k])
            if r.experiment.lr == "auto"
            else theorem_learning_rate(r.experiment, lam_min[k], n * cfg0.d_out)
            for k, r in enumerate(runs)
        ]
    )
    return _Setup(
        X=X,
        Y=Y,
        W0=W0,
        a=a,
        H0=H0,
        lam_min=lam_min,
        lam_max=lam_max,
        eta=eta,
        b_eff=(X @ W0).abs().flatten(1).amax(dim=1),  # max_r,i |w_r(0)^T x_i|
        label_norm=Y.flatten(1).norm(dim=1),  # ||F(0) - Y||_F: F(0) = 0 at symmetric init
    )


_FIELDS = [f.name for f in dataclasses.fields(_Setup)]


def _padded(part: _Setup, M: int, N: int) -> _Setup:
    """``part`` padded to width M and N points (zeros; see :class:`Pack`)."""
    (B, n, _), d_out = part.X.shape, part.Y.shape[-1]
    dm, dn = M - part.W0.shape[-1], N - n
    H0 = part.H0.view(B, d_out, n, d_out, n)
    return _Setup(
        X=torch.nn.functional.pad(part.X, (0, 0, 0, dn)),
        Y=torch.nn.functional.pad(part.Y, (0, 0, 0, dn)),
        W0=torch.nn.functional.pad(part.W0, (0, dm)),
        a=torch.nn.functional.pad(part.a, (0, dm)),
        H0=torch.nn.functional.pad(H0, (0, dn, 0, 0, 0, dn)).reshape(B, d_out * N, d_out * N),
        **{k: getattr(part, k) for k in ("lam_min", "lam_max", "eta", "b_eff", "label_norm")},
    )


def train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of runs together by full-batch GD (Def. 3.5), batched over runs.

    Runs of one shape are stacked; runs that differ only in width m and sample size n are
    padded into one packed step (:class:`Pack`), which gives each run what it gets alone (to
    rounding: 1e-10 relative in float64, 1e-5 in float32; tested).

    Each run keeps its own data, init (from its seed), learning rate and eps; once its relative
    loss reaches eps it is frozen, so its curves and drift stop where it first fit the data.
    Curves are written at log-spaced steps into preallocated tensors; the only host
    synchronisations are at those record steps.

    Returns per run the summary scalars ``lambda_min, lambda_max, eta, final_loss, final_rel_loss,
    steps_to_eps (-1 if never), max_weight_movement (max over neurons and t of
    ||w_r(t) - w_r(0)||), rms_weight_movement (root mean square over neurons), max_kernel_drift
    (max over recorded t of ||H(t) - H(0)||_F), drift_ratio
    (= max_kernel_drift / lambda_min), fit_margin (= final_rel_loss / eps), ntk_margin
    (= max(fit_margin, drift_ratio / drift_fraction)), ntk_regime (1 if ntk_margin <= 1)`` and
    ``status``, and the curves of :data:`CURVE_METRICS` at the recorded steps.

    Raises:
        ValueError: the runs differ in more than n and m.
    """
    keys = {_step_key(r) for r in runs}
    if len(keys) != 1:
        raise ValueError(f"a bundle needs runs that differ only in n and m, got {len(keys)} kinds")
    cfg0 = runs[0].experiment
    act, steps = cfg0.activation, cfg0.steps
    dev = resolve_device(device)
    dtype = getattr(torch, cfg0.dtype)

    groups: dict[tuple, list[int]] = {}
    for k, r in enumerate(runs):
        groups.setdefault(shape_key(r), []).append(k)
    order = [k for members in groups.values() for k in members]  # runs in the order trained
    parts = [_set_up([runs[k] for k in members], dev) for members in groups.values()]
    if len(parts) == 1:
        (setup,), pack, pack64 = parts, None, None
    else:
        widths = [runs[k].experiment.m for k in order]
        sizes = [runs[k].experiment.n for k in order]
        M, N = max(widths), max(sizes)
        padded = [_padded(part, M, N) for part in parts]
        setup = _Setup(**{f: torch.cat([getattr(q, f) for q in padded]) for f in _FIELDS})
        pack64 = Pack.of(widths, sizes, M, N, torch.float64, dev)
        pack = Pack.of(widths, sizes, M, N, dtype, dev)
    X, Y, W0, a, H0 = setup.X, setup.Y, setup.W0, setup.a, setup.H0
    ordered = [runs[k] for k in order]
    eps = torch.tensor([r.experiment.eps for r in ordered], dtype=torch.float64, device=dev)

    record = log_spaced_steps(steps, cfg0.record_points)
    L0 = loss(torch.zeros_like(Y), Y)

    def observe(W, L):
        W, L = W.double(), L.double()
        moved = squared_movement(W, W0)  # (B, m), 0 on padded neurons
        drift = (ntk_gram(W, a, X, act, pack64) - H0).flatten(-2).norm(dim=-1)
        mean = moved.mean(dim=-1) if pack64 is None else moved.sum(dim=-1) / pack64.m[:, 0, 0]
        move, rms = moved.amax(dim=-1).sqrt(), mean.sqrt()
        return torch.stack([L, L / L0, move, drift, rms], dim=-1)

    W_train = W0.to(dtype)  # gd casts a, X, Y, eta, eps to it
    eta = setup.eta
    _, hit, statuses, curves = gd(W_train, a, X, Y, eta, eps, steps, record, act, observe, pack)
    # gd's weights are those of its last observation, so that row is the final state.
    k_rec = curves.shape[1]
    final = curves[:, -1]
    max_drift, max_move, max_rms = (
        curves[..., j].nan_to_num(nan=-1).amax(dim=1) for j in (3, 2, 4)
    )

    lam_min, lam_max, b_eff, label_norm = (
        setup.lam_min,
        setup.lam_max,
        setup.b_eff,
        setup.label_norm,
    )
    summaries = [{}] * len(runs)
    for k, r in enumerate(ordered):  # row k of every tensor is run order[k]
        c = r.experiment
        status = statuses[k]
        lam = float(lam_min[k])
        drift_ratio = float(max_drift[k]) / lam if lam > 0 else float("inf")
        fit_margin = float(final[k, 1]) / c.eps if status != "diverged" else float("inf")
        ntk_margin = max(fit_margin, drift_ratio / c.drift_fraction)
        checks = theorem_checks(
            c,
            lam=lam,
            lr_step=kernel_normaliser(act, c.m) * float(eta[k]),
            b_eff=float(b_eff[k]),
            label_norm=float(label_norm[k]),
            max_move=float(max_move[k]),
            max_drift=float(max_drift[k]),
            rel_loss=curves[k, :, 1].numpy(),
            steps=np.asarray(record[:k_rec]),
            last=int(hit[k]) if hit[k] >= 0 else c.steps,
        )
        summaries[order[k]] = {
            "status": status,
            "lambda_min": lam,
            "lambda_max": float(lam_max[k]),
            "eta": float(eta[k]),
            "final_loss": float(final[k, 0]),
            "final_rel_loss": float(final[k, 1]),
            "steps_to_eps": int(hit[k]),
            "max_weight_movement": float(max_move[k]),
            "rms_weight_movement": float(max_rms[k]),
            "max_kernel_drift": float(max_drift[k]),
            "drift_ratio": drift_ratio,
            "fit_margin": fit_margin,
            "ntk_margin": ntk_margin,
            "ntk_regime": int(ntk_margin <= 1.0),
            "kernel_regime": int(drift_ratio <= c.drift_fraction),
            "theorem_B": theorem_B(c, c.n * c.d_out),
            "B_eff": float(b_eff[k]),
            **checks,
        }
    frame = pd.DataFrame(
        {
            "run": np.repeat(np.asarray(order), k_rec),
            "step": np.tile(np.asarray(record[:k_rec]), len(runs)),
            **{name: curves[..., j].reshape(-1).numpy() for j, name in enumerate(CURVE_METRICS)},
        }
    )
    return BundleResult(summaries=summaries, curves=frame)


PAPER = "softmax-NTK (arXiv 2405.03251)"
# The setting Thm 4.2 and its lemmas cover, as the runs record it.
SOFTMAX = Assumption("experiment.activation", "==", "softmax", "Thm 4.2 is about softmax networks")
STABLE_STEP = Assumption(
    "experiment.lr_scale", "<=", 1.0, "Lemma 5.3's GD step has eta m lambda_max <= 1"
)
BUDGET = Assumption(
    "budget_covers_theorem",
    "==",
    1,
    "the budget covers Thm 4.2's step count",
    show="theorem_steps",
)
THRESHOLD_SETTING = (SOFTMAX, STABLE_STEP, BUDGET)
LEMMA_SETTING = (SOFTMAX, STABLE_STEP)
DELTA = "experiment.theorem_delta"
CLAIMS = (
    Claim(
        id="width_threshold",
        statement="m* = smallest width that fits (rel. loss <= eps) in the NTK regime "
        "(kernel drift <= lambda/2) grows at most like n^2",
        source=f"{PAPER}, Thm 4.2 / Cor. 4.3",
        kind="threshold_power_law",
        quantity="ntk_margin",
        axis="experiment.n",
        threshold_axis="experiment.m",
        theory=2.0,
        direction="<=",
        assumptions=THRESHOLD_SETTING,
        quantity_label="$m^*$ (NTK-regime width threshold)",
        axis_label="training points $n$",
        note="theory: m = Omega(lambda^-2 n^2 ...) suffices; exponent <= 2 + o(1); each seed's "
        "m* is interval-censored between two swept widths",
    ),
    Claim(
        id="width_threshold_lambda",
        statement="m* lambda^2 grows at most like n^2: the theorem's width "
        "m = Omega(lambda^-2 n^2 ...) with the measured lambda = lambda_min(H(0)) taken out",
        source=f"{PAPER}, Thm 4.2 / Cor. 4.3",
        kind="threshold_power_law",
        quantity="ntk_margin",
        axis="experiment.n",
        threshold_axis="experiment.m",
        normalise=("lambda_min", 2.0),
        theory=2.0,
        direction="<=",
        assumptions=THRESHOLD_SETTING,
        quantity_label=r"$m^* \lambda^2$",
        axis_label="training points $n$",
        note="lambda of each n and seed from its widest run (closest to the infinite-width "
        "kernel); lambda shrinks with n, so this is the fairer test where it does",
    ),
    Claim(
        id="fit_threshold",
        statement="m_fit = smallest width that reaches rel. loss <= eps within the budget "
        "grows at most like n^2",
        source=f"{PAPER}, Thm 4.2",
        kind="threshold_power_law",
        quantity="fit_margin",
        axis="experiment.n",
        threshold_axis="experiment.m",
        theory=2.0,
        direction="<=",
        assumptions=THRESHOLD_SETTING,
        quantity_label=r"$m_{\rm fit}$ (width that fits)",
        axis_label="training points $n$",
        note="within the budget experiment.steps, which must cover Thm 4.2's step count "
        "(outside assumptions otherwise)",
    ),
    Claim(
        id="weight_movement",
        statement="every neuron stays within D = 4 m^-1 lambda^-1 exp(3B) sqrt(nd) "
        "||F(0) - Y||_F of its initialisation, with probability >= 1 - delta",
        source=f"{PAPER}, Def. A.2 / Lemma 5.3",
        kind="bound",
        quantity="weight_movement_bound_ratio",
        axis="experiment.m",
        theory=0.1,
        theory_column=DELTA,
        direction="<=",
        where=(("ntk_regime", 1),),
        assumptions=LEMMA_SETTING,
        describe=(
            Describe(
                ("max_weight_movement", "rms_weight_movement"),
                "experiment.m",
                -1.0,
                "experiment.n",
            ),
            Describe(("weight_movement_bound_ratio_eff",)),
        ),
        quantity_label=r"$\max_{r,t} \|w_r(t) - w_r(0)\| / D$",
        axis_label="width $m$",
        note="per NTK-regime run, the largest movement over Def. A.2's D with Def. 4.1's B "
        "(C = theorem_C, delta = theorem_delta); the fraction of runs above D must be at most "
        "delta; B_eff = max |w_r(0)^T x_i| gives the ratio shown beside it",
    ),
    Claim(
        id="kernel_drift",
        statement="||H(W) - H(W(0))||_F <= R n d exp(10B) when every neuron moved at most "
        "R < 0.01, with probability >= 1 - delta",
        source=f"{PAPER}, Lemma 5.1",
        kind="bound",
        quantity="kernel_drift_bound_ratio",
        axis="experiment.m",
        theory=0.1,
        theory_column=DELTA,
        direction="<=",
        where=(("ntk_regime", 1), ("max_weight_movement", "<", 0.01)),
        assumptions=LEMMA_SETTING,
        describe=(
            Describe(("max_kernel_drift",), "experiment.m", -1.0, "experiment.n"),
            Describe(("kernel_drift_bound_ratio_eff",)),
        ),
        quantity_label=r"$\max_t \|H(t) - H(0)\|_F / (R\,n\,d\,e^{10B})$",
        axis_label="width $m$",
        note="per NTK-regime run with R = its largest movement; the lemma bounds the drift by "
        "R n d exp(10B), so with R ~ 1/m (Def. A.2) the drift falls at least like 1/m",
    ),
    Claim(
        id="linear_rate",
        statement="the loss contracts at least linearly: ||F(t) - Y||_F^2 <= (1 - m eta lambda "
        "/ 4)^t ||F(0) - Y||_F^2, with probability >= 1 - delta",
        source=f"{PAPER}, Lemma 5.3",
        kind="bound",
        quantity="linear_rate_ratio",
        axis="experiment.m",
        theory=0.1,
        theory_column=DELTA,
        direction="<=",
        where=(("kernel_regime", 1),),
        assumptions=LEMMA_SETTING,
        describe=(Describe(("contraction_ratio",)),),
        quantity_label=r"$\max_t \, (L(t)/L(0)) / (1 - m \eta \lambda/4)^t$",
        axis_label="width $m$",
        note="per run whose kernel stays within lambda/2 of H(0) (the proof's condition), the "
        "largest ratio over the recorded steps until the run fit; contraction_ratio: the "
        "measured per-step log contraction over the lemma's",
    ),
)
# The report's curve figure: relative loss vs step, a line per width, at the middle n.
FIGURES = (
    Figure(
        "curves",
        "rel_loss",
        (Panel("rel_loss", "rel_loss"),),
        "experiment.m",
        at_middle="experiment.n",
    ),
)

EXPERIMENT = Experiment(
    name="ntk",
    config=CONFIG,
    grids=GRIDS,
    train=train,
    claims=CLAIMS,
    data=DATA,
    validate=lambda run: make_data(run.experiment, run.data, 0),
    shape_key=shape_key,
    pack_key=pack_key,
    footprint=footprint,
    gpu_footprint=GPU_FOOTPRINT,
    figures=FIGURES,
)
