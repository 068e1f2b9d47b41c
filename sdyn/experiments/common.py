"""What every experiment module shares: range checks of config schemas, step schedules, seeded
random streams, the device. The contract's types (``Run``, ``BundleResult``, ``Claim``, ...)
are :mod:`sdyn.api`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # importing this module stays cheap: --help reads configs and claims only
    import torch


def require(ok: bool, message: str) -> None:
    """The range check of every config schema: ``ValueError(message)`` unless ``ok``."""
    if not ok:
        raise ValueError(message)


def require_sample_sizes(n: list[int], minimum: int = 2, noun: str = "sample size") -> None:
    """The ``grid.n`` check of every grid schema: at least one value, each ``>= minimum``.

    Raises:
        ValueError: naming the key as ``grid.n``.
    """
    require(len(n) > 0, f"grid.n is empty: give at least one {noun}")
    for value in n:
        require(value >= minimum, f"grid.n values must be >= {minimum}, got {value}")


def require_recording(cfg: Any) -> None:
    """Checks of the fields every trainer shares: ``record_points`` in [2, 200] and, where the
    schema has one, ``dtype`` in float32|float64.

    Raises:
        ValueError: naming the key as ``experiment.<key>``.
    """
    require(
        2 <= cfg.record_points <= 200,
        f"experiment.record_points must be in [2, 200], got {cfg.record_points}",
    )
    dtype = getattr(cfg, "dtype", "float64")
    require(
        dtype in ("float32", "float64"), f"experiment.dtype must be float32|float64, got {dtype}"
    )


def log_spaced_steps(steps: int, points: int) -> list[int]:
    """Distinct integer steps in ``[0, steps]``, log-spaced, always including 0 and ``steps``.

    Returns at most ``points`` values (fewer when the budget is short).
    """
    grid = np.round(np.geomspace(1, max(steps, 0) + 1, points)).astype(int) - 1
    return np.unique(grid).tolist()


def seeded_generator(seed: int, *key: int) -> torch.Generator:
    """The torch generator of the random stream ``key`` of a run's ``seed``: numpy's
    ``SeedSequence([seed, *key])``, so streams of different keys (or seeds) are independent.

    Raises:
        ValueError: a negative seed or key (``SeedSequence``'s: it takes non-negative integers).
    """
    import torch

    state = np.random.SeedSequence([seed, *key]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def per_run_mv(A: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``A v`` for each run of a bundle: ``A`` (B, N, K), ``v`` (B, K) -> (B, N).

    A product and a sum over the last axis, not a batched ``matmul``: BLAS picks its kernel (and
    so its rounding) by the batch size, and a run must train alike alone and in any bundle."""
    return (A * v.unsqueeze(-2)).sum(-1)


def resolve_device(device: str | None = None) -> torch.device:
    """``device`` if given, else CUDA when a GPU is visible, else the CPU."""
    import torch

    if device:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
