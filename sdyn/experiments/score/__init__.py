"""Score estimation for a diffusion model with the two-layer softmax network (``experiment=score``).

Source: "Exploring the Frontiers of Softmax" (softmax-NTK paper, arXiv 2405.03251) §6 and
App. F-G; ``docs/theory/softmax-ntk.md#diffusion``. The network, its gradient and GD are the
NTK experiment's (:mod:`sdyn.experiments.ntk`), the mixture, its exact scores, the reference
predictors and the sampler are :mod:`~.diffusion`'s: imported, not copied. This package is the
trainer: data, the NTK regression it is compared with, the preconditions of Thm 6.5, claims.

Setting (rows are samples, PyTorch order):

* Training set (§6.1): ``x0_i ~ p0``, ``t_i`` on ``[T0, T]``, ``xt_i ~ p_{t|0}(.|x0_i)``; input
  ``(t_i, xt_i)``, label ``x0_i`` (a noisy label of ``E[x0 | xt]``). ``time_sampling=weighted``
  (the default) draws ``t_i`` so that the paper's unweighted loss is Eq. (6) with the
  configured ``lambda(t)``; ``uniform`` is §6.1's ``U(T0, T)``, which makes it Eq. (6) with
  ``weighting=regression`` whatever ``weighting`` says (see :mod:`~.diffusion`).
  [derived] The input is embedded on the unit sphere of R^{d+2} as ``u = z / ||z||`` with
  ``z = (t/T, x/input_scale, input_bias)``: injective (``z = u / u_last * input_bias``), smooth,
  ``||u|| = 1`` (Assumption 6.1), and the constant coordinate keeps the NTK non-degenerate.
* The network ``F`` (d outputs) is trained by the NTK experiment's GD for ``steps`` iterations
  (the early-stopping time T^ of Thm 6.5) with ``eta = lr_scale / (m lambda_max(H*))``.
* Score error (Eq. 5 on ``[T0, T]``): ``1/(T-T0) int lambda(t) E||s_W - grad log p_t||^2 dt`` by
  Monte Carlo on held-out draws (t stratified), beside the same estimate for the references:
  the exact score (0 by construction), the single Gaussian with p0's mean and covariance, and
  the zero network (the symmetric initialisation's output).
* NTK (Def. 3.6) through its Jacobian features: ``H* = J J^T`` with ``J`` the ``(n d,
  (d+2) m)`` Jacobian of vec(F) over ``sqrt(m)``, so ``rank(H*) <= (d+2) m`` (at the symmetric
  init, whose neuron pairs give opposite columns, ``<= (d+2) m / 2``): for larger ``n d``,
  ``lambda_min(H*) = 0`` exactly. The spectrum comes from the smaller of ``J J^T`` and
  ``J^T J``. NTK regression (Def. F.1, Eq. 25) trained by GD with the same step size and
  steps: ``F_ntk(t) = K* U diag(filter_t) U^T vec(Y)`` (its limit ``K* (H*)^+ vec(Y)``), and the
  coupling gap ``||F_nn - F_ntk||`` on held-out points (Thm F.2).
* Preconditions of Thm 6.5, per run: ``lambda_min(H*)`` against its numerical resolution
  ``n d eps ||H*||_2`` (Assumption 6.2) and ``max_t ||H(t) - H*||_F / lambda`` against the
  1/2 of Thm F.2, the drift read at every record step.
* Sampling: the reverse SDE (Eq. 4) from ``N(0, I)`` at ``T`` down to ``T0``, with the learned
  score and, from the same noise, the exact score, the single Gaussian's and the zero
  network's; MMD to fresh p0 draws and the geometric-mean p0 density of the samples.

This package knows nothing of Ray or MLflow. One idea a module: :mod:`~.config` (the run's
hyperparameters, the mixture, the grids), :mod:`~.bundling` (which runs share a bundle, and
where it trains), :mod:`~.claims` (Thm 6.5's claims, the report's figures); and the model, which
needs torch: :mod:`~.diffusion` (the mixture's mathematics), :mod:`~.data` (training sets and
held-out draws), :mod:`~.ntk_regression` (the NTK through its Jacobian features, NTK
regression), :mod:`~.sampling` (the reverse-SDE samples) and :mod:`~.trainer` (:func:`train`).
Importing the package, or reading its ``EXPERIMENT``'s config, grids, data and claims, imports
no torch: the model's names (``score.train``, ``from sdyn.experiments.score import embed``)
are imported on first use.
"""

from __future__ import annotations

from sdyn.api import BundleResult, Experiment, Run, lazy_names
from sdyn.experiments.score.bundling import GPU_FOOTPRINT, footprint, shape_key
from sdyn.experiments.score.claims import (
    CLAIMS,
    FIGURES,
    KERNEL_STABLE,
    LAMBDA_POSITIVE,
    PAPER,
    PRECONDITIONS,
    RESOLVED,
    SAMPLE_GRIDS,
    SCATTER_PLOT,
    SCORE_REFERENCES,
    THEOREM_6_5,
    VACUOUS,
)
from sdyn.experiments.score.config import (
    CONFIG,
    DATA,
    GRIDS,
    SCHEDULES,
    TIME_SAMPLINGS,
    WEIGHTINGS,
    GMMData,
    SamplesGrid,
    ScoreConfig,
    TiedGrid,
    WidthGrid,
)

# The model's public names (torch), by the module that defines them: imported on first use.
_MODEL = {
    "data": (
        "STREAM_DATA",
        "STREAM_HELD_OUT",
        "STREAM_SAMPLER",
        "STREAM_INIT",
        "embed",
        "make_data",
    ),
    "ntk_regression": ("ntk_features", "small_gram", "ntk_spectrum", "kernel_drift", "gd_filter"),
    "trainer": ("CURVE_METRICS", "train"),
}

__all__ = [
    "CLAIMS",
    "CONFIG",
    "DATA",
    "EXPERIMENT",
    "FIGURES",
    "GPU_FOOTPRINT",
    "GRIDS",
    "KERNEL_STABLE",
    "LAMBDA_POSITIVE",
    "PAPER",
    "PRECONDITIONS",
    "RESOLVED",
    "SAMPLE_GRIDS",
    "SCATTER_PLOT",
    "SCHEDULES",
    "SCORE_REFERENCES",
    "THEOREM_6_5",
    "TIME_SAMPLINGS",
    "VACUOUS",
    "WEIGHTINGS",
    "GMMData",
    "SamplesGrid",
    "ScoreConfig",
    "TiedGrid",
    "WidthGrid",
    "footprint",
    "shape_key",
    *(name for names in _MODEL.values() for name in names),
]


__getattr__, __dir__ = lazy_names(__name__, _MODEL)


def _train(runs: list[Run], device: str | None = None) -> BundleResult:
    """Train a bundle of runs: :func:`sdyn.experiments.score.trainer.train`, whose module (and
    torch) is imported on the first call."""
    from sdyn.experiments.score.trainer import train

    return train(runs, device)


def _validate(run: Run):
    """Make ``run``'s training set at seed 0 (:func:`sdyn.experiments.score.data.make_data`),
    so that a run on data other than a Gaussian mixture fails before anything is written.

    Raises:
        ValueError: data that is not a Gaussian mixture.
    """
    from sdyn.experiments.score.data import make_data

    return make_data(run.experiment, run.data, 0)


EXPERIMENT = Experiment(
    name="score",
    # Part of every run's key: bump it when a change of this experiment's code changes what
    # train returns for a config; its recorded runs are then trained again (3: the runs
    # recorded before each experiment had its own version stay valid; 4: each (n, seed) draws
    # its own data, held-out points and sampler noise, and each run its own init).
    version=4,
    config=CONFIG,
    grids=GRIDS,
    train=_train,
    claims=CLAIMS,
    data=DATA,
    validate=_validate,
    shape_key=shape_key,
    scatter_plot=SCATTER_PLOT,
    footprint=footprint,
    gpu_footprint=GPU_FOOTPRINT,
    figures=FIGURES,
)
