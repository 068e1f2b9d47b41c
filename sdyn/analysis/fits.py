"""Scaling-law fits with bootstrap confidence intervals.

Four kinds of fit share one result type, :class:`Fit`:

* :func:`fit_power_law`: ``y ~ prefactor * x**exponent`` across a sweep of ``x`` values, with
  several seeds per ``x``;
* :func:`fit_geometric_rate`: ``y_t ~ prefactor * rate**t`` on an automatically chosen window of
  one or more training curves;
* :func:`fit_threshold`: the ``x`` from which each seed's ``value(x)`` stays at or below a
  level (per-seed crossings from :func:`threshold_crossings`);
* :func:`fit_ratio`: the typical ratio ``y / reference`` of paired measurements (e.g. two
  optimisers on the same seed), as a geometric mean.

Too little data never raises: the fit comes back with ``value`` NaN, ``converged=False`` and a
message, which :func:`sdyn.analysis.verdict.verdict` reports as "inconclusive". Malformed input
(mismatched lengths, bad options) raises ``ValueError``.

``Fit.ci_method`` records where the interval came from:

* ``"BCa"``: ``scipy.stats.bootstrap`` with the bias-corrected and accelerated method;
* ``"percentile"``: the same bootstrap distribution read with the percentile method, used when
  BCa is degenerate (NaN/inf bounds, or scipy's ``DegenerateDataWarning``);
* ``"ols"``: the Wald interval statsmodels reports for the fitted parameter (Student t for OLS,
  normal for RLM), used when there is nothing to resample (one replicate per stratum, one group)
  or the bootstrap distribution is degenerate too;
* ``"none"``: no interval could be computed; the bounds are NaN.

Small-sample corrections: bootstrap intervals are too narrow when built from few replicates
(3-10 seeds), for two reasons, each corrected as in Hesterberg's "expanded percentile"
interval (Hesterberg, *What teachers should know about the bootstrap*, Am. Stat. 2015):

* the bootstrap variance of a mean of ``n`` replicates is ``(n - 1) / n`` times the unbiased
  one: replicates are resampled after spreading them about their mean by ``sqrt(n / (n - 1))``
  (per ``x`` in :func:`fit_power_law`, the log thresholds in :func:`fit_threshold`, the log
  ratios in :func:`fit_ratio`; means, and
  so the point estimates, are unchanged), and in :func:`fit_geometric_rate`, whose pooled
  slope is not a mean, resampled slopes are spread about the point estimate by the same
  factor;
* the bootstrap ignores that the spread itself is estimated (Student t versus normal): the
  interval is read at the level whose normal quantile is the Student t quantile of
  ``confidence`` with the replicates' degrees of freedom (e.g. 95% -> 96.1% for 24 degrees
  of freedom, 97.6% for 9).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import statsmodels.api as sm
from scipy import stats

__all__ = [
    "Fit",
    "fit_geometric_rate",
    "fit_geometric_rate_per_group",
    "fit_power_law",
    "fit_ratio",
    "fit_threshold",
    "threshold_crossings",
]

_KINDS = ("power_law", "geometric_rate", "threshold", "ratio")
_CI_METHODS = ("BCa", "percentile", "ols", "none")
_ROBUST_DEFAULT_RESAMPLES = 500
_DEFAULT_RESAMPLES = 2000
_RLM_MAXITER = 50
# Standard errors by which a window's ends may depart from its line (_WindowSums.looks_linear).
_ENDS_Z = 1.96


@dataclass(frozen=True)
class Fit:
    """Result of one scaling-law fit.

    Attributes:
        kind: ``"power_law"``, ``"geometric_rate"``, ``"threshold"`` or ``"ratio"``.
        value: the exponent (power law), the contraction factor per unit of ``t`` in
            ``(0, inf)`` (geometric rate; ``< 1`` for decay), the threshold on the ``x`` axis
            (threshold), or the geometric-mean ratio (ratio). NaN when the fit could not be
            made.
        ci_low, ci_high: bounds of the ``confidence`` interval of ``value``; NaN if none could be
            computed.
        prefactor: ``c`` in ``y ~ c * x**exponent`` or ``y ~ c * rate**t``; NaN for threshold
            and ratio.
        r2: coefficient of determination on the fitted scale (log-log for the power law,
            log-linear for the geometric rate); NaN for threshold and ratio.
        residual_std: residual standard error ``sqrt(SSR / (n - 2))`` on the fitted scale; for
            threshold and ratio, the standard deviation (ddof 1) of the log per-group values.
        n_points: rows used by the point fit (after exclusions and window selection); for
            threshold, the number of uncensored per-group thresholds.
        n_groups: distinct groups (seeds) among the rows used.
        n_excluded: rows dropped as NaN/inf/non-positive (or at/below ``floor``); for threshold,
            the number of censored groups.
        converged: the point fit's solver succeeded and ``value`` is finite.
        ci_method: ``"BCa"``, ``"percentile"``, ``"ols"`` or ``"none"`` (see the module doc).
        window: ``(t_start, t_end)`` of the fitted window for the geometric rate, else ``None``.
        message: human-readable notes on exclusions, fallbacks and failures ("" if none).

    Raises:
        ValueError: on an unknown ``kind`` or ``ci_method``.
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

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"kind must be one of {_KINDS}, got {self.kind!r}")
        if self.ci_method not in _CI_METHODS:
            raise ValueError(f"ci_method must be one of {_CI_METHODS}, got {self.ci_method!r}")
        # Store plain Python scalars so that as_dict() is JSON-serialisable as is.
        for name in ("value", "ci_low", "ci_high", "prefactor", "r2", "residual_std"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("n_points", "n_groups", "n_excluded"):
            object.__setattr__(self, name, int(getattr(self, name)))
        object.__setattr__(self, "converged", bool(self.converged))
        if self.window is not None:
            object.__setattr__(self, "window", (float(self.window[0]), float(self.window[1])))

    @property
    def exponent(self) -> float:
        """The power-law exponent (``value``); only meaningful when ``kind == "power_law"``."""
        return self.value

    @property
    def rate(self) -> float:
        """The contraction per step (``value``); only meaningful for ``"geometric_rate"``."""
        return self.value

    def as_dict(self) -> dict:
        """Return the fields as a dict of floats, ints, bools, strings and lists.

        ``window`` becomes a two-element list (or ``None``). NaN stays a float NaN, which
        ``json.dumps`` writes as ``NaN`` by default.
        """
        out = dataclasses.asdict(self)
        out["window"] = None if self.window is None else list(self.window)
        return out


def fit_power_law(
    x,
    y,
    groups=None,
    *,
    robust: bool = False,
    confidence: float = 0.95,
    n_resamples: int | None = None,
    seed: int = 0,
    min_points: int = 3,
) -> Fit:
    """Fit ``y = prefactor * x**exponent`` by linear regression of ``log y`` on ``log x``.

    The point fit is statsmodels OLS, or RLM with Huber's T norm when ``robust``; ``r2`` is
    statsmodels' R^2 for OLS and ``1 - SSR / SST`` of the RLM residuals (all points, unweighted)
    for RLM.

    The confidence interval comes from a bootstrap stratified by ``x``: each distinct ``x`` is
    one sample whose replicates (seeds) are resampled with replacement, so every ``x`` keeps its
    number of replicates, and each resample refits the slope on the union. Rows sharing both
    ``x`` and a group label are averaged (on the log scale) into one replicate for the
    bootstrap. An ``x`` with a single replicate cannot vary under resampling and is held fixed.
    BCa first, then percentile, then the statsmodels interval (see the module doc for
    ``ci_method`` and the small-sample corrections). The bootstrap only sees noise between
    replicates at the same ``x``, not systematic departures from a power law; check ``r2``.

    Args:
        x: 1-D array-like, shape (n,), the swept quantity (e.g. width, tokens), any positive unit.
        y: 1-D array-like, shape (n,), the measured quantity at each ``x``.
        groups: optional 1-D array-like, shape (n,), seed/run label of each row. Only counted
            (``n_groups``) and used to pool duplicate ``(x, group)`` rows. ``None``: every row is
            its own replicate and ``n_groups`` is the largest number of rows sharing one ``x``.
        robust: use RLM (HuberT) instead of OLS, for the point fit and inside the bootstrap.
        confidence: interval level in (0, 1).
        n_resamples: bootstrap resamples; ``None`` means 2000 for OLS and 500 for
            ``robust=True`` (each robust resample runs a full RLM fit).
        seed: seed of the bootstrap's random generator.
        min_points: fewest usable rows for a fit (>= 2).

    Returns:
        A :class:`Fit` of kind ``"power_law"``. Rows with non-finite or non-positive ``x`` or
        ``y`` are dropped and counted in ``n_excluded``. With fewer than ``min_points`` usable
        rows or fewer than 2 distinct ``x``, ``value`` and the interval are NaN,
        ``converged`` is False and ``message`` says why.

    Raises:
        ValueError: if the inputs are not 1-D of equal length, or an option is out of range.
    """
    (x, y), groups = _columns((x, y), groups, ("x", "y"))
    n_resamples = _check_options(
        confidence,
        n_resamples,
        min_points,
        name="min_points",
        min_allowed=2,
        default_resamples=_ROBUST_DEFAULT_RESAMPLES if robust else _DEFAULT_RESAMPLES,
    )
    usable = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    n_excluded = int(np.count_nonzero(~usable))
    notes = [f"{n_excluded} points excluded (non-finite or non-positive)"] if n_excluded else []
    log_x, log_y = np.log(x[usable]), np.log(y[usable])
    codes = None if groups is None else pd.factorize(groups[usable], use_na_sentinel=False)[0]
    n = log_x.size
    distinct_x, stratum = np.unique(log_x, return_inverse=True)
    if codes is not None:
        n_groups = np.unique(codes).size
    else:
        n_groups = int(np.bincount(stratum).max()) if n else 0

    def failed(reason: str) -> Fit:
        return _nan_fit("power_law", n, n_groups, n_excluded, "; ".join([*notes, reason]))

    if n < min_points:
        return failed(f"only {n} usable points (need {min_points})")
    if distinct_x.size < 2:
        return failed("fewer than 2 distinct x values")

    design = np.column_stack([np.ones(n), log_x])
    if robust:
        result = _rlm(log_y, design)
        converged = _rlm_converged(result)
        centred = log_y - log_y.mean()
        r2 = 1.0 - float(result.resid @ result.resid) / float(centred @ centred)
    else:
        result = sm.OLS(log_y, design).fit()
        converged = True
        r2 = result.rsquared
    intercept, slope = result.params
    converged = converged and bool(np.isfinite(slope))
    residual_std = math.sqrt(float(result.resid @ result.resid) / (n - 2)) if n > 2 else math.nan

    replicates = _stratum_replicates(log_y, stratum, codes, distinct_x.size)
    resampled = [k for k, r in enumerate(replicates) if r.size >= 2]
    held = [k for k, r in enumerate(replicates) if r.size == 1]
    ci = None
    if resampled:
        data = [_adjusted(replicates[k]) for k in resampled]
        fixed_x = distinct_x[held]
        fixed_y = np.array([replicates[k][0] for k in held])
        if robust:
            statistic = _robust_slope(distinct_x[resampled], fixed_x, fixed_y)
        else:
            statistic = _stratified_slope(distinct_x[resampled], fixed_x, fixed_y)
        df = sum(r.size - 1 for r in data)
        ci = _bootstrap_ci(data, statistic, not robust, confidence, n_resamples, seed, df, notes)
    else:
        notes.append("every x has a single replicate, nothing to resample")
    if ci is None:
        ci = _wald_ci(result, 1, confidence, notes)
    ci_low, ci_high, ci_method = ci
    return Fit(
        kind="power_law",
        value=slope,
        ci_low=ci_low,
        ci_high=ci_high,
        prefactor=math.exp(intercept),
        r2=r2,
        residual_std=residual_std,
        n_points=n,
        n_groups=n_groups,
        n_excluded=n_excluded,
        converged=converged,
        ci_method=ci_method,
        window=None,
        message="; ".join(notes),
    )


def fit_geometric_rate(
    t,
    y,
    groups=None,
    *,
    floor: float | None = None,
    min_points: int = 4,
    r2_min: float = 0.98,
    confidence: float = 0.95,
    n_resamples: int = _DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Fit:
    """Fit ``y_t = prefactor * rate**t`` on the longest log-linear window of the curve(s).

    Window choice: candidates are the contiguous ranges ``[t_i, t_j]`` of the sorted distinct
    ``t`` values that hold at least ``min_points`` rows (all groups pooled) and on which
    ``log y`` is not constant. A window is accepted when

    (a) the pooled OLS fit of ``log y`` on ``t`` has R^2 >= ``r2_min``, where the residual
        variance counts as no less than the noise level estimated below (so that a short window
        whose few points happen to line up does not pass by luck), and
    (b) it shows no bend at its ends: the mean ``log y`` at its first and at its last ``t`` lies
        on its line, and the slopes of its first and last thirds agree with the slope of its
        middle, each within 1.96 standard errors. The errors use the noise level of ``log y``
        estimated from the curves themselves (each point against the line through its two
        neighbours, robust to the few points at sharp bends). (b) is skipped for windows too
        short to split (< 3, resp. < 6 distinct ``t``) or when no curve has 3 distinct ``t``.

    The longest accepted window (largest ``t_j - t_i``) is chosen, the later one on ties (it
    skips the initial transient). If none is accepted, the longest window passing (b) is used,
    else the one with the best R^2, and ``message`` says so.

    Why (b): R^2 grows with the window's span, so the longest window with R^2 >= 0.98 reaches
    deep into transients and plateaus; on curves with a flat start and a hard floor, R^2 alone
    biased the rate by ~100 standard errors. Limits: a *gradual* bend that stays within noise
    over many steps (a slowly dying fast mode, an additive floor ``y = c * rate**t + F``) is not
    detected and biases the rate toward the bend by up to about one standard error for fast
    modes, many for an additive floor: subtract a known additive floor from ``y`` first. The
    pooled R^2 also counts seed-to-seed spread of the prefactor as misfit; (b) does not (it
    works on per-``t`` means and within-curve noise), which is why the fallback prefers it.
    The search costs O(m^2) vectorised work for m distinct ``t`` (about 1.5 s for
    m = 5000 on one CPU core).

    The point fit is statsmodels OLS of ``log y`` on ``t`` in the window: ``rate = exp(slope)``,
    ``prefactor = exp(intercept)`` (the value extrapolated to ``t = 0``). With two or more groups
    in the window, the interval comes from a bootstrap over groups (whole curves are resampled;
    the statistic is the pooled slope in the chosen window; BCa, then percentile, then the OLS
    interval); with one group it is the OLS t-interval of the slope (``ci_method "ols"``). The
    window is held fixed in the bootstrap, so its selection uncertainty is not included (on
    synthetic curves it cost no coverage). With the small-sample corrections of the module doc,
    the 95% interval covered the true rate in 93% of trials with 10 groups and 90% with 5.
    Bounds are on the rate scale (exp of the slope bounds).

    Args:
        t: 1-D array-like, shape (n,), step/time of each row (any unit; the rate is per unit).
        y: 1-D array-like, shape (n,), a positive decaying quantity (loss gap, distance, ...).
        groups: optional 1-D array-like, shape (n,), run/seed label of each row; each group's
            curve is one replicate. ``None``: all rows are one curve.
        floor: rows with ``y <= floor`` (a plateau or precision floor) are excluded; ``None``:
            no floor.
        min_points: fewest rows in a window (>= 3, so that R^2 means something).
        r2_min: R^2 a window must reach, in (0, 1].
        confidence: interval level in (0, 1).
        n_resamples: bootstrap resamples over groups.
        seed: seed of the bootstrap's random generator.

    Returns:
        A :class:`Fit` of kind ``"geometric_rate"`` with ``value == rate`` and ``window`` set.
        Rows with non-finite ``t``/``y``, ``y <= 0`` or ``y <= floor`` are counted in
        ``n_excluded``; rows outside the window are not. With fewer than ``min_points`` usable
        rows or fewer than 2 distinct ``t``, the fit is NaN with ``converged=False``.

    Raises:
        ValueError: if the inputs are not 1-D of equal length, or an option is out of range.
    """
    (t, y), groups = _columns((t, y), groups, ("t", "y"))
    n_resamples = _check_options(
        confidence, n_resamples, min_points, name="min_points", min_allowed=3
    )
    if not 0.0 < r2_min <= 1.0:
        raise ValueError(f"r2_min must be in (0, 1], got {r2_min}")
    if floor is not None and not np.isfinite(floor):
        raise ValueError(f"floor must be finite or None, got {floor}")
    usable = np.isfinite(t) & np.isfinite(y) & (y > 0)
    if floor is not None:
        usable &= y > floor
    n_excluded = int(np.count_nonzero(~usable))
    notes = []
    if n_excluded:
        at_floor = ", or at/below the floor" if floor is not None else ""
        notes.append(f"{n_excluded} points excluded (non-finite or non-positive{at_floor})")
    t, log_y = t[usable], np.log(y[usable])
    codes = (
        np.zeros(t.size, dtype=int)
        if groups is None
        else pd.factorize(groups[usable], use_na_sentinel=False)[0]
    )
    n = t.size

    def failed(reason: str) -> Fit:
        n_groups = np.unique(codes).size
        return _nan_fit("geometric_rate", n, n_groups, n_excluded, "; ".join([*notes, reason]))

    if n < min_points:
        return failed(f"only {n} usable points (need {min_points})")
    if np.unique(t).size < 2:
        return failed("fewer than 2 distinct t values")
    window = _select_window(t, log_y, codes, min_points, r2_min, notes)
    if window is None:
        return failed("log y is constant on every window: no decay to fit")

    inside = (t >= window[0]) & (t <= window[1])
    t_w, log_y_w = t[inside], log_y[inside]
    codes_w = np.unique(codes[inside], return_inverse=True)[1]
    result = sm.OLS(log_y_w, np.column_stack([np.ones(t_w.size), t_w])).fit()
    intercept, slope = result.params
    n_groups = codes_w.max() + 1
    ci = None
    if n_groups >= 2:
        statistic = _pooled_group_slope(t_w, log_y_w, codes_w)
        data = [np.arange(n_groups)]
        df = n_groups - 1
        ci = _bootstrap_ci(data, statistic, True, confidence, n_resamples, seed, df, notes)
    if ci is None:
        ci = _wald_ci(result, 1, confidence, notes)
    ci_low, ci_high, ci_method = ci
    return Fit(
        kind="geometric_rate",
        value=math.exp(slope),
        ci_low=math.exp(ci_low),
        ci_high=math.exp(ci_high),
        prefactor=math.exp(intercept),
        r2=result.rsquared,
        residual_std=math.sqrt(result.mse_resid) if t_w.size > 2 else math.nan,
        n_points=t_w.size,
        n_groups=n_groups,
        n_excluded=n_excluded,
        converged=bool(np.isfinite(slope)),
        ci_method=ci_method,
        window=window,
        message="; ".join(notes),
    )


def fit_geometric_rate_per_group(
    t,
    y,
    groups,
    *,
    floor: float | None = None,
    min_points: int = 5,
    r2_min: float = 0.98,
    confidence: float = 0.95,
    n_resamples: int = _DEFAULT_RESAMPLES,
    seed: int = 0,
) -> Fit:
    """Fit each group's curve alone with :func:`fit_geometric_rate`, then combine the rates.

    For curves whose transients differ from run to run (a saddle passed at different times),
    a pooled fit finds no window that suits every curve; here each curve gets its own window.
    The value is the geometric mean of the per-group rates (the mean of their logs); its
    interval is a bootstrap over groups of that mean (BCa, then percentile, then the OLS
    t-interval; with the small-sample corrections of the module doc, as
    :func:`fit_threshold`), transformed back by exp. Groups whose own fit fails are left out
    and counted in ``n_excluded``; ``message`` lists the per-group rates.

    Args:
        t, y, groups: 1-D array-likes of equal length (n,), as :func:`fit_geometric_rate`;
            ``groups`` is required (one curve per group).
        floor, min_points, r2_min: passed to each group's :func:`fit_geometric_rate`.
        confidence: interval level in (0, 1).
        n_resamples: bootstrap resamples over groups.
        seed: seed of the bootstrap's random generator.

    Returns:
        A :class:`Fit` of kind ``"geometric_rate"``: ``prefactor`` the geometric mean of the
        per-group prefactors, ``r2`` the median per-group R^2, ``residual_std`` the standard
        deviation (ddof 1) of the log rates, ``n_points`` the rows inside the groups' windows,
        ``n_groups`` the groups fitted, ``window`` the medians of the groups' window ends.
        Fewer than 2 fitted groups give a NaN fit with ``converged=False``.

    Raises:
        ValueError: as :func:`fit_geometric_rate`, or ``groups`` is None.
    """
    if groups is None:
        raise ValueError("fit_geometric_rate_per_group needs groups (one curve per group)")
    (t, y), groups = _columns((t, y), groups, ("t", "y"))
    n_resamples = _check_options(
        confidence, n_resamples, min_points, name="min_points", min_allowed=3
    )
    codes, labels = pd.factorize(groups, use_na_sentinel=False)
    fits = {}
    for code, label in enumerate(labels):
        mine = codes == code
        fit = fit_geometric_rate(
            t[mine], y[mine], floor=floor, min_points=min_points, r2_min=r2_min, seed=seed
        )
        if fit.converged and fit.value > 0:
            fits[label] = fit
    n_failed = len(labels) - len(fits)
    notes = [f"{n_failed} of {len(labels)} groups could not be fitted"] if n_failed else []
    if len(fits) < 2:
        notes.append(f"only {len(fits)} groups fitted (need 2)")
        return _nan_fit("geometric_rate", 0, len(fits), n_failed, "; ".join(notes))
    log_rates = np.log([f.value for f in fits.values()])
    rates = ", ".join(f"{label}: {f.value:.4g}" for label, f in fits.items())
    notes.append(f"per-group rates {rates}")
    result = sm.OLS(log_rates, np.ones(log_rates.size)).fit()
    ci = _bootstrap_ci(
        [_adjusted(log_rates)],
        _mean_statistic,
        True,
        confidence,
        n_resamples,
        seed,
        log_rates.size - 1,
        notes,
    )
    if ci is None:
        ci = _wald_ci(result, 0, confidence, notes)
    ci_low, ci_high, ci_method = ci
    centre = float(result.params[0])
    windows = np.array([f.window for f in fits.values()])
    return Fit(
        kind="geometric_rate",
        value=math.exp(centre),
        ci_low=math.exp(ci_low),
        ci_high=math.exp(ci_high),
        prefactor=math.exp(np.mean(np.log([f.prefactor for f in fits.values()]))),
        r2=float(np.median([f.r2 for f in fits.values()])),
        residual_std=float(np.std(log_rates, ddof=1)),
        n_points=sum(f.n_points for f in fits.values()),
        n_groups=len(fits),
        n_excluded=n_failed,
        converged=bool(np.isfinite(centre)),
        ci_method=ci_method,
        window=(float(np.median(windows[:, 0])), float(np.median(windows[:, 1]))),
        message="; ".join(notes),
    )


def threshold_crossings(x, value, level: float, groups=None) -> pd.DataFrame:
    """Find, per group, the ``x`` from which ``value`` stays at or below ``level``.

    Success means ``value <= level`` (a NaN value, e.g. a diverged run, is a failure). Within a
    group, rows are sorted by ``x`` and ``k`` is the first index from which every row succeeds.
    ``k == 0``: the threshold is the smallest ``x``, censored ``"low"``. No such ``k`` (the
    largest ``x`` fails): NaN, censored ``"high"``. Otherwise the threshold is where the straight
    line through ``(log x[k-1], log value[k-1])`` and ``(log x[k], log value[k])`` reaches
    ``log level``, clamped into ``[x[k-1], x[k]]``; if a value or ``level`` is not positive, or
    the line is flat, it is the geometric mean of ``x[k-1]`` and ``x[k]``.

    Args:
        x: 1-D array-like, shape (n,), positive finite values of the swept quantity.
        value: 1-D array-like, shape (n,), the metric compared with ``level`` (lower is better).
        level: finite success level for ``value``.
        groups: optional 1-D array-like, shape (n,), seed/run label of each row; ``None``: all
            rows form one group labelled 0.

    Returns:
        DataFrame with columns ``group``, ``threshold`` (float, NaN when censored high) and
        ``censored`` (``"low"``, ``"high"`` or ``""``), one row per group in order of first
        appearance.

    Raises:
        ValueError: if the inputs are not 1-D of equal length, ``x`` has a non-finite or
            non-positive entry, or ``level`` is not finite.
    """
    (x, value), groups = _columns((x, value), groups, ("x", "value"))
    if not np.all(np.isfinite(x) & (x > 0)):
        raise ValueError("x must be finite and positive (it is interpolated on a log scale)")
    if not np.isfinite(level):
        raise ValueError(f"level must be finite, got {level}")
    codes, labels = (
        (np.zeros(x.size, dtype=int), np.array([0]))
        if groups is None
        else pd.factorize(groups, use_na_sentinel=False)
    )
    rows = []
    for code, label in enumerate(labels):
        members = np.flatnonzero(codes == code)
        order = members[np.argsort(x[members], kind="stable")]
        rows.append((label, *_crossing(x[order], value[order], level)))
    return pd.DataFrame(rows, columns=["group", "threshold", "censored"])


def fit_threshold(
    x,
    value,
    level: float,
    groups=None,
    *,
    confidence: float = 0.95,
    n_resamples: int = _DEFAULT_RESAMPLES,
    seed: int = 0,
    min_groups: int = 2,
) -> Fit:
    """Estimate the typical threshold ``x`` at which ``value`` drops to ``level`` for good.

    Per-group crossings come from :func:`threshold_crossings`; censored groups (already
    successful at the smallest ``x``, or never successful) are left out, which biases the
    estimate if many are censored: widen the ``x`` grid rather than trust such a fit. The
    estimate is the geometric mean of the uncensored crossings; its interval is a bootstrap of
    the mean log crossing over groups (BCa, then percentile, then the OLS t-interval of that
    mean; with the small-sample corrections of the module doc), transformed back by exp.

    Args:
        x: 1-D array-like, shape (n,), positive finite values of the swept quantity.
        value: 1-D array-like, shape (n,), the metric compared with ``level`` (lower is better).
        level: finite success level.
        groups: optional 1-D array-like, shape (n,), seed/run label of each row; ``None``: one
            group, which is fewer than any ``min_groups >= 2``.
        confidence: interval level in (0, 1).
        n_resamples: bootstrap resamples over groups.
        seed: seed of the bootstrap's random generator.
        min_groups: fewest uncensored groups for a fit (>= 1).

    Returns:
        A :class:`Fit` of kind ``"threshold"``: ``n_points == n_groups`` is the number of
        uncensored groups, ``n_excluded`` the number of censored ones, ``residual_std`` the
        standard deviation of their log thresholds. Too few uncensored groups gives a NaN fit
        with ``converged=False``.

    Raises:
        ValueError: as :func:`threshold_crossings`, or if an option is out of range.
    """
    n_resamples = _check_options(
        confidence, n_resamples, min_groups, name="min_groups", min_allowed=1
    )
    crossings = threshold_crossings(x, value, level, groups)
    n_low = int((crossings["censored"] == "low").sum())
    n_high = int((crossings["censored"] == "high").sum())
    log_thresholds = np.log(crossings.loc[crossings["censored"] == "", "threshold"].to_numpy())
    n_used = log_thresholds.size
    notes = []
    if n_low or n_high:
        notes.append(
            f"{n_low + n_high} groups censored ({n_low} below x_min, {n_high} above x_max)"
        )
    if n_used < min_groups:
        notes.append(f"only {n_used} uncensored groups (need {min_groups})")
        return _nan_fit("threshold", n_used, n_used, n_low + n_high, "; ".join(notes))

    return _geometric_mean_fit(
        "threshold", log_thresholds, n_low + n_high, confidence, n_resamples, seed, notes
    )


def fit_ratio(
    y,
    reference,
    *,
    confidence: float = 0.95,
    n_resamples: int = _DEFAULT_RESAMPLES,
    seed: int = 0,
    min_pairs: int = 2,
) -> Fit:
    """Estimate the typical ratio ``y / reference`` of paired positive measurements.

    Each index is one pair (e.g. the same seed measured under two optimisers). The estimate is
    the geometric mean of the ratios; its interval is a bootstrap of the mean log ratio over
    pairs (BCa, then percentile, then the OLS t-interval of that mean; with the small-sample
    corrections of the module doc), transformed back by exp. A ratio below 1 means ``y`` is
    smaller than its reference.

    Args:
        y: 1-D array-like, shape (n,), the compared measurement of each pair.
        reference: 1-D array-like, shape (n,), the reference measurement of the same pairs.
        confidence: interval level in (0, 1).
        n_resamples: bootstrap resamples over pairs.
        seed: seed of the bootstrap's random generator.
        min_pairs: fewest usable pairs for a fit (>= 1).

    Returns:
        A :class:`Fit` of kind ``"ratio"``: ``n_points == n_groups`` is the number of usable
        pairs, ``n_excluded`` the pairs dropped because a value is NaN, infinite or not
        positive, ``residual_std`` the standard deviation of the log ratios. Too few usable
        pairs gives a NaN fit with ``converged=False``.

    Raises:
        ValueError: if the inputs are not 1-D of equal length, or an option is out of range.
    """
    (y, reference), _ = _columns((y, reference), None, ("y", "reference"))
    n_resamples = _check_options(
        confidence, n_resamples, min_pairs, name="min_pairs", min_allowed=1
    )
    usable = np.isfinite(y) & np.isfinite(reference) & (y > 0) & (reference > 0)
    n_excluded = int(np.count_nonzero(~usable))
    log_ratios = np.log(y[usable]) - np.log(reference[usable])
    n_used = log_ratios.size
    notes = [f"{n_excluded} pairs excluded (non-finite or non-positive)"] if n_excluded else []
    if n_used < min_pairs:
        notes.append(f"only {n_used} usable pairs (need {min_pairs})")
        return _nan_fit("ratio", n_used, n_used, n_excluded, "; ".join(notes))

    return _geometric_mean_fit(
        "ratio", log_ratios, n_excluded, confidence, n_resamples, seed, notes
    )


# --- helpers -------------------------------------------------------------------------------


def _columns(
    arrays: Sequence, groups, names: Sequence[str]
) -> tuple[list[np.ndarray], np.ndarray | None]:
    """Convert to 1-D float arrays (and a 1-D group array) of one common length."""
    columns = [np.asarray(a, dtype=float) for a in arrays]
    for name, column in zip(names, columns, strict=True):
        if column.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {column.shape}")
    if groups is not None:
        groups = np.asarray(groups)
        if groups.ndim != 1:
            raise ValueError(f"groups must be 1-D, got shape {groups.shape}")
    lengths = {name: c.size for name, c in zip(names, columns, strict=True)}
    if groups is not None:
        lengths["groups"] = groups.size
    if len(set(lengths.values())) > 1:
        raise ValueError(f"inputs must have equal lengths, got {lengths}")
    return columns, groups


def _check_options(
    confidence: float,
    n_resamples: int | None,
    minimum: int,
    *,
    name: str,
    min_allowed: int,
    default_resamples: int = _DEFAULT_RESAMPLES,
) -> int:
    """Validate the shared options; return the number of resamples to use."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    n_resamples = default_resamples if n_resamples is None else n_resamples
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples}")
    if int(minimum) != minimum or minimum < min_allowed:
        raise ValueError(f"{name} must be an integer >= {min_allowed}, got {minimum}")
    return int(n_resamples)


def _nan_fit(kind: str, n_points: int, n_groups: int, n_excluded: int, message: str) -> Fit:
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
    )


def _rlm(endog: np.ndarray, exog: np.ndarray):
    return sm.RLM(endog, exog, M=sm.robust.norms.HuberT()).fit(maxiter=_RLM_MAXITER)


def _rlm_converged(result) -> bool:
    # statsmodels stops early on convergence (or on a perfect fit); at maxiter, check the
    # last change of its deviance criterion against its default tolerance.
    history = result.fit_history
    if history["iteration"] < _RLM_MAXITER:
        return True
    deviance = history["deviance"]
    return bool(abs(deviance[-1] - deviance[-2]) <= 1e-8)


def _stratum_replicates(
    log_y: np.ndarray, stratum: np.ndarray, codes: np.ndarray | None, n_strata: int
) -> list[np.ndarray]:
    """Replicates per distinct x: one per row, or one per group (mean of its rows)."""
    if codes is None:
        return [log_y[stratum == k] for k in range(n_strata)]
    cells = pd.Series(log_y).groupby([stratum, codes]).mean()
    return [cells.loc[k].to_numpy() for k in range(n_strata)]


def _adjusted(replicates: np.ndarray) -> np.ndarray:
    """Spread replicates about their mean so that resampling them has unbiased variance."""
    n = replicates.size
    mean = replicates.mean()
    return mean + math.sqrt(n / (n - 1)) * (replicates - mean)


def _stratified_slope(
    log_x: np.ndarray, fixed_x: np.ndarray, fixed_y: np.ndarray
) -> Callable[..., np.ndarray]:
    """Vectorised OLS slope on the union of resampled strata and held (single) points.

    With x constant inside a stratum, the pooled OLS slope only needs each stratum's size and
    mean: slope = sum_k n_k (x_k - xbar) mean_k / sum_k n_k (x_k - xbar)^2.
    """

    def statistic(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        sizes = np.array([s.shape[axis] for s in samples] + [1] * fixed_x.size, dtype=float)
        xs = np.concatenate([log_x, fixed_x])
        x_bar = sizes @ xs / sizes.sum()
        weights = sizes * (xs - x_bar)
        means = [s.mean(axis=axis) for s in samples] + list(fixed_y)
        numerator = sum(w * m for w, m in zip(weights, means, strict=True))
        return numerator / (weights @ (xs - x_bar))

    return statistic


def _robust_slope(
    log_x: np.ndarray, fixed_x: np.ndarray, fixed_y: np.ndarray
) -> Callable[..., float]:
    """RLM (HuberT) slope on the union of resampled strata and held points (not vectorised)."""

    def statistic(*samples: np.ndarray) -> float:
        xs = np.concatenate([np.full(s.size, x) for s, x in zip(samples, log_x, strict=True)])
        xs = np.concatenate([xs, fixed_x])
        ys = np.concatenate([*samples, fixed_y])
        return _rlm(ys, np.column_stack([np.ones(xs.size), xs])).params[1]

    return statistic


def _pooled_group_slope(
    t: np.ndarray, log_y: np.ndarray, codes: np.ndarray
) -> Callable[..., np.ndarray]:
    """Vectorised pooled OLS slope over a resample of group indices (whole curves).

    ``codes`` are group indices 0..G-1. The small-sample correction of the module doc is
    applied to the slope itself (the pooled slope is not a mean of per-group values):
    resampled slopes are spread about the full-data slope by ``sqrt(G / (G - 1))``.
    """
    t = t - t.mean()  # conditioning only: the slope is shift-invariant
    n_groups = codes.max() + 1
    # Per-group sufficient statistics: count, sum t, sum t^2, sum y, sum t*y.
    sums = np.stack(
        [
            np.bincount(codes, minlength=n_groups),
            np.bincount(codes, t, n_groups),
            np.bincount(codes, t * t, n_groups),
            np.bincount(codes, log_y, n_groups),
            np.bincount(codes, t * log_y, n_groups),
        ],
        axis=-1,
    )

    def slope(totals: np.ndarray) -> np.ndarray:
        n, s_t, s_tt, s_y, s_ty = np.moveaxis(totals, -1, 0)
        return (n * s_ty - s_t * s_y) / (n * s_tt - s_t * s_t)

    full = slope(sums.sum(axis=0))
    spread = math.sqrt(n_groups / (n_groups - 1))

    def statistic(indices: np.ndarray, axis: int = -1) -> np.ndarray:
        return full + spread * (slope(sums[indices.astype(int)].sum(axis=-2)) - full)

    return statistic


def _mean_statistic(sample: np.ndarray, axis: int = -1) -> np.ndarray:
    return sample.mean(axis=axis)


def _bootstrap_ci(
    data: list[np.ndarray],
    statistic: Callable,
    vectorized: bool,
    confidence: float,
    n_resamples: int,
    seed: int,
    df: int,
    notes: list[str],
) -> tuple[float, float, str] | None:
    """BCa interval, else percentile on the same resamples; None if both are degenerate.

    ``df`` are the degrees of freedom of the replicates' spread, for the expanded level of the
    module doc. Appends a note to ``notes`` for each fallback taken.
    """
    expanded = 2.0 * stats.norm.cdf(stats.t.ppf(0.5 + confidence / 2.0, df)) - 1.0
    options = dict(vectorized=vectorized, paired=False, confidence_level=expanded)
    # Degenerate data (a constant bootstrap distribution, a 0/0 acceleration) is expected and
    # handled below, so its warnings are silenced here only.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = stats.bootstrap(
            data, statistic, n_resamples=n_resamples, method="BCa",
            rng=np.random.default_rng(seed), **options,
        )  # fmt: skip
        interval = _finite_interval(result.confidence_interval)
        degenerate = any(issubclass(w.category, stats.DegenerateDataWarning) for w in caught)
        if interval is not None and not degenerate:
            return (*interval, "BCa")
        result = stats.bootstrap(
            data, statistic, n_resamples=0, method="percentile", bootstrap_result=result,
            **options,
        )  # fmt: skip
    interval = _finite_interval(result.confidence_interval)
    if interval is not None:
        notes.append("BCa degenerate, used percentile")
        return (*interval, "percentile")
    notes.append("bootstrap degenerate")
    return None


def _finite_interval(interval) -> tuple[float, float] | None:
    low, high = float(interval.low), float(interval.high)
    if np.isfinite(low) and np.isfinite(high) and low < high:
        return low, high
    return None


def _wald_ci(result, index: int, confidence: float, notes: list[str]) -> tuple[float, float, str]:
    """statsmodels' interval for parameter ``index``, or NaN bounds with method "none"."""
    low, high = (float(b) for b in result.conf_int(alpha=1.0 - confidence)[index])
    if np.isfinite(low) and np.isfinite(high):
        notes.append("used the statsmodels t/Wald interval")
        return low, high, "ols"
    notes.append("no confidence interval could be computed")
    return math.nan, math.nan, "none"


def _noise_std(t: np.ndarray, log_y: np.ndarray, codes: np.ndarray) -> float:
    """Robust std of the noise in log y, from the curves' local curvature.

    Pseudo-residuals (Gasser, Sroka & Jennen-Steinmetz, Biometrika 1986): each point's
    deviation from the straight line through its two neighbours in t on the same curve, scaled
    to the noise std. A smooth trend (linear or slowly bending) cancels out, so this measures
    noise without knowing the window; the MAD makes the few points at sharp bends harmless.
    Repeated (group, t) rows are averaged first, and their mean's smaller variance is allowed
    for. Returns NaN when no curve has 3 distinct t.
    """
    curves = pd.Series(log_y).groupby([codes, t]).agg(["mean", "size"])
    group = curves.index.get_level_values(0).to_numpy()
    tt = curves.index.get_level_values(1).to_numpy(dtype=float)
    yy, size = curves["mean"].to_numpy(), curves["size"].to_numpy(dtype=float)
    same = (group[:-2] == group[1:-1]) & (group[1:-1] == group[2:])
    if not same.any():
        return math.nan
    left, right = (tt[1:-1] - tt[:-2])[same], (tt[2:] - tt[1:-1])[same]
    w_prev, w_next = right / (left + right), left / (left + right)
    pseudo = yy[1:-1][same] - w_prev * yy[:-2][same] - w_next * yy[2:][same]
    pseudo /= np.sqrt(
        1.0 / size[1:-1][same] + w_prev**2 / size[:-2][same] + w_next**2 / size[2:][same]
    )
    return float(np.median(np.abs(pseudo)) / stats.norm.ppf(0.75))


def _select_window(
    t: np.ndarray,
    log_y: np.ndarray,
    codes: np.ndarray,
    min_points: int,
    r2_min: float,
    notes: list[str],
) -> tuple[float, float] | None:
    """Choose the fit window of :func:`fit_geometric_rate` (see its docstring).

    Sums over every window (and over parts of it) come from cumulative sums per distinct t, so
    each start costs one vectorised pass over the possible ends.
    """
    distinct, index = np.unique(t, return_inverse=True)
    u = (distinct - distinct.mean()) / distinct.std()  # conditioning only: slopes just rescale
    y = log_y - log_y.mean()
    count = np.bincount(index).astype(float)
    sum_y = np.bincount(index, y)
    sums = _WindowSums(
        u,
        sum_y / count,
        count,
        [
            np.concatenate([[0.0], np.cumsum(a)])
            for a in (count, count * u, count * u * u, sum_y, np.bincount(index, y * y), u * sum_y)
        ],
    )
    sigma = _noise_std(t, log_y, codes)
    if not np.isfinite(sigma):
        notes.append("noise level not estimable: window chosen on R^2 alone")
    # Expected residual sum of squares per residual degree of freedom (0: use R^2 as is).
    noise_variance = sigma**2 if np.isfinite(sigma) else 0.0
    # A window whose log y varies less than this (relative) is flat: R^2 is rounding noise.
    flat = 1e-12 * float(y @ y)
    # Per criterion, the best window so far as (span, start index, end index).
    longest = {"r2 and linear": None, "linear": None}
    best_r2 = None  # (r2, start index, end index)
    for i in range(distinct.size - 1):
        ends = np.arange(i + 1, distinct.size)
        window = sums.of(i, ends)
        with np.errstate(divide="ignore", invalid="ignore"):
            explained = window.s_xy**2 / window.s_xx
            r2 = explained / window.s_yy
            r2[(window.n < min_points) | (window.s_yy <= flat)] = np.nan
            # R^2 with the residual variance never below the noise level, so that a short
            # window whose few points happen to line up does not pass by luck.
            residual = np.maximum(window.s_yy - explained, (window.n - 2) * noise_variance)
            credible_r2 = np.where(np.isnan(r2), np.nan, explained / (explained + residual))
            linear = sums.looks_linear(i, ends, window, sigma)
        if np.isnan(r2).all():
            continue
        j = int(np.nanargmax(r2))
        if best_r2 is None or r2[j] > best_r2[0]:
            best_r2 = (r2[j], i, ends[j])
        for key, good in (
            ("r2 and linear", (credible_r2 >= r2_min) & linear),
            ("linear", ~np.isnan(r2) & linear),
        ):
            good = np.flatnonzero(good)
            if good.size:
                end = ends[good[-1]]
                span = distinct[end] - distinct[i]
                # ">=": on equal spans the later start wins.
                if longest[key] is None or span >= longest[key][0]:
                    longest[key] = (span, i, end)
    if longest["r2 and linear"] is not None:
        _, i, j = longest["r2 and linear"]
    elif longest["linear"] is not None:
        _, i, j = longest["linear"]
        notes.append(
            f"no window reached R^2 >= {r2_min}; used the longest without a detectable bend"
        )
    elif best_r2 is not None:
        _, i, j = best_r2
        notes.append(f"no window reached R^2 >= {r2_min} or looked linear; used the best R^2")
    else:
        return None
    return float(distinct[i]), float(distinct[j])


@dataclass(frozen=True)
class _Moments:
    """Centred sums of the rows of some windows (arrays over the windows)."""

    n: np.ndarray
    u_bar: np.ndarray
    y_bar: np.ndarray
    s_xx: np.ndarray
    s_xy: np.ndarray
    s_yy: np.ndarray

    @property
    def slope(self) -> np.ndarray:
        return self.s_xy / self.s_xx


@dataclass(frozen=True)
class _WindowSums:
    """Cumulative sums over the distinct t values, for O(1) window statistics."""

    u: np.ndarray  # distinct t, centred and scaled
    y_mean: np.ndarray  # mean log y at each distinct t
    count: np.ndarray  # rows at each distinct t
    cumulative: list[np.ndarray]  # n, sum u, sum u^2, sum y, sum y^2, sum u*y; leading 0

    def of(self, first: np.ndarray | int, last: np.ndarray | int) -> _Moments:
        """Moments of the rows whose distinct-t index lies in [first, last]."""
        n, s_u, s_uu, s_y, s_yy, s_uy = (c[last + 1] - c[first] for c in self.cumulative)
        return _Moments(
            n, s_u / n, s_y / n, s_uu - s_u * s_u / n, s_uy - s_u * s_y / n, s_yy - s_y * s_y / n
        )

    def looks_linear(
        self, start: int, ends: np.ndarray, window: _Moments, sigma: float
    ) -> np.ndarray:
        """Whether windows [start, end] show no bend at their ends, given noise std ``sigma``.

        Two checks, each at ``_ENDS_Z`` standard errors (computed from ``sigma``), plus a
        relative slack for rounding:

        * edges (3 or more distinct t): the mean log y at the first and at the last t lies on
          the window's line. A window running even one step into a plateau puts a whole step's
          drop there, while the slope error that step causes is a fraction of it;
        * thirds (6 or more distinct t): the slopes of the first and last thirds (L // 3
          distinct t each) agree with that of the middle rest. This catches smooth bends whose
          deviation is spread over many steps, also when both ends bend the same way.

        Shorter windows, or a NaN ``sigma``, pass untested.
        """
        size = ends - start + 1
        agree = np.ones(ends.size, dtype=bool)
        if not np.isfinite(sigma):
            return agree
        slack = 1e-8 * (np.abs(window.slope) + np.abs(window.y_bar) + 1.0)
        for edge in (np.full(ends.size, start), ends):
            residual = (
                self.y_mean[edge] - window.y_bar - window.slope * (self.u[edge] - window.u_bar)
            )
            variance = (
                1 / self.count[edge]
                - 1 / window.n
                - (self.u[edge] - window.u_bar) ** 2 / window.s_xx
            )
            within = np.abs(residual) <= _ENDS_Z * sigma * np.sqrt(np.maximum(variance, 0)) + slack
            agree &= (size < 3) | within
        third = size // 3
        parts = [
            self.of(start, start + third - 1),
            self.of(start + third, ends - third),
            self.of(ends - third + 1, ends),
        ]
        head, middle, tail = parts
        for outer in (head, tail):
            error = sigma * np.sqrt(1.0 / outer.s_xx + 1.0 / middle.s_xx)
            within = np.abs(outer.slope - middle.slope) <= _ENDS_Z * error + slack
            agree &= (third < 2) | within
        return agree


def _crossing(x: np.ndarray, value: np.ndarray, level: float) -> tuple[float, str]:
    """Threshold and censoring of one group's curve, rows sorted by x."""
    failures = np.flatnonzero(~(value <= level))
    if failures.size == 0:
        return float(x[0]), "low"
    k = failures[-1] + 1
    if k == x.size:
        return math.nan, "high"
    x0, x1 = math.log(x[k - 1]), math.log(x[k])
    v0, v1 = value[k - 1], value[k]
    if v0 > 0 and v1 > 0 and level > 0 and np.isfinite(v0) and v0 != v1:
        fraction = (math.log(level) - math.log(v0)) / (math.log(v1) - math.log(v0))
        return float(math.exp(x0 + min(max(fraction, 0.0), 1.0) * (x1 - x0))), ""
    return float(math.exp(0.5 * (x0 + x1))), ""


def _geometric_mean_fit(
    kind: str,
    log_values: np.ndarray,
    n_excluded: int,
    confidence: float,
    n_resamples: int,
    seed: int,
    notes: list[str],
) -> Fit:
    """The geometric mean of positive values given by their logs (one per group), with a
    bootstrap CI over the groups (OLS t-interval when the bootstrap is degenerate)."""
    n_used = log_values.size
    result = sm.OLS(log_values, np.ones(n_used)).fit()
    ci = None
    if n_used >= 2:
        ci = _bootstrap_ci(
            [_adjusted(log_values)],
            _mean_statistic,
            True,
            confidence,
            n_resamples,
            seed,
            n_used - 1,
            notes,
        )
    if ci is None:
        ci = _wald_ci(result, 0, confidence, notes)
    ci_low, ci_high, ci_method = ci
    centre = float(result.params[0])
    return Fit(
        kind=kind,
        value=math.exp(centre),
        ci_low=math.exp(ci_low),
        ci_high=math.exp(ci_high),
        prefactor=math.nan,
        r2=math.nan,
        residual_std=float(np.std(log_values, ddof=1)) if n_used >= 2 else math.nan,
        n_points=n_used,
        n_groups=n_used,
        n_excluded=n_excluded,
        converged=bool(np.isfinite(centre)),
        ci_method=ci_method,
        window=None,
        message="; ".join(notes),
    )
