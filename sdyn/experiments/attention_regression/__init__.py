"""Softmax self-attention trained for linear regression: Algorithm 1 against SGD and Adam.

Source: "Training Dynamics of Softmax Self-Attention: Fast Global Convergence via
Preconditioning" (attention-regression paper), §3-5 and App. A; the formulas used here are
in ``docs/theory/attention-regression.md``. The paper's formulas were lost in extraction: every
item marked [derived] below is a reconstruction (``docs/theory/attention-regression.md#derived``
gives why and its readings), kept configurable where it is a choice.
Rows are samples (PyTorch order): ``X`` is ``(N, d)`` where the paper writes ``(d, N)``.

Data: ``x ~ N(0, Sigma)`` in R^d, ``y = W* x + eps`` in R^k, ``eps ~ N(0, s^2 I_k)``.

Model [derived]: value ``V`` ``(k, d)`` and key-query product ``K`` ``(d, d)``; the prediction
for a query ``x`` given context covariates ``x_1..x_c`` is ``y_hat(x) = V sum_j softmax_j(x_j^T
K x) x_j``. The in-sample empirical loss (Eq. 1) uses the training covariates themselves as the
context: ``L_N = 1/N sum_i ||y_i - y_hat(x_i)||^2``.

Population loss (Eq. 2, a ratio of expectations; closed form [derived, exact]):
``L(V, K) = ||(V Sigma K - W*) Sigma^{1/2}||_F^2 + L_irr`` with ``L_irr = k s^2``. Its minimisers
form the manifold ``M = {(U S^{1/2} O, Sigma^-1 O^T S^{1/2} Q^T) : O orthogonal}`` for the SVD
``W* = U S Q^T`` (Thm 1), on which the regulariser below vanishes.

Algorithm 1 [derived]: spectral init from the OLS estimate ``W_hat = U S Q^T``:
``V0 = U S^{1/2}``, ``K0 = Sigma_hat^-1 S^{1/2} Q^T``; regulariser
``R = c ||V^T V - Sigma_hat K K^T Sigma_hat||_F^2``; step ``V -= eta grad_V``,
``K -= eta Sigma_hat^-p grad_K`` (p = 1) on ``L_b + R``, gradients on a minibatch of b samples
drawn without replacement (App. A). Baselines: plain minibatch SGD on ``L_b`` from a random init
(Fig. 1), Algorithm 1 from that same random init (Fig. 2), and Adam on ``L_b`` from it.

Everything is batched over a leading run dimension: one call trains many runs (seeds,
optimisers, step sizes) at once. This package knows nothing of Ray or MLflow.

Layout, one idea a file: ``config`` (the run config, data set and grids, the shape key and
footprint) and ``claims`` (claims and figures) need no torch, so reading this experiment's
schemas and claims (``--help``, ``--plan``) does not load it; ``data`` (the problem and its
samples), ``model`` (prediction, losses, regulariser, spectral init), ``kernel`` (the step's
loss and gradients: C++ on a CPU), ``diagnostics`` (manifold distance, gradient bias) and
``trainer`` (:func:`train`) are imported on first use: ``EXPERIMENT``'s ``train`` and
``validate`` import them when called, and their public names are attributes of this package
(``attention_regression.train``, ``.loss_and_gradients``, ...), each loaded on first access.
"""

from __future__ import annotations

from sdyn.api import BundleResult, Experiment, Run, lazy_names
from sdyn.experiments.attention_regression.claims import (
    ALG1,
    ALGORITHM_1,
    CLAIMS,
    FIGURES,
    NEAR_OPTIMAL,
    PAPER,
    RECONSTRUCTED,
)
from sdyn.experiments.attention_regression.config import (
    CONFIG,
    CONTEXTS,
    DATA,
    GPU_FOOTPRINT,
    GRIDS,
    OPTIMIZERS,
    AttentionConfig,
    GaussianLinearData,
    ItersGrid,
    SamplesGrid,
    footprint,
    shape_key,
)

# The public names of the modules that need torch, by module: attributes of this package,
# each module imported on the first access to one of its names (PEP 562).
_MODEL = {
    "data": (
        "STREAM_BATCH",
        "STREAM_DATA",
        "STREAM_GRAD_BIAS",
        "STREAM_INIT",
        "Problem",
        "make_data",
        "problem",
        "sample",
        "seeded_generator",
    ),
    "model": (
        "empirical_loss",
        "irreducible_loss",
        "population_gradients",
        "population_loss",
        "predict",
        "regularizer_and_gradients",
        "spectral_init",
    ),
    "kernel": ("loss_and_gradients",),
    "diagnostics": ("GRAD_BIAS_CHUNK", "PROJECTION_ITERS", "gradient_bias", "manifold_distance"),
    "trainer": ("BATCH_CHUNK", "CURVE_METRICS", "train"),
}

__all__ = [
    "ALG1",
    "ALGORITHM_1",
    "CLAIMS",
    "CONFIG",
    "CONTEXTS",
    "DATA",
    "EXPERIMENT",
    "FIGURES",
    "GPU_FOOTPRINT",
    "GRIDS",
    "NEAR_OPTIMAL",
    "OPTIMIZERS",
    "PAPER",
    "RECONSTRUCTED",
    "AttentionConfig",
    "GaussianLinearData",
    "ItersGrid",
    "SamplesGrid",
    "footprint",
    "shape_key",
    *(name for names in _MODEL.values() for name in names),
]


__getattr__, __dir__ = lazy_names(__name__, _MODEL)


def _train(runs: list[Run], device: str | None = None) -> BundleResult:
    """``EXPERIMENT.train``: :func:`~sdyn.experiments.attention_regression.trainer.train`,
    whose module (and torch) is imported on the first call."""
    from sdyn.experiments.attention_regression.trainer import train

    return train(runs, device)


def _validate(run: Run):
    """``EXPERIMENT.validate``: the run's training set for seed 0
    (:func:`~sdyn.experiments.attention_regression.data.make_data`, imported on the first
    call), which raises ValueError for a data set of another experiment or fewer samples than
    dimensions."""
    from sdyn.experiments.attention_regression.data import make_data

    return make_data(run.experiment, run.data, 0)


EXPERIMENT = Experiment(
    name="attention_regression",
    # Part of every run's key: bump it when a change of this experiment's code changes what
    # train returns for a config; its recorded runs are then trained again (3: the runs
    # recorded before each experiment had its own version stay valid).
    version=3,
    config=CONFIG,
    grids=GRIDS,
    train=_train,
    claims=CLAIMS,
    data=DATA,
    validate=_validate,
    shape_key=shape_key,
    footprint=footprint,
    gpu_footprint=GPU_FOOTPRINT,
    figures=FIGURES,
)
