"""Grid expansion into runs, and the stable hash that identifies a run across sweeps."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from sdyn.api import Run


@dataclasses.dataclass(frozen=True)
class Planned:
    """One run of the plan as tracking records it: ``params`` are its resolved hyperparameters
    as MLflow param strings (``experiment.<key>``, ``data.<key>``; the seed apart), ``version``
    the experiment's version that its hash holds (:attr:`sdyn.api.Experiment.version`)."""

    hash: str
    cell: str
    cell_name: str
    seed: int
    params: dict[str, str]
    version: str


def expand(experiment: Any, data: Any, grid: Any) -> list[Run]:
    """All runs of a grid: every point of ``grid.points()`` times seeds ``0 .. grid.seeds-1``.

    Each point's overrides are applied with ``dataclasses.replace``, so the experiment schema's
    range checks run on every point.

    Raises:
        ValueError: a grid point is out of range or repeated (its runs would be trained and
            recorded twice), or the grid is empty.
    """
    points, seen = grid.points(), set()
    for point in points:
        if (key := repr(sorted(point.items()))) in seen:
            name = " ".join(f"{axis}={value}" for axis, value in point.items())
            raise ValueError(f"grid {grid.name} has the point {name} twice: a value repeats")
        seen.add(key)
    runs = [
        Run(dataclasses.replace(experiment, **point), data, seed)
        for point in points
        for seed in range(grid.seeds)
    ]
    if not runs:
        raise ValueError("the grid is empty: nothing to run")
    return runs


def run_params(run: Run) -> dict[str, Any]:
    """A run's resolved hyperparameters as flat ``experiment.*``, ``data.*``, ``seed`` keys."""
    params = {f"experiment.{k}": v for k, v in dataclasses.asdict(run.experiment).items()}
    params.update({f"data.{k}": v for k, v in dataclasses.asdict(run.data).items()})
    params["seed"] = run.seed
    return params


def config_hash(run: Run, version: str | int) -> str:
    """Stable 16-hex-digit key of a run: its resolved config and the experiment's ``version``
    (:attr:`sdyn.api.Experiment.version`, its code). The same config of the same code has the
    same key in any sweep; another version's runs have other keys, so none is reused."""
    return _digest({"v": version, **run_params(run)})


def cell_hash(run: Run, version: str | int) -> str:
    """Stable 16-hex-digit key of a run's grid cell: as :func:`config_hash`, without the seed.

    The seeds of one cell share this hash; tracking records one MLflow run per cell.
    """
    params = run_params(run)
    del params["seed"]
    return _digest({"v": version, "cell": params})


def _digest(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
