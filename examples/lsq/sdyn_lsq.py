"""Gradient descent on over-parameterised least squares: an sdyn plugin (sdyn.api only).

Theorem (Zhang, Bengio, Hardt, Recht & Vinyals, ICLR 2017, §5; the rate is Nesterov,
*Introductory Lectures on Convex Optimization*, 2004, Thm 2.1.15, on the row space of X):
for f(w) = ||X w - y||^2 / (2n) with X of shape (n, d), n < d and rank n, GD from w_0 = 0
with a step eta <= 1/lambda_max stays in the row space of X and converges to the
minimum-norm interpolant w* = X^+ y, at least geometrically:
||w_t - w*|| <= (1 - eta lambda_min)^t ||w*||, lambda_min/max the extreme non-zero
eigenvalues of H = X^T X / n. With y = X beta (||beta|| = 1) and Gaussian X, the row space is
a uniformly random n-dimensional subspace, so E||w*||^2 = ||P beta||^2 = n / d exactly.
"""

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from sdyn.api import (
    Assumption,
    BundleResult,
    Claim,
    Experiment,
    Figure,
    Panel,
    Run,
    log_spaced_steps,
    require,
    resolve_device,
)

# Below this the bound (1 - eta lambda_min)^t ||w*|| is within float64's reach of rounding.
RESOLVED = 1e-10


@dataclass
class LsqConfig:
    name: str = "lsq"
    n: int = 32  # samples: the rows of X
    d: int = 512  # parameters: the columns of X (d > n: over-parameterised)
    eta_scale: float = 1.0  # eta = eta_scale / lambda_max(X^T X / n); the theorem needs <= 1
    steps: int = 400  # GD iterations from w_0 = 0
    record_points: int = 60  # log-spaced steps at which the distance to w* is recorded

    def __post_init__(self) -> None:
        require(2 <= self.n < self.d, f"experiment.n must be in [2, d), got {self.n}")
        eta = self.eta_scale
        require(0 < eta < 2, f"experiment.eta_scale must be in (0, 2), got {eta}")
        require(self.steps >= 1, f"experiment.steps must be >= 1, got {self.steps}")


@dataclass
class SamplesGrid:
    name: str = "samples"
    n: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])  # sample sizes
    seeds: int = 8  # seeds per n: 0 .. seeds-1

    def points(self) -> list[dict]:
        return [{"n": n} for n in self.n]


def shape_key(run: Run) -> tuple:
    cfg = run.experiment
    return (cfg.n, cfg.d, cfg.steps, cfg.record_points)


def train(runs: list[Run], device: str | None = None) -> BundleResult:
    """GD on B least-squares problems at once: X (B, n, d), w (B, d), float64."""
    cfg, dev = runs[0].experiment, resolve_device(device)
    gens = [torch.Generator().manual_seed(r.seed) for r in runs]
    X = torch.stack([torch.randn(cfg.n, cfg.d, generator=g, dtype=torch.float64) for g in gens])
    beta = torch.stack([torch.randn(cfg.d, generator=g, dtype=torch.float64) for g in gens])
    X, beta = X.to(dev) / cfg.d**0.5, (beta / beta.norm(dim=1, keepdim=True)).to(dev)
    y = torch.einsum("bnd,bd->bn", X, beta)
    gram = X @ X.transpose(1, 2)  # (B, n, n): its eigenvalues / n are H's non-zero ones
    lam = torch.linalg.eigvalsh(gram) / cfg.n
    w_star = torch.einsum("bnd,bn->bd", X, torch.linalg.solve(gram, y))
    norm = w_star.norm(dim=1)
    eta = torch.tensor([r.experiment.eta_scale for r in runs], device=dev) / lam[:, -1]
    rate = 1 - eta * lam[:, 0]
    w = torch.zeros_like(w_star)
    record = set(log_spaced_steps(cfg.steps, cfg.record_points))
    steps, distance, ratio = [], [], torch.zeros_like(norm)
    for t in range(cfg.steps + 1):
        if t in record:
            gap = (w - w_star).norm(dim=1)
            bound = rate**t * norm
            ok = (bound >= RESOLVED * norm) & (t > 0)  # at t = 0 both sides are ||w*||
            ratio = torch.where(ok, torch.maximum(ratio, gap / bound), ratio)
            steps.append(t)
            distance.append(gap / norm)
        residual = torch.einsum("bnd,bd->bn", X, w) - y
        w = w - (eta / cfg.n)[:, None] * torch.einsum("bnd,bn->bd", X, residual)
    distance = torch.stack(distance, dim=1).cpu().numpy()  # (B, steps recorded)
    summaries = [
        {
            "status": "converged" if distance[b, -1] < 1e-6 else "budget_exhausted",
            "interpolant_norm": float(norm[b]),
            "bound_ratio": float(ratio[b]),
            "rate_theory": float(rate[b]),
            "final_distance": float(distance[b, -1]),
        }
        for b in range(len(runs))
    ]
    curves = pd.DataFrame(
        {
            "run": np.repeat(np.arange(len(runs)), len(steps)),
            "step": np.tile(steps, len(runs)),
            "distance": distance.reshape(-1),
        }
    )
    return BundleResult(summaries=summaries, curves=curves)


SOURCE = "Zhang et al. (ICLR 2017) §5 with Nesterov (2004) Thm 2.1.15"
STEP = Assumption("experiment.eta_scale", "<=", 1.0, "the rate needs eta <= 1/lambda_max")
CLAIMS = (
    Claim(
        id="min_norm_rate",
        statement="from w_0 = 0, GD converges to the minimum-norm interpolant X^+ y at least "
        "geometrically: ||w_t - w*|| <= (1 - eta lambda_min)^t ||w*|| at every step",
        source=SOURCE,
        kind="bound",
        quantity="bound_ratio",
        axis="experiment.n",
        theory=0.1,  # a sure bound, tested as the share of runs above it (40 runs resolve 0.1)
        direction="<=",
        assumptions=(STEP,),
        quantity_label=r"$\max_t \|w_t - w^*\| / ((1 - \eta\lambda_{\min})^t \|w^*\|)$",
        axis_label="samples $n$",
    ),
    Claim(
        id="interpolant_norm",
        statement="the minimum-norm interpolant's norm grows like n^1/2: E||w*||^2 = n/d",
        source="rotational invariance of Gaussian X (exact)",
        kind="power_law",
        quantity="interpolant_norm",
        axis="experiment.n",
        theory=0.5,
        direction="==",
        tolerance=0.05,
        references=((0.0, "exact: sqrt(n/d)"),),
        quantity_label=r"$\|w^*\|$",
        axis_label="samples $n$",
    ),
)

EXPERIMENT = Experiment(
    name="lsq",
    config=LsqConfig,
    grids={"samples": SamplesGrid},
    train=train,
    claims=CLAIMS,
    shape_key=shape_key,
    figures=(
        Figure(
            "distance",
            "GD to the minimum-norm interpolant",
            (Panel("distance", r"$\|w_t - w^*\| / \|w^*\|$"),),
            line_by="experiment.n",
        ),
    ),
    references=(SOURCE,),
    # A named sweep the plugin ships: python -m sdyn.sweep --sweep lsq_wide (d = 2048).
    sweeps={"lsq_wide": ("+grid=samples", "experiment.d=2048")},
)
