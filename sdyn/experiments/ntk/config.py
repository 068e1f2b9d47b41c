"""The NTK experiment's schemas: the run's hyperparameters (:class:`NTKConfig`), its data
sets and its grids. No torch: ``--help`` and the sweep's planning read them alone."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from sdyn.api import SearchGrid, require, require_recording, require_sample_sizes

ACTIVATIONS = ("softmax", "relu", "exp")


@dataclass
class NTKConfig:
    """Hyperparameters of one NTK run (the ``experiment=ntk`` schema).

    Units: ``steps`` in GD iterations; ``eps`` is a relative loss ``L(t)/L(0)``; ``sigma`` is the
    init standard deviation of each weight; ``lr_scale`` is ``eta * c_m * lambda_max(H(0))``.
    """

    name: str = "ntk"
    n: int = 16  # training points
    m: int = 256  # width; even (symmetric init)
    d: int | None = None  # input dimension; None = the data set's own (sphere: 8, diabetes: 10)
    d_out: int = 1  # output dimension (Cor. 4.3: 1)
    activation: str = "softmax"  # softmax (Eq. 1) | relu (MOSW22) | exp (GMS23): the model
    sigma: float = 1.0  # init scale, w_r ~ N(0, sigma^2 I_d)
    eps: float = 1e-3  # target relative loss
    steps: int = 30000  # GD budget: covers Lemma 5.3's step count at the default grid's widest m
    lr: str = "auto"  # auto: eta = lr_scale / (c_m lambda_max(H(0))); theorem: Thm 4.2's eta
    lr_scale: float = 1.0  # eta c_m lambda_max(H(0)) (lr=auto); <= 1: Lemma 5.3's stable step
    theorem_C: float = 10.0  # Def. 4.1's constant C > 10 (only for lr=theorem)
    theorem_delta: float = 0.1  # failure probability delta in B (only for lr=theorem)
    drift_fraction: float = 0.5  # NTK regime: max_t ||H(t) - H(0)||_F <= drift_fraction * lambda
    record_points: int = 100  # log-spaced curve points (full in Parquet; 50 reach the MLflow UI)
    dtype: str = "float64"  # float32 | float64: the GD steps' precision (H(0), spectrum: float64)

    def __post_init__(self) -> None:
        require(self.n >= 2, f"experiment.n must be >= 2, got {self.n}")
        require(
            self.m > 0 and self.m % 2 == 0,
            f"experiment.m must be a positive even width (symmetric init), got {self.m}",
        )
        require(self.d is None or self.d >= 1, f"experiment.d must be >= 1, got {self.d}")
        require(self.d_out >= 1, f"experiment.d_out must be >= 1, got {self.d_out}")
        require(
            self.activation in ACTIVATIONS,
            f"experiment.activation must be one of {ACTIVATIONS}, got {self.activation!r}",
        )
        require(self.sigma > 0, f"experiment.sigma must be > 0, got {self.sigma}")
        require(0 < self.eps < 1, f"experiment.eps must be in (0, 1), got {self.eps}")
        require(self.steps >= 1, f"experiment.steps must be >= 1, got {self.steps}")
        require(
            self.lr in ("auto", "theorem"), f"experiment.lr must be auto|theorem, got {self.lr}"
        )
        require(self.lr_scale > 0, f"experiment.lr_scale must be > 0, got {self.lr_scale}")
        require(self.theorem_C > 0, f"experiment.theorem_C must be > 0, got {self.theorem_C}")
        require(
            0 < self.theorem_delta < 1,
            f"experiment.theorem_delta must be in (0, 1), got {self.theorem_delta}",
        )
        require(
            self.drift_fraction > 0,
            f"experiment.drift_fraction must be > 0, got {self.drift_fraction}",
        )
        require_recording(self)


@dataclass
class SphereData:
    """``data=sphere``: x uniform on the unit sphere of R^d, y from a fixed random teacher.

    The teacher ``y_l = tanh(u_l^T relu(G x)) / sqrt(d_out)`` is drawn once from ``teacher_seed``
    (the same target function for every seed), so ``||y|| < 1`` as the theory requires.
    """

    name: str = "sphere"
    d: int = 8  # default input dimension
    teacher_width: int = 32  # hidden width of the teacher tanh(u^T relu(G x)) (rows of G)
    teacher_seed: int = 0  # draws the teacher once: one target function for every seed

    def __post_init__(self) -> None:
        require(self.d >= 1, f"data.d must be >= 1, got {self.d}")
        require(
            self.teacher_width >= 1, f"data.teacher_width must be >= 1, got {self.teacher_width}"
        )


@dataclass
class DiabetesData:
    """``data=diabetes``: scikit-learn's bundled diabetes regression set (442 points, d = 10).

    Features are standardised and each row projected onto the unit sphere (``||x|| = 1``, the
    usual NTK convention; dividing by the largest norm instead leaves most points near the origin
    and the Gram matrix badly conditioned); the target is centred and divided by its largest
    magnitude, so ``|y| <= 1`` (``docs/theory/softmax-ntk.md#setting``). Each seed draws its
    ``n`` points without replacement.
    """

    name: str = "diabetes"
    d: int = 10  # fixed: the data set's 10 features

    def __post_init__(self) -> None:
        require(self.d == 10, f"data.d is fixed at 10 for diabetes, got {self.d}")


DATA = {"sphere": SphereData, "diabetes": DiabetesData}


@dataclass
class WidthGrid:
    """``+grid=width``: for each n, a geometric range of widths, and ``seeds`` seeds per point.

    With ``widths`` left null, each n gets ``num_widths`` even widths from ``width_min`` growing
    by ``width_ratio`` (the same list for every n, so thresholds are read on one scale); an
    explicit list replaces it.
    """

    name: str = "width"
    n: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])  # training-set sizes n
    widths: list[int] | None = None  # explicit even widths m; null: the geometric range below
    width_min: int = 2  # first width of the range (widths=null)
    width_ratio: float = 2.0  # factor between widths of the range (> 1)
    num_widths: int = 12  # widths in the range (rounded even, repeats dropped)
    seeds: int = 5  # seeds per point: 0 .. seeds-1

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        for m in self.width_list():
            require(m > 0 and m % 2 == 0, f"grid widths must be positive and even, got {m}")
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")
        require(self.width_ratio > 1, f"grid.width_ratio must be > 1, got {self.width_ratio}")
        require(self.num_widths >= 1, f"grid.num_widths must be >= 1, got {self.num_widths}")

    def width_list(self) -> list[int]:
        """The widths swept at every n (even, increasing, distinct)."""
        if self.widths is not None:
            require(len(self.widths) > 0, "grid.widths is empty: give at least one width")
            return sorted(set(self.widths))
        raw = (self.width_min * self.width_ratio**k for k in range(self.num_widths))
        return sorted({max(2, 2 * round(w / 2)) for w in raw})

    def points(self) -> list[dict]:
        """Experiment overrides of every grid point (seeds excluded)."""
        return [{"n": n, "m": m} for n in self.n for m in self.width_list()]


@dataclass
class ThresholdGrid(SearchGrid):
    """``+grid=threshold``: per n and seed, a search for the width thresholds (sdyn/search.py).

    The ladder of widths runs from ``width_min`` to ``width_max`` by ``resolution`` (rounded to
    even widths, distinct): the fixed grid that would read each threshold to the same
    resolution. The search brackets each threshold by steps of ``coarse_ratio`` from the
    ladder's geometric middle, then halves the bracket until its ends are neighbours on the
    ladder. ``claims``: the threshold claims whose success criteria are searched (None: every
    one along ``experiment.m``; ``width_threshold`` and ``width_threshold_lambda`` share theirs).
    ``anchor``: also probe width_max for every n and seed, where the threshold claims read
    lambda and check Thm 4.2's budget (as on the width grid); without it they read them at the
    widest width probed, near the threshold, and the search spares the costliest runs.
    """

    axis: ClassVar[str] = "m"
    name: str = "threshold"
    n: list[int] = field(default_factory=lambda: [8, 16, 32, 64, 128])  # training-set sizes n
    width_min: int = 2  # lowest rung of the width ladder (even)
    width_max: int = 4096  # highest rung of the ladder (even)
    resolution: float = 2.0**0.25  # factor between rungs: the precision of each threshold (> 1)
    coarse_ratio: float = 4.0  # step factor while bracketing (>= resolution)
    claims: list[str] | None = None  # threshold claims searched; null: every one along experiment.m
    anchor: bool = True  # also probe width_max: lambda and Thm 4.2's budget read there
    seeds: int = 5  # seeds per n: 0 .. seeds-1, each searched on its own

    def __post_init__(self) -> None:
        require_sample_sizes(self.n)
        for key in ("width_min", "width_max"):
            value = getattr(self, key)
            require(
                value > 0 and value % 2 == 0, f"grid.{key} must be positive and even, got {value}"
            )
        require(
            self.width_max > self.width_min,
            f"grid.width_max must exceed grid.width_min, got {self.width_max} <= {self.width_min}",
        )
        require(self.resolution > 1, f"grid.resolution must be > 1, got {self.resolution}")
        require(
            self.coarse_ratio >= self.resolution,
            f"grid.coarse_ratio must be >= grid.resolution, got {self.coarse_ratio}",
        )
        require(self.seeds >= 1, f"grid.seeds must be >= 1, got {self.seeds}")

    def width_list(self) -> list[int]:
        """The ladder: even widths from width_min to width_max, ``resolution`` apart or more."""
        count = math.floor(math.log(self.width_max / self.width_min, self.resolution) + 1e-9)
        raw = [self.width_min * self.resolution**k for k in range(count + 1)]
        return sorted({max(2, 2 * round(w / 2)) for w in raw} | {self.width_max})

    def points(self) -> list[dict]:
        """Every rung of every n's ladder (the search probes some of them)."""
        return [{"n": n, "m": m} for n in self.n for m in self.width_list()]


GRIDS = {"width": WidthGrid, "threshold": ThresholdGrid}
CONFIG = NTKConfig
