"""How many GD steps a run trains before it stops, forecast without training it: GD in the
kernel regime, where the NTK Gram matrix stays H(0). What ``--plan`` prices an NTK run at.

If H(t) = H(0), the residual R(t) = F(t) - Y (output-major, length n d_out) follows
``R(t+1) = (I - eta c_m H(0)) R(t)`` from ``R(0) = -Y`` (F(0) = 0 at symmetric init, Def.
3.7). With ``H(0) = sum_i lambda_i v_i v_i^T`` the relative loss is

    L(t) / L(0) = sum_i q_i^(2t) (v_i^T y)^2 / ||y||^2,    q_i = 1 - eta c_m lambda_i,

a sum of exponentials in t. A run stops at the first t where it is at most ``eps`` (it fits),
else at its budget. A step too large for H(0) (some ``|q_i| > 1``) leaves the kernel regime at
once: the softmax's bounded outputs then keep such a run from the divergence that the linear
dynamics predict (lr_scale 3 trains its whole budget), so it is forecast its budget. Lemma 5.3
bounds the same dynamics by the slowest rate alone, ``1 - m eta lambda_min / 4``; the
forecast weighs every eigenvalue by the labels' share on it, which is why runs fit long before
that bound says.

A wide run stays in the kernel regime and trains for the forecast steps: on the default width
grid (seeds 0 and 1, trained on a CPU) every run of width 256 or more fitted at its forecast
step or one after, every run of width 64 or more within 5% of it. A narrow run's kernel moves,
so its forecast is a guess (n 128, m 32: 30,000, the budget, for a run that fitted after
13,234; n 8, m 2: 294 for 417), but such runs are cheap. Where H(0) is singular the run never
fits, as forecast. The loss follows H(0) further than the kernel does: at n 1024, m 4096 (seed
0) the kernel drifted 22 lambda_min(H(0)), and the run fitted after 22,940 steps against a
forecast of 22,943. Taking H(0) at :data:`FORECAST_WIDTH` overstates a wider run's steps a
little: m 8192 there fitted after 19,271.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from sdyn.api import Run
from sdyn.experiments.ntk.bundling import shape_key
from sdyn.experiments.ntk.network import kernel_normaliser
from sdyn.experiments.ntk.setup import initial, step_sizes

# H(0) of a wider run is taken at this width, where it costs a fraction of a second at n = 1024
# (an (n, m) Jacobian and an n x n eigh); a wider run fits a little sooner (see the module).
FORECAST_WIDTH = 4096
GRID_POINTS = 256  # log-spaced steps at which the loss is evaluated before bisection
ROUNDING = 1e-9  # |q_i| - 1 below this is an eigenvalue of 0 off by rounding: no decay


def steps_to_stop(runs: list[Run]) -> list[int]:
    """Per run, the GD step at which it is forecast to fit, at most its budget
    ``experiment.steps``, from the kernel regime's dynamics (see the module). Runs wider than
    :data:`FORECAST_WIDTH` are forecast at that width; runs that share their data, init and
    (so capped) width share one set-up.

    Shapes: none (configs in, one int per run out). Cost: per distinct capped run, its H(0)
    (:func:`~.setup.initial`) and one ``eigh`` of that ``(n d_out, n d_out)`` matrix, on the
    CPU.
    """
    capped = [_at_most(run, FORECAST_WIDTH) for run in runs]
    distinct = {repr(run): run for run in capped}
    by_shape: dict[tuple, list[str]] = {}
    for key, run in distinct.items():
        by_shape.setdefault(shape_key(run), []).append(key)
    forecast = {}
    for keys in by_shape.values():
        group = [distinct[key] for key in keys]
        _, Y, _, _, H0 = initial(group, torch.device("cpu"))
        lam, V = torch.linalg.eigh(H0)  # set_up's eigvalsh, with the eigenvectors
        eta = step_sizes(group, lam[:, 0], lam[:, -1])
        for k, (key, run) in enumerate(zip(keys, group, strict=True)):
            cfg = run.experiment
            step = float(eta[k]) * kernel_normaliser(cfg.activation, cfg.m)
            forecast[key] = _stop(lam[k], V[k], Y[k], step, cfg.eps, cfg.steps)
    return [forecast[repr(run)] for run in capped]


def _at_most(run: Run, width: int) -> Run:
    if run.experiment.m <= width:
        return run
    return dataclasses.replace(run, experiment=dataclasses.replace(run.experiment, m=width))


def _stop(
    lam: torch.Tensor, V: torch.Tensor, Y: torch.Tensor, step: float, eps: float, budget: int
) -> int:
    """First t <= budget with L(t)/L(0) <= eps under H(0), else budget. H(0) = V diag(lam) V^T:
    lam ``(n d_out,)``, V ``(n d_out, n d_out)``; Y ``(n, d_out)``; ``step`` = eta c_m."""
    weight = (V.T @ Y.T.reshape(-1)).square()
    rate = (1 - step * lam).abs()
    if bool((rate > 1 + ROUNDING).any()):
        return budget
    rate, weight = rate.clamp(max=1.0), weight / weight.sum()

    def stopped(t: torch.Tensor) -> torch.Tensor:  # t (k,) -> (k,) bool
        return (weight * rate.pow(2 * t[:, None].to(rate.dtype))).sum(dim=-1) <= eps

    grid = torch.logspace(0, math.log10(budget), GRID_POINTS, dtype=torch.float64)
    grid = torch.unique(torch.cat([grid.round().long(), torch.tensor([budget])]))
    hits = stopped(grid).nonzero()
    if len(hits) == 0:
        return budget
    j = int(hits[0])
    lo, hi = (int(grid[j - 1]) if j else 0), int(grid[j])
    while hi - lo > 1:  # the loss falls with t: its crossing by bisection
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if bool(stopped(torch.tensor([mid]))) else (mid, hi)
    return hi
