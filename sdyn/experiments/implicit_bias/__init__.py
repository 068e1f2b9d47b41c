"""Implicit bias of a self-attention layer: GD, normalised GD, Polyak, momentum, joint training.

Source: "Implicit Bias and Fast Convergence Rates for Self-attention" (Vasudeva, Deora,
Thrampoulidis, arXiv 2402.05738), §2-5 and App. A-C; the formulas, and why each [derived]
one was reconstructed, are in ``docs/theory/implicit-bias.md``. The paper's formulas were lost
in extraction: everything marked [derived] below is a reconstruction and is configurable. Rows
are tokens (PyTorch order): one sequence ``X_i`` is ``(T, d)``, its first token ``x_i1`` is the
query.

Model [derived] and loss::

    Phi(X) = u^T X^T softmax(X W x_1)             u: decoder (d,), W: key-query (d, d)
    L(W, u) = 1/n sum_i ell(y_i Phi(X_i))         ell(m) = exp(-m), or log(1 + exp(-m))

Token scores ``gamma_it = y_i u^T x_it``; ``opt_i`` is the token the data set makes optimal
(the argmax of the scores for a fixed decoder). The max-margin references (solved with cvxpy):

    W-SVM: W_mm = argmin ||W||_F  s.t.  (x_{i,opt_i} - x_it)^T W x_i1 >= 1  for all i, t != opt_i
    u-SVM: u_mm = argmin ||u||    s.t.  y_i u^T x_{i,opt_i} >= 1            for all i

The trainer works in token coordinates. Every gradient of L w.r.t. W is a combination of the
rank-one matrices ``x_it x_i1^T`` and every gradient w.r.t. u one of the tokens, so
``W_t = W_0 + sum_it C_it x_it x_i1^T`` and ``u_t = u_0 + sum_it U_it x_it`` exactly; logits,
norms and alignments follow from the token Gram matrix. A step costs ``O((nT)^2)`` whatever d,
so d can be as large as Assumption 1 needs. Float64 throughout. This package knows nothing of
Ray or MLflow.

One idea a file: ``config`` (the hyperparameters, data sets, grids and bundle keys), ``claims``
(the claims and figures), ``svm`` (the max-margin references, cvxpy) and ``model`` (the model,
the data and the trainer, torch). Importing the package loads ``config`` and ``claims`` only, so
``--help`` and the claims need neither torch nor cvxpy; the names of ``model`` and ``svm``
(``train``, ``loss_terms``, ``solve_w_svm``, ...) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sdyn.api import BundleResult, Experiment, Run, lazy_names
from sdyn.experiments.implicit_bias.claims import (
    ASSUMPTION_1,
    BY_GRADIENT,
    CLAIMS,
    DATA_MODEL_DM,
    EQ_13,
    FIGURE_SETTINGS,
    FIGURES,
    NGD,
    NGD_OR_POLYAK,
    PAPER,
    UNCAPPED,
)
from sdyn.experiments.implicit_bias.config import (
    CHECKPOINTS,
    CONFIG,
    DATA,
    GPU_FOOTPRINT,
    GRIDS,
    LOSSES,
    NORMALISERS,
    OPTIMIZERS,
    AntipodalData,
    DMData,
    Example1Data,
    ImplicitBiasConfig,
    IterGrid,
    SampleGrid,
    footprint,
    shape_key,
)

if TYPE_CHECKING:
    from sdyn.experiments.implicit_bias.model import Dataset

# The public names of the modules that import torch or cvxpy, loaded on first access.
_MODEL = {
    "model": (
        "CURVE_METRICS",
        "SATURATION_FLOOR",
        "Dataset",
        "LossTerms",
        "check_assumptions",
        "forward",
        "logits",
        "loss_and_gradients",
        "loss_terms",
        "make_data",
        "train",
    ),
    "svm": ("SVM_TOL", "SVMSolution", "solve_u_svm", "solve_w_svm"),
}

__all__ = [
    "ASSUMPTION_1",
    "BY_GRADIENT",
    "CHECKPOINTS",
    "CLAIMS",
    "CONFIG",
    "DATA",
    "DATA_MODEL_DM",
    "EQ_13",
    "EXPERIMENT",
    "FIGURES",
    "FIGURE_SETTINGS",
    "GPU_FOOTPRINT",
    "GRIDS",
    "LOSSES",
    "NGD",
    "NGD_OR_POLYAK",
    "NORMALISERS",
    "OPTIMIZERS",
    "PAPER",
    "UNCAPPED",
    "AntipodalData",
    "DMData",
    "Example1Data",
    "ImplicitBiasConfig",
    "IterGrid",
    "SampleGrid",
    "footprint",
    "shape_key",
    *(name for names in _MODEL.values() for name in names),
]


__getattr__, __dir__ = lazy_names(__name__, _MODEL)


def _train(runs: list[Run], device: str | None = None) -> BundleResult:
    """``EXPERIMENT.train``: :func:`sdyn.experiments.implicit_bias.model.train`, whose module
    (torch, cvxpy) is imported on the first call."""
    from sdyn.experiments.implicit_bias.model import train

    return train(runs, device)


def _validate(run: Run) -> Dataset:
    """``EXPERIMENT.validate``: the run's data set for seed 0
    (:func:`sdyn.experiments.implicit_bias.model.make_data`), which raises ``ValueError`` for a
    data set the experiment does not know; imports the model module on the first call."""
    from sdyn.experiments.implicit_bias.model import make_data

    return make_data(run.experiment, run.data, 0)


EXPERIMENT = Experiment(
    name="implicit_bias",
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
