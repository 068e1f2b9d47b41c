"""The NTK experiment's training sets: the sphere with its teacher, and diabetes."""

from __future__ import annotations

import math

import numpy as np

from sdyn.experiments.ntk.config import NTKConfig

# Independent random streams of one seed (numpy SeedSequence keys, with n and m after them):
# every (n, seed) draws its own data set and every run its own initialisation, so runs pooled
# in a claim share no random draw but the data set of their (n, seed). Thm 4.2's probability is
# over the initialisation for fixed data: the per-run bounds count independent trials.
STREAM_DATA, STREAM_INIT = range(2)


def make_data(cfg: NTKConfig, data, seed: int):
    """Training set of one run, deterministic from ``(seed, n)``: :func:`training_set` as float64
    tensors ``(n, d)`` and ``(n, d_out)``.

    Raises:
        ValueError: as :func:`training_set`.
    """
    import torch  # here, not above: validating a sweep (training_set) needs no torch

    X, Y = training_set(cfg, data, seed)
    return torch.from_numpy(X), torch.from_numpy(Y)


def training_set(cfg: NTKConfig, data, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Training set of one run, deterministic from ``(seed, n)``: the random stream
    ``(seed, STREAM_DATA, n)``, so the data sets of different n are independent draws.

    Returns ``(X, Y)`` as float64 arrays ``(n, d)`` and ``(n, d_out)`` with ``||x_i|| <= 1`` and
    ``||y_i|| <= 1``: points on the unit sphere in R^d labelled by a random two-layer teacher,
    or n points of the diabetes set drawn without replacement (features standardised, then each
    point scaled to the unit ball). NumPy only: a sweep validates its runs without torch.

    Raises:
        ValueError: ``cfg.d`` disagrees with the data set, or diabetes has fewer than n points.
    """
    d = cfg.d if cfg.d is not None else data.d
    rng = np.random.default_rng([seed, STREAM_DATA, cfg.n])
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
    return X, Y


def _diabetes():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    y = y - y.mean()
    return X, y / np.abs(y).max()
