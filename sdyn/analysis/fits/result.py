"""The result type every fit returns, and the input checks the fits share."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# sdyn's fits; a plugin's claim kind may name its own (any non-empty string).
KINDS = ("power_law", "geometric_rate", "threshold", "threshold_power_law", "ratio", "exceedance")
# sdyn's interval methods (``Fit.ci_method``), each with what a table's caption calls it.
CI_METHODS = {
    "ols": "Student t",
    "profile": "profile likelihood",
    "clopper-pearson": "Clopper-Pearson",
    "none": "none",
}


@dataclass(frozen=True)
class Fit:
    """Result of one fit.

    Attributes:
        kind: the fit's family: one of :data:`KINDS` for sdyn's fits, or a plugin kind's own.
        value: the exponent (``power_law``, ``threshold_power_law``), the contraction factor per
            unit of ``t`` in ``(0, inf)`` (``geometric_rate``; ``< 1`` for decay), the typical
            threshold on the ``x`` axis (``threshold``), the geometric-mean ratio (``ratio``), or
            the fraction of runs above a bound (``exceedance``). NaN when no fit could be made.
        ci_low, ci_high: bounds of the ``confidence`` interval of ``value`` (either may be
            infinite when the data bound it on one side only); NaN if none could be computed.
        prefactor: ``c`` in ``y ~ c * x**exponent`` or ``y ~ c * rate**t`` (for
            ``threshold_power_law``, in ``x* ~ c * axis**exponent``); NaN for the others.
        r2: coefficient of determination on the fitted scale (log-log for the power law,
            log-linear for the geometric rate); NaN for the others.
        residual_std: residual standard error on the fitted scale; for thresholds the fitted
            sigma of the log threshold; for ratios the standard deviation (ddof 1) of the log
            ratios; NaN for ``exceedance``.
        n_points: rows (observations, pairs, runs) the fit used.
        n_groups: distinct groups (seeds, runs) among them.
        n_excluded: rows dropped as NaN/inf/non-positive (or at/below a floor).
        converged: the point fit's solver succeeded and ``value`` is finite.
        ci_method: how the interval was made: one of :data:`CI_METHODS` for sdyn's fits (see
            :mod:`sdyn.analysis.fits`), or a plugin's own description.
        window: ``(t_start, t_end)`` of the fitted window for the geometric rate, else ``None``.
        message: human-readable notes on exclusions, censoring, fallbacks, failures ("" if none).
        n_levels: distinct ``x`` (or axis) values with at least 2 replicates each; the
            evidence rule of :mod:`sdyn.analysis.verdict` counts them.
        resolution: the finest difference in ``value`` the design can resolve, where one is
            defined (thresholds read on a grid), else NaN; an interval far narrower is
            degenerate.
        details: kind-specific, JSON-ready extras (censoring counts, per-axis estimates, ...).

    Raises:
        ValueError: an empty ``kind`` or ``ci_method``.
    """

    kind: str
    value: float
    ci_low: float
    ci_high: float
    prefactor: float
    r2: float
    residual_std: float
    n_points: int
    n_groups: int
    n_excluded: int
    converged: bool
    ci_method: str
    window: tuple[float, float] | None
    message: str
    n_levels: int = 0
    resolution: float = math.nan
    details: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (self.kind and self.ci_method):
            raise ValueError(
                f"a fit needs a kind and a ci_method, got {self.kind!r}, {self.ci_method!r}"
            )
        # Store plain Python scalars so that as_dict() is JSON-serialisable as is.
        for name in ("value", "ci_low", "ci_high", "prefactor", "r2", "residual_std", "resolution"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("n_points", "n_groups", "n_excluded", "n_levels"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "converged", bool(self.converged))
        if self.window is not None:
            object.__setattr__(self, "window", (float(self.window[0]), float(self.window[1])))

    @property
    def exponent(self) -> float:
        """The power-law exponent (``value``); only meaningful for the power-law kinds."""
        return self.value

    @property
    def rate(self) -> float:
        """The contraction per step (``value``); only meaningful for ``"geometric_rate"``."""
        return self.value

    def as_dict(self) -> dict:
        """Return the fields as a dict of floats, ints, bools, strings, lists and dicts.

        ``window`` becomes a two-element list (or ``None``). NaN stays a float NaN, which
        ``json.dumps`` writes as ``NaN`` by default.
        """
        out = dataclasses.asdict(self)
        out["window"] = None if self.window is None else list(self.window)
        return out


def nan_fit(kind: str, n_points: int, n_groups: int, n_excluded: int, message: str, **kw) -> Fit:
    """A fit that could not be made (too little data): NaN value and interval, ``message`` why."""
    return Fit(
        kind=kind,
        value=math.nan,
        ci_low=math.nan,
        ci_high=math.nan,
        prefactor=math.nan,
        r2=math.nan,
        residual_std=math.nan,
        n_points=n_points,
        n_groups=n_groups,
        n_excluded=n_excluded,
        converged=False,
        ci_method="none",
        window=None,
        message=message,
        **kw,
    )


def columns(
    arrays: Sequence, groups, names: Sequence[str]
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Convert to 1-D float arrays (and a 1-D group array) of one common length.

    Raises:
        ValueError: an input is not 1-D, or the lengths differ.
    """
    cols = [np.asarray(a, dtype=float) for a in arrays]
    for name, column in zip(names, cols, strict=True):
        if column.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {column.shape}")
    if groups is not None:
        groups = np.asarray(groups)
        if groups.ndim != 1:
            raise ValueError(f"groups must be 1-D, got shape {groups.shape}")
    lengths = {name: c.size for name, c in zip(names, cols, strict=True)}
    if groups is not None:
        lengths["groups"] = groups.size
    if len(set(lengths.values())) > 1:
        raise ValueError(f"inputs must have equal lengths, got {lengths}")
    return cols, groups


def check_options(confidence: float, minimum: int, *, name: str, min_allowed: int) -> None:
    """Validate the shared options.

    Raises:
        ValueError: ``confidence`` outside (0, 1), or ``minimum`` (called ``name``) below
            ``min_allowed``.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if int(minimum) != minimum or minimum < min_allowed:
        raise ValueError(f"{name} must be an integer >= {min_allowed}, got {minimum}")


def levels(x: np.ndarray, replicates: int = 2) -> int:
    """Distinct values of ``x`` that occur at least ``replicates`` times (the evidence count)."""
    _, counts = np.unique(x, return_counts=True)
    return int(np.count_nonzero(counts >= replicates))
