"""The science: one module per model family, each with the same face.

Every module defines ``CONFIG`` (its hyperparameter dataclass), ``DATA`` and ``GRIDS`` (name ->
dataclass), ``shape_key(run)``, ``pack_key(run)`` (runs that can share one padded GPU bundle;
``shape_key`` where an experiment does not pack), ``footprint(run)`` (bytes of its largest
per-run tensor), ``GPU_FOOTPRINT`` (the footprint from which ``cluster.device=auto`` trains a
run on a GPU, None to keep every run on the CPU), ``train(runs, device)`` and ``CLAIMS``.
Modules know nothing of Ray or MLflow.
"""

import importlib
from types import ModuleType

EXPERIMENTS = ("ntk", "score", "attention_regression", "implicit_bias")


def get(name: str) -> ModuleType:
    """The experiment module called ``name``.

    Raises:
        ValueError: no such experiment.
    """
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; choose one of {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"sdyn.experiments.{name}")
