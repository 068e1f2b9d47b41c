"""Gradient descent on over-parameterised least squares: an sdyn plugin (sdyn.api and the
claim kinds of sdyn.analysis.kinds).

Theorem (Zhang, Bengio, Hardt, Recht & Vinyals, ICLR 2017, §5; the rate is Nesterov,
*Introductory Lectures on Convex Optimization*, 2004, Thm 2.1.15, on the row space of X):
for f(w) = ||X w - y||^2 / (2n) with X of shape (n, d), n < d and rank n, GD from w_0 = 0
with a step eta <= 1/lambda_max stays in the row space of X and converges to the
minimum-norm interpolant w* = X^+ y, at least geometrically:
||w_t - w*|| <= (1 - eta lambda_min)^t ||w*||, lambda_min/max the extreme non-zero
eigenvalues of H = X^T X / n. With y = X beta (||beta|| = 1) and Gaussian X, the row space is
a uniformly random n-dimensional subspace, so E||w*||^2 = ||P beta||^2 = n / d exactly.
So GD is within a fraction eps of w* from t*(eps) = log(eps) / log(1 - eta lambda_min) on.

The plugin also defines a claim kind of its own, :class:`LearningTime` (a time measured run
by run against the time the theorem predicts), in this file alone: no edit of sdyn.
"""

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import pandas as pd
import torch

from sdyn.analysis.kinds import Bound, KindBase, PowerLaw
from sdyn.api import (
    Assumption,
    BundleResult,
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
# The distance to w* (relative to ||w*||) a run must reach: its learning time.
TARGET = 1e-6


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
    reached = torch.full_like(norm, math.nan)  # the first step within TARGET of w*
    for t in range(cfg.steps + 1):
        gap = (w - w_star).norm(dim=1)
        reached = torch.where(reached.isnan() & (gap <= TARGET * norm), t, reached)
        if t in record:
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
            "learning_time": float(reached[b]),
            "predicted_time": math.log(TARGET) / math.log(float(rate[b])),
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


@dataclass(frozen=True, kw_only=True)
class LearningTime(KindBase):
    """A claim kind of this plugin's own: per run, the steps it took (``quantity``, NaN where
    it never got there within its budget) over the steps the theorem predicts (the column
    ``predicted``); the value is the median of that ratio over the runs, against ``theory``.

    * Interval: the distribution-free 95% interval of a median, from order statistics
      (binomial(N, 1/2) ranks), so no model of the times is assumed; a run that never got
      there is right-censored: it counts above every finite ratio.
    * Evidence: 6 runs (fewer cannot put a median's 95% interval between two of them).
    * Plot: each run's time against the prediction, and the line ``time = theory x
      prediction``.
    """

    kind: ClassVar[str] = "learning_time"
    value_name: ClassVar[str] = "median time ratio"
    least_evidence: ClassVar[str] = "6 runs"
    RUNS: ClassVar[int] = 6

    predicted: str = ""  # the column of the theorem's time, in the units of quantity

    def check(self) -> None:
        require(bool(self.predicted), f"{self.label}: give predicted (the theorem's time)")

    def absence(self, rows, curves):
        if self.predicted not in rows:
            return f"{self.predicted} was not recorded by its runs"
        return super().absence(rows, curves)

    def limits(self, planned):
        if len(planned) < self.RUNS:
            return f"{len(planned)} planned runs: a median's interval needs {self.RUNS}"
        return None

    def measure(self, rows, curves, *, theory, notes):
        from scipy import stats

        from sdyn.analysis.fits import Fit

        ratio = (rows[self.quantity] / rows[self.predicted]).astype(float)
        censored = int(ratio.isna().sum())
        if censored:
            notes.append(f"{censored} runs never got there (right-censored)")
        points = pd.DataFrame(
            {
                "x": rows[self.predicted].astype(float),
                "y": rows[self.quantity].astype(float),
                "seed": rows["seed"].astype(float),
                "run": rows["config_hash"],
            }
        )
        ordered = np.sort(ratio.fillna(math.inf).to_numpy())
        n = ordered.size
        # The ranks j, n + 1 - j with P(j <= B <= n - j) >= 95% for B ~ binomial(n, 1/2).
        j = int(stats.binom.ppf(0.025, n, 0.5))
        low, high = (ordered[j - 1], ordered[n - j]) if j >= 1 else (0.0, math.inf)
        fit = Fit(
            kind="learning_time",
            value=float(np.median(ordered)),
            ci_low=float(low),
            ci_high=float(high),
            prefactor=math.nan,
            r2=math.nan,
            residual_std=math.nan,
            n_points=n,
            n_groups=n,
            n_excluded=censored,
            converged=bool(np.isfinite(np.median(ordered))),
            ci_method="order statistics",
            window=None,
            message="",
            details={"confidence": 0.95},  # the level the ranks guarantee (at least 95%)
        )
        return points, fit

    def evidence(self, fit):
        if fit.n_points < self.RUNS:
            return f"too little evidence: {fit.n_points} runs (need {self.RUNS})"
        return None

    def slack(self, fit, theory):
        from sdyn.analysis.verdict import factor_slack

        return factor_slack(fit, theory, self.direction)

    def draw(self, ax, results):
        from sdyn.analysis import plotting

        for k, (name, result) in enumerate(results):
            points = plotting.positive(result.points)
            plotting.runs(ax, points, k, plotting.tag(name), "runs: time vs prediction")
        xs = np.geomspace(*ax.get_xlim(), 20) if ax.has_data() else np.array([1.0, 10.0])
        ax.plot(xs, self.theory * xs, "--", color=plotting.THEORY,
                label=f"theory: time {self.direction} {self.theory:g} x prediction")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")

    @classmethod
    def example(cls):
        """For sdyn's synthetic referee (``sdyn.analysis.referee.check_kind``)."""
        claim = cls(id="learning_time_example", statement="time at most the prediction",
                    source="referee", quantity="time", predicted="predicted",
                    axis="experiment.n", theory=1.0, direction="<=")  # fmt: skip
        return claim, 0.5, 2.0

    def synthetic(self, truth, *, seeds, levels, noise, rng):
        """Runs whose time is ``truth`` times the predicted one, times the noise."""
        rows = [
            {self.axis: n, "seed": s, self.predicted: 10.0 * n,
             self.quantity: 10.0 * n * truth * math.exp(noise * rng.normal())}
            for n in np.geomspace(8, 128, levels) for s in range(seeds)
        ]  # fmt: skip
        frame = pd.DataFrame(rows)
        frame.insert(0, "config_hash", [f"run{k}" for k in range(len(frame))])
        return frame.assign(status="converged"), None


SOURCE = "Zhang et al. (ICLR 2017) §5 with Nesterov (2004) Thm 2.1.15"
STEP = Assumption("experiment.eta_scale", "<=", 1.0, "the rate needs eta <= 1/lambda_max")
CLAIMS = (
    Bound(
        id="min_norm_rate",
        statement="from w_0 = 0, GD converges to the minimum-norm interpolant X^+ y at least "
        "geometrically: ||w_t - w*|| <= (1 - eta lambda_min)^t ||w*|| at every step",
        source=SOURCE,
        quantity="bound_ratio",
        axis="experiment.n",
        theory=0.0,  # a sure bound: it holds in every run
        direction="<=",
        assumptions=(STEP,),
        quantity_label=r"$\max_t \|w_t - w^*\| / ((1 - \eta\lambda_{\min})^t \|w^*\|)$",
        axis_label="samples $n$",
    ),
    PowerLaw(
        id="interpolant_norm",
        statement="the minimum-norm interpolant's norm grows like n^1/2: E||w*||^2 = n/d",
        source="rotational invariance of Gaussian X (exact)",
        quantity="interpolant_norm",
        axis="experiment.n",
        theory=0.5,
        direction="==",
        tolerance=0.05,
        references=((0.0, "exact: sqrt(n/d)"),),
        quantity_label=r"$\|w^*\|$",
        axis_label="samples $n$",
    ),
    LearningTime(
        id="learning_time",
        statement=f"GD gets within {TARGET:g} of w* (relative) no later than the rate "
        "predicts, t* = log(eps) / log(1 - eta lambda_min): time over t* at most 1",
        source=SOURCE,
        quantity="learning_time",
        predicted="predicted_time",
        axis="experiment.n",
        theory=1.0,
        direction="<=",
        assumptions=(STEP,),
        quantity_label="steps to reach the target",
        axis_label="steps the rate predicts, $t^*$",
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
