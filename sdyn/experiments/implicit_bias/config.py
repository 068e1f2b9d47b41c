"""The implicit-bias experiment's configuration: the run's hyperparameters, the data sets, the
grids, and how runs share a bundle.

No torch here: ``--help`` and the claims read this module without loading the trainer
(:mod:`sdyn.experiments.implicit_bias.model`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdyn.api import Run, require, require_recording, require_sample_sizes

OPTIMIZERS = ("gd", "ngd", "polyak", "ngd_momentum", "joint", "joint_eq2")
LOSSES = ("exp", "logistic")
NORMALISERS = ("gradient", "loss")  # N_t of the NGD step eta_ngd g / N_t: ||g|| or L
# Steps at which optimisers are compared (the ordering claims of Figs. 2-3), recorded besides
# the log-spaced steps (those within the budget): the last three decades of the 10^4 steps.
# Not t = 10: in the first steps the rules' step lengths are alike by the figures' choice of
# rates (equal first steps), and no rule has left the initial transient.
CHECKPOINTS = (100, 1000, 10000)


@dataclass
class ImplicitBiasConfig:
    """Hyperparameters of one run (the ``experiment=implicit_bias`` schema).

    Step rules (``docs/theory/implicit-bias.md#derived-step-rules``; ``g`` is the gradient of
    the trained parameters, jointly normed):
    ``gd``: ``theta -= eta_gd g``; ``ngd``: ``theta -= eta_ngd g / N_t`` with the normaliser
    ``N_t = ||g||`` (``normalise=gradient``: Eq. 2/4, Thm 1) or ``N_t = L`` (``normalise=loss``:
    Eq. 13 without its time factor, the "NGD" of Fig. 3); ``ngd_momentum``: the NGD step with
    heavy-ball momentum ``momentum``; ``joint`` [derived, Eq. 13 lost]: the NGD step times
    ``(t+1)^-joint_power``, on both u and W (Thms 2-4 take ``normalise=loss``): NGD and joint
    share one normaliser and one rate and differ only by the time factor, as in Fig. 3 (§5.1:
    "the NGD updates in Eq. (13) (without the additional time-dependent factors)");
    ``joint_eq2``, the other reading of Fig. 3's joint NGD (§5.1: "the joint NGD updates (Eq.
    (2))"): the gradient-normalised NGD step ``eta_ngd g / ||g||`` on both u and W, with no
    time factor, whatever ``normalise`` says;
    ``polyak`` (Eq. 3): ``theta -= eta_polyak (L - L*) / ||g||^2 g``. ``cap_ngd`` (ngd,
    ngd_momentum, joint) and ``cap_polyak`` cap the adaptive step size ``eta_t`` (the multiplier
    of g; for joint before the time factor), as in the paper's experiments (App. C);
    null = uncapped, the theorems' rules.

    Units: steps are iterations; ``eta_ngd`` is a length in W (Frobenius norm per step) for
    ``normalise=gradient``; ``init_scale`` is ``||W_0||_F`` (random Gaussian direction, Lemma
    4's small init). ``train_decoder`` also trains u (from u_0 = 0, Condition 1) with the same
    rule; ``joint`` and ``joint_eq2`` always train it (it is set to true). ``orth_tol`` is the
    tolerance of the [derived] Assumption 1 check.
    """

    name: str = "implicit_bias"
    n: int = 8  # sequences
    optimizer: str = "ngd"  # gd | ngd | polyak | ngd_momentum | joint | joint_eq2 (see above)
    train_decoder: bool = False  # also train u, from u_0 = 0 (Condition 1); joint* force true
    loss: str = "exp"  # exp | logistic: ell(m) = exp(-m) | log(1 + exp(-m))
    steps: int = 10000  # iteration budget; a run stops early if it saturates float64 or diverges
    eta_gd: float = 10.0  # gd: theta -= eta_gd g
    eta_ngd: float = 0.03  # ngd, ngd_momentum, joint: theta -= eta_ngd g / N_t
    eta_polyak: float = 1.0  # polyak: theta -= eta_polyak (L - L*) / ||g||^2 g (Eq. 3)
    normalise: str = "gradient"  # N_t of the NGD step: gradient (||g||, Thm 1) | loss (L, Eq. 13)
    joint_power: float = 2.0 / 3.0  # joint: step times (t+1)^-joint_power [derived]; Thms 2-4: 2/3
    momentum: float = 0.9  # heavy-ball coefficient of ngd_momentum, in [0, 1)
    cap_ngd: float | None = None  # cap on eta_t of ngd, ngd_momentum, joint (App. C); null: none
    cap_polyak: float | None = None  # cap on polyak's eta_t (App. C); null: none
    init_scale: float = 0.01  # ||W_0||_F, random direction (Lemma 4's small init)
    orth_tol: float = 0.25  # Assumption 1 [derived]: max |cos| of distinct tokens
    record_points: int = 100  # log-spaced curve points, plus steps 100, 1000, 10000 in budget

    def __post_init__(self) -> None:
        require(self.n >= 1, f"experiment.n must be >= 1, got {self.n}")
        require(
            self.optimizer in OPTIMIZERS,
            f"experiment.optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}",
        )
        require(self.loss in LOSSES, f"experiment.loss must be one of {LOSSES}, got {self.loss!r}")
        require(self.steps >= 1, f"experiment.steps must be >= 1, got {self.steps}")
        for key in ("eta_gd", "eta_ngd", "eta_polyak"):
            value = getattr(self, key)
            require(value > 0, f"experiment.{key} must be > 0, got {value}")
        require(
            self.joint_power >= 0, f"experiment.joint_power must be >= 0, got {self.joint_power}"
        )
        require(
            0 <= self.momentum < 1, f"experiment.momentum must be in [0, 1), got {self.momentum}"
        )
        for key in ("cap_ngd", "cap_polyak"):
            value = getattr(self, key)
            require(
                value is None or value > 0, f"experiment.{key} must be > 0 or null, got {value}"
            )
        require(self.init_scale >= 0, f"experiment.init_scale must be >= 0, got {self.init_scale}")
        require(self.orth_tol > 0, f"experiment.orth_tol must be > 0, got {self.orth_tol}")
        require(
            self.normalise in NORMALISERS,
            f"experiment.normalise must be one of {NORMALISERS}, got {self.normalise!r}",
        )
        require_recording(self)
        if self.optimizer.startswith("joint"):
            self.train_decoder = True  # joint training is the (u, W) rule by definition


@dataclass
class Example1Data:
    """``data=example1`` [derived from Example 1]: near-orthogonal tokens, fixed decoder ``e_1``.

    ``y_i ~ Unif{-1, +1}``; the opt token (position ``opt_position``) is
    ``y_i zeta e_1 + (0, z)``, every other token ``(0, z_t)``, with ``z ~ N(0, sigma^2 I_{d-1})``.
    With ``u = e_1`` the scores are ``zeta`` (opt) and exactly 0 (others): Assumption 2 holds,
    and Assumption 1 (near orthogonality) holds w.h.p. when ``zeta^2 << sigma^2 d`` and d is large.
    """

    name: str = "example1"
    T: int = 4  # tokens per sequence
    d: int = 1024  # token dimension (large d: Assumption 1 w.h.p.)
    zeta: float = 0.3  # signal of the opt token along e_1
    sigma: float = 0.03125  # per-coordinate noise std (||z|| ~ sigma sqrt(d))
    opt_position: int = 0  # 0: the opt token is the query x_1

    def __post_init__(self) -> None:
        require(self.T >= 2, f"data.T must be >= 2, got {self.T}")
        require(self.d >= 2, f"data.d must be >= 2, got {self.d}")
        require(self.zeta > 0, f"data.zeta must be > 0, got {self.zeta}")
        require(self.sigma > 0, f"data.sigma must be > 0, got {self.sigma}")
        require(
            0 <= self.opt_position < self.T,
            f"data.opt_position must be in [0, T={self.T}), got {self.opt_position}",
        )


@dataclass
class AntipodalData(Example1Data):
    """``data=antipodal``: Example 1 with antipodal opt tokens ``y_i zeta e_1`` (no noise).

    The paper's footnote to Assumption 1 and its Fig. 5: opt tokens antipodal, the others
    nearly orthogonal. The Assumption 1 check then skips pairs of (anti)parallel opt tokens.
    """

    name: str = "antipodal"


@dataclass
class DMData:
    """``data=dm`` [derived from data model DM]: Gaussian tokens, opt token of larger norm.

    The opt token (position ``opt_position``) is ``N(0, zeta^2 I_d)``, the other ``T - 1`` tokens
    ``N(0, sigma^2 I_d)`` (``zeta > sigma``: "opt token has larger norm"), and
    ``y_i = sign(<u*, x_{i,opt}>)`` with ``u* = e_1``. A fixed decoder is the u-SVM solution
    ``u_mm``; joint training starts from ``u_0 = 0`` (Condition 1). The paper uses T = 2.
    """

    name: str = "dm"
    T: int = 2  # tokens per sequence (the paper: 2)
    d: int = 1024  # token dimension
    zeta: float = 0.0625  # per-coordinate std of the opt token (||x_opt|| ~ zeta sqrt(d))
    sigma: float = 0.03125  # per-coordinate std of the other tokens
    opt_position: int = 0  # 0: the opt token is the query x_1

    def __post_init__(self) -> None:
        require(self.T >= 2, f"data.T must be >= 2, got {self.T}")
        require(self.d >= 2, f"data.d must be >= 2, got {self.d}")
        require(self.sigma > 0, f"data.sigma must be > 0, got {self.sigma}")
        require(
            self.zeta > self.sigma,
            f"data.zeta must exceed data.sigma (the opt token has the larger norm), "
            f"got zeta={self.zeta}, sigma={self.sigma}",
        )
        require(
            0 <= self.opt_position < self.T,
            f"data.opt_position must be in [0, T={self.T}), got {self.opt_position}",
        )


DATA = {"example1": Example1Data, "antipodal": AntipodalData, "dm": DMData}


def _check_optimizers(optimizers: list[str]) -> None:
    require(len(optimizers) > 0, "grid.optimizers is empty: give at least one optimizer")
    for name in optimizers:
        require(name in OPTIMIZERS, f"grid.optimizers: unknown {name!r}; choose from {OPTIMIZERS}")


@dataclass
class IterGrid:
    """``+grid=iters``: every optimiser side by side on one data model, ``seeds`` seeds each.

    The curves (recorded at log-spaced steps up to ``experiment.steps``) are the result.
    """

    name: str = "iters"
    optimizers: list[str] = field(  # gd | ngd | polyak | ngd_momentum | joint | joint_eq2
        default_factory=lambda: ["gd", "ngd", "polyak", "ngd_momentum", "joint"]
    )
    seeds: int = 5  # seeds per optimiser: 0 .. seeds-1

    def __post_init__(self) -> None:
        _check_optimizers(self.optimizers)
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [{"optimizer": name} for name in self.optimizers]


@dataclass
class SampleGrid:
    """``+grid=samples``: the number of sequences n, per optimiser, ``seeds`` seeds each."""

    name: str = "samples"
    n: list[int] = field(default_factory=lambda: [4, 8, 16, 32, 64, 128])  # numbers of sequences n
    optimizers: list[str] = field(default_factory=lambda: ["ngd"])  # experiment.optimizer values
    seeds: int = 5  # seeds per point: 0 .. seeds-1

    def __post_init__(self) -> None:
        require_sample_sizes(self.n, minimum=1, noun="n")
        _check_optimizers(self.optimizers)
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [{"n": n, "optimizer": name} for n in self.n for name in self.optimizers]


GRIDS = {"iters": IterGrid, "samples": SampleGrid}
CONFIG = ImplicitBiasConfig


def shape_key(run: Run) -> tuple:
    """Runs with equal keys have equal tensor shapes and can share one batched step.

    The dimension d is not in it: the trainer's tensors are ``(n T, n T)`` whatever d.
    """
    cfg = run.experiment
    return (cfg.n, run.data.T, cfg.loss, cfg.steps, cfg.record_points)


# cluster.device=auto keeps every run on CPU tasks: tiny (nT, nT) steps, and cvxpy set-up that
# runs on the CPU anyway.
GPU_FOOTPRINT = None


def footprint(run: Run) -> int:
    """Bytes of the largest per-run tensor of a step (the ``(nT, nT)`` logit kernel K)."""
    return (run.experiment.n * run.data.T) ** 2 * 8
