"""The problem: Sigma, W* and its SVD (:class:`GaussianLinearData`'s construction), the
samples, and the independent random streams of a run's seed."""

from __future__ import annotations

import functools
import math
from dataclasses import astuple, dataclass

import numpy as np
import torch

from sdyn.api import require
from sdyn.experiments.attention_regression.config import DATA, AttentionConfig, GaussianLinearData
from sdyn.experiments.common import seeded_generator

# Independent random streams of one seed (numpy SeedSequence keys), so that runs of the same
# seed share data, random init and minibatches whatever their optimiser (as in App. A).
STREAM_DATA, STREAM_INIT, STREAM_BATCH, STREAM_GRAD_BIAS = range(4)


@dataclass(frozen=True)
class Problem:
    """One regression problem (float64 tensors): ``Sigma`` ``(d, d)``, ``W_star`` ``(k, d)`` with
    SVD ``W_star = U diag(S) Q^T`` (``U`` ``(k, d)``, ``S`` ``(d,)`` decreasing, ``Q`` ``(d, d)``),
    and the noise variance ``noise_var`` (s^2)."""

    Sigma: torch.Tensor
    W_star: torch.Tensor
    U: torch.Tensor
    S: torch.Tensor
    Q: torch.Tensor
    noise_var: float

    def reference_point(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The minimiser ``(V*, K*) = (U S^{1/2}, Sigma^-1 S^{1/2} Q^T)``: O = I on the manifold."""
        root = self.S.sqrt()
        return self.U * root, torch.linalg.solve(self.Sigma, root[:, None] * self.Q.T)


def _haar(n: int, rng: np.random.Generator) -> np.ndarray:
    """A Haar-distributed orthogonal ``(n, n)`` matrix (QR of a Gaussian, signs fixed)."""
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def problem(data: GaussianLinearData) -> Problem:
    """Sigma and W* of ``data`` (the construction of :class:`GaussianLinearData`), cached."""
    return _problem(astuple(data))


@functools.lru_cache(maxsize=16)
def _problem(fields: tuple) -> Problem:
    data = GaussianLinearData(*fields)
    d, k = data.d, data.k
    rng = np.random.default_rng(data.problem_seed)
    q_sigma = _haar(d, rng)
    lam = np.geomspace(1.0, 1.0 / data.cond, d)
    Sigma = (q_sigma * lam) @ q_sigma.T
    U = _haar(k, rng)[:, :d]
    Q = _haar(d, rng)
    S = np.geomspace(data.w_norm, data.w_norm / data.w_cond, d)
    W = (U * S) @ Q.T
    t = functools.partial(torch.tensor, dtype=torch.float64)
    return Problem(t((Sigma + Sigma.T) / 2), t(W), t(U), t(S), t(Q), data.noise_var)


def sample(prob: Problem, n: int, generator: torch.Generator, batch_shape=()):
    """``n`` samples of the problem: ``X`` ``(*batch_shape, n, d)`` and ``Y`` ``(..., n, k)``.

    ``x = L z`` with ``L L^T = Sigma`` and ``z`` standard normal, ``y = W* x + s e`` (float64).
    """
    d, k = prob.W_star.shape[1], prob.W_star.shape[0]
    root = torch.linalg.cholesky(prob.Sigma)
    X = torch.randn(*batch_shape, n, d, generator=generator, dtype=torch.float64) @ root.T
    noise = torch.randn(*batch_shape, n, k, generator=generator, dtype=torch.float64)
    return X, X @ prob.W_star.T + math.sqrt(prob.noise_var) * noise


def make_data(cfg: AttentionConfig, data: GaussianLinearData, seed: int):
    """Training set of one run, deterministic from ``seed``: ``(X, Y)``, ``(N, d)`` and ``(N, k)``.

    Raises:
        ValueError: a data set of another experiment, or fewer samples than dimensions (the OLS
            estimate needs ``N >= d``).
    """
    require(
        isinstance(data, GaussianLinearData),
        f"data={data.name} does not apply to experiment {cfg.name}; its data: {', '.join(DATA)}",
    )
    require(cfg.n >= data.d, f"experiment.n={cfg.n} must be >= data.d={data.d} (OLS needs N >= d)")
    return sample(problem(data), cfg.n, seeded_generator(seed, STREAM_DATA))
