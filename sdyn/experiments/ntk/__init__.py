"""Two-layer softmax network trained by GD in the NTK regime.

Source: "Exploring the Frontiers of Softmax" (softmax-NTK paper), §3-5 and App. A-F; the formulas
used here are in ``docs/theory/softmax-ntk.md#setting``, and how sdyn reads the paper's constants
in ``#readings`` there. Rows are samples (PyTorch order): ``X`` is ``(n, d)`` where the paper
writes ``(d, n)``.

Model (Eq. 1), width ``m``, fixed second layer ``a``::

    softmax:  F(x)_l = m * <a_l, softmax(W^T x)>
    relu:     F(x)_l = m^-1/2 * sum_r a_lr relu(w_r^T x)      (MOSW22, Table 1 baseline)
    exp:      F(x)_l = m^-1/2 * sum_r a_lr exp(w_r^T x)       (GMS23 with the same m^-1/2 scaling)

The NTK Gram matrix is ``H = J J^T / c_m`` with ``J`` the Jacobian of vec(F) w.r.t. W and
``c_m = m`` for softmax (Def. 3.6) and ``c_m = 1`` for relu/exp (their usual normalisation), so
that ``H = O(1)`` in every case and one GD step moves the outputs by ``-eta c_m H (F - Y)``.

Everything is batched over leading dimensions: one call trains many runs at once. This package
knows nothing of Ray or MLflow. One idea a module: :mod:`~.config` (the run's
hyperparameters, data sets and grids), :mod:`~.bundling` (which runs share a bundle, and where
it trains), :mod:`~.claims` (the theorem's claims, the report's figure); and the model, which
needs torch: :mod:`~.network` (outputs, Jacobian, loss, gradient, NTK Gram matrix, init),
:mod:`~.kernel` (the C++ CPU kernel's bindings), :mod:`~.descent` (the batched GD loop;
:mod:`~.fused`, its Triton step for GPUs), :mod:`~.data` (the training sets), :mod:`~.theorem`
(Thm 4.2's constants and per-run checks), :mod:`~.setup` (data, init, H(0) and step size
before GD), :mod:`~.trainer` (:func:`train`) and :mod:`~.forecast` (the step at which a run
will stop, for ``--plan``). Importing the package, or reading its ``EXPERIMENT``'s config,
grids, data sets and claims, imports no torch: the model's names (``ntk.train``, ``from
sdyn.experiments.ntk import forward``) are imported on first use.
"""

from __future__ import annotations

import dataclasses

from sdyn.api import BundleResult, Experiment, Run, lazy_names
from sdyn.experiments.ntk.bundling import (
    GPU_FOOTPRINT,
    PACK_RATIO,
    footprint,
    pack_key,
    shape_key,
    step_cost,
)
from sdyn.experiments.ntk.claims import (
    BUDGET,
    CLAIMS,
    DELTA,
    FIGURES,
    FIT_THRESHOLD_SETTING,
    LEMMA_SETTING,
    NTK_THRESHOLD_SETTING,
    PAPER,
    SOFTMAX,
    STABLE_STEP,
    WITHIN_BUDGET,
)
from sdyn.experiments.ntk.config import (
    ACTIVATIONS,
    CONFIG,
    DATA,
    GRIDS,
    DiabetesData,
    NTKConfig,
    SphereData,
    ThresholdGrid,
    WidthGrid,
)

# The model's public names (torch), by the module that defines them: imported on first use.
_MODEL = {
    "network": (
        "Pack",
        "kernel_normaliser",
        "forward",
        "output_jacobian",
        "loss",
        "loss_and_gradient",
        "ntk_gram",
        "squared_movement",
        "symmetric_init",
    ),
    "descent": ("STATUSES", "DIVERGENCE_FACTOR", "gd_iteration", "gd"),
    "data": ("STREAM_DATA", "STREAM_INIT", "make_data", "training_set"),
    "theorem": ("theorem_B", "theorem_learning_rate", "theorem_checks"),
    "trainer": ("CURVE_METRICS", "train"),
}

__all__ = [
    "ACTIVATIONS",
    "BUDGET",
    "CLAIMS",
    "CONFIG",
    "DATA",
    "DELTA",
    "EXPERIMENT",
    "FIGURES",
    "FIT_THRESHOLD_SETTING",
    "GPU_FOOTPRINT",
    "GRIDS",
    "LEMMA_SETTING",
    "NTK_THRESHOLD_SETTING",
    "PACK_RATIO",
    "PAPER",
    "SOFTMAX",
    "STABLE_STEP",
    "WITHIN_BUDGET",
    "DiabetesData",
    "NTKConfig",
    "SphereData",
    "ThresholdGrid",
    "WidthGrid",
    "footprint",
    "pack_key",
    "shape_key",
    "step_cost",
    *(name for names in _MODEL.values() for name in names),
]


__getattr__, __dir__ = lazy_names(__name__, _MODEL)


def _train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of runs: :func:`sdyn.experiments.ntk.trainer.train`, whose module (and
    torch) is imported on the first call."""
    from sdyn.experiments.ntk.trainer import train

    return train(runs, device)


def _full_budget(run: Run) -> Run:
    """``run`` with a target relative loss (``eps``) that float64 GD never reaches, so that it
    trains its whole budget: what ``--plan``'s probe times (a run that fits stops early)."""
    return dataclasses.replace(run, experiment=dataclasses.replace(run.experiment, eps=1e-300))


def _steps_forecast(runs: list[Run]) -> list[int]:
    """Per run, the step at which GD is forecast to stop:
    :func:`sdyn.experiments.ntk.forecast.steps_to_stop`, whose module (and torch) is imported
    on the first call."""
    from sdyn.experiments.ntk.forecast import steps_to_stop

    return steps_to_stop(runs)


def _validate(run: Run):
    """Make ``run``'s training set at seed 0 (:func:`sdyn.experiments.ntk.data.training_set`,
    NumPy only), so that a run whose data set cannot give it fails before anything is written.

    Raises:
        ValueError: ``experiment.d`` disagrees with the data set, or diabetes has fewer than n
            points or more than one output.
    """
    from sdyn.experiments.ntk.data import training_set

    return training_set(run.experiment, run.data, 0)


EXPERIMENT = Experiment(
    name="ntk",
    # Part of every run's key: bump it when a change of this experiment's code changes what
    # train returns for a config; its recorded runs are then trained again (3: the runs
    # recorded before each experiment had its own version stay valid; 4: each (n, seed) draws
    # its own data set and each run its own init).
    version=4,
    config=CONFIG,
    grids=GRIDS,
    train=_train,
    claims=CLAIMS,
    data=DATA,
    validate=_validate,
    shape_key=shape_key,
    pack_key=pack_key,
    footprint=footprint,
    gpu_footprint=GPU_FOOTPRINT,
    step_cost=step_cost,
    full_budget=_full_budget,
    steps_forecast=_steps_forecast,
    figures=FIGURES,
)
