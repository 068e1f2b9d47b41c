"""Thm 4.2's constants (Def. 4.1's B, the theorem's step size) and the per-run quantities
that test its lemmas (:func:`theorem_checks`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from sdyn.experiments.ntk.config import NTKConfig

if TYPE_CHECKING:
    import torch


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
