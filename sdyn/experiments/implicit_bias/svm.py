"""The max-margin references of the implicit-bias experiment, solved with cvxpy (Clarabel)::

W-SVM: W_mm = argmin ||W||_F  s.t.  (x_{i,opt_i} - x_it)^T W x_i1 >= 1  for all i, t != opt_i
u-SVM: u_mm = argmin ||u||    s.t.  y_i u^T x_{i,opt_i} >= 1            for all i
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import torch

# Relative slack when checking SVM constraints on a solver's answer.
SVM_TOL = 1e-6


@dataclass(frozen=True)
class SVMSolution:
    """A hard-margin SVM's answer: cvxpy's ``status``, whether it is ``feasible`` (solved and its
    constraints verified), the ``solution`` (None if not), and per constraint the ``margin`` and
    the ``dual`` multiplier of the standard form ``min 1/2 ||.||^2``, so that the solution is
    ``sum_j dual_j A_j`` (support vectors: dual > 0 and margin = 1)."""

    status: str
    feasible: bool
    solution: torch.Tensor | None
    margin: torch.Tensor | None
    dual: torch.Tensor | None


_SOLVED = (cp.OPTIMAL, cp.OPTIMAL_INACCURATE)


def solve_w_svm(X: torch.Tensor, opt: torch.Tensor) -> SVMSolution:
    """W-SVM (Section 2): ``min ||W||_F  s.t.  (x_{i,opt} - x_it)^T W x_i1 >= 1, t != opt_i``.

    Solved with cvxpy (Clarabel) in the span of the constraint matrices
    ``A_j = (x_{i,opt} - x_it) x_i1^T``, where the minimiser lies (any component orthogonal to
    them only adds norm): ``W = sum_j alpha_j A_j``, ``min alpha^T K alpha s.t. K alpha >= 1``
    with ``K_jk = <A_j, A_k>_F``. The same constraints, so the same feasibility and multipliers,
    with ``n (T - 1)`` variables instead of ``d^2``.

    Shapes: X ``(n, T, d)``, opt ``(n,)`` -> ``solution (d, d)``; ``margin`` and ``dual`` are
    ``(n, T)`` with NaN at the opt tokens.

    Returns an infeasible :class:`SVMSolution` (never raises) when the solver fails or its
    answer violates a constraint by more than ``SVM_TOL``.
    """
    n, T, d = X.shape
    rows = torch.arange(n)
    mask = torch.ones(n, T, dtype=torch.bool)
    mask[rows, opt] = False
    a = (X[rows, opt].unsqueeze(1) - X)[mask]  # (m, d)
    q = X[:, 0].unsqueeze(1).expand(n, T, d)[mask]  # (m, d)
    gram = ((a @ a.T) * (q @ q.T)).numpy()
    alpha = cp.Variable(gram.shape[0])
    constraint = gram @ alpha >= 1
    problem = cp.Problem(cp.Minimize(cp.quad_form(alpha, cp.psd_wrap(gram))), [constraint])
    status = _solve(problem)
    if status not in _SOLVED or alpha.value is None:
        return SVMSolution(status, False, None, None, None)
    W = (a * torch.from_numpy(alpha.value).unsqueeze(1)).T @ q
    margin = torch.full((n, T), math.nan, dtype=torch.float64)
    margin[mask] = torch.einsum("md,de,me->m", a, W, q)
    dual = torch.full((n, T), math.nan, dtype=torch.float64)
    # cvxpy's multipliers belong to the objective ||W||^2; halve them for 1/2 ||W||^2.
    dual[mask] = torch.from_numpy(np.asarray(constraint.dual_value, dtype=float)) / 2
    feasible = bool(margin[mask].min() >= 1 - SVM_TOL)
    return SVMSolution(status, feasible, W if feasible else None, margin, dual)


def solve_u_svm(X_opt: torch.Tensor, y: torch.Tensor) -> SVMSolution:
    """u-SVM (Section 4.2): ``min ||u|| s.t. y_i u^T x_{i,opt} >= 1``, with cvxpy (Clarabel).

    Shapes: X_opt ``(n, d)`` (the opt tokens), y ``(n,)`` -> ``solution (d,)``; ``margin`` and
    ``dual`` are ``(n,)``. Never raises: an infeasible or unsolved problem comes back with
    ``feasible=False``.
    """
    u = cp.Variable(X_opt.shape[1])
    constraint = cp.multiply(y.numpy(), X_opt.numpy() @ u) >= 1
    problem = cp.Problem(cp.Minimize(cp.sum_squares(u)), [constraint])
    status = _solve(problem)
    if status not in _SOLVED or u.value is None:
        return SVMSolution(status, False, None, None, None)
    solution = torch.from_numpy(u.value)
    margin = y * (X_opt @ solution)
    dual = torch.from_numpy(np.asarray(constraint.dual_value, dtype=float)) / 2
    feasible = bool(margin.min() >= 1 - SVM_TOL)
    return SVMSolution(status, feasible, solution if feasible else None, margin, dual)


def _solve(problem: cp.Problem) -> str:
    """Solve with Clarabel; the cvxpy status, or ``solver_error`` when the solver gave up."""
    try:
        problem.solve(solver=cp.CLARABEL)
    except cp.error.SolverError:
        return "solver_error"
    return problem.status
