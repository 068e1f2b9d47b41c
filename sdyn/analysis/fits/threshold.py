"""Thresholds read on a grid: interval-censored data and their log-normal regression.

A threshold (the smallest width from which a run trains in the NTK regime, say) is only known
to lie between two grid values: above the last value that failed, at or below the first value
from which every value succeeds. Below the grid's first value it is left-censored, above its
last value right-censored. :func:`threshold_intervals` reads these intervals off a sweep;
:func:`fit_threshold` fits, by maximum likelihood over all intervals at once,

    log x*_i = beta_0 + alpha * log axis_i + sigma * eps_i,    eps_i ~ N(0, 1),

the log-normal accelerated-failure-time model with interval censoring (lifelines'
``LogNormalAFTFitter.fit_interval_censoring`` fits the same likelihood; the tests check the two
agree). Censored and grid-snapped observations enter with their exact likelihood
``P(low < x* <= high)``, so no seed is dropped and no threshold is invented by interpolation.

The interval for ``alpha`` (or for the typical threshold ``exp(beta_0)`` without an axis) is a
profile-likelihood interval: the parameter values whose profile log-likelihood lies within
``q / 2`` of the maximum. ``q`` is calibrated on the exact interval of uncensored normal
regression, ``q = N log(1 + t^2 / df)`` with ``t`` the Student quantile and ``df = N - p - 1``
(``p`` regression coefficients): for uncensored data this reproduces the t-interval exactly,
where the chi-squared(1) quantile would be too narrow with few seeds. On 1,000 synthetic
sweeps per setting (5 axis values x 5 seeds, grid ratio 2, ~35% of thresholds censored, half
on each side), the 95% interval covered the true exponent in 95.4-96.5% of trials for
log-threshold noise sigma = 0.05, 0.3 and 0.6 (``benchmarks/coverage.py``; the chi-squared(1)
calibration: 85% at small sigma, 200 sweeps). When the
thresholds all fit one line within their grid cells, the likelihood is flat along the feasible
lines and sigma is not identified (it runs towards a floor): the interval then holds the set of
slopes the grid allows (found by linear programming and stated in the fit's message; equal to
it with many thresholds, wider with few), never a point, and the fit says so
(``details["bracket"]``): it is a bracket, not a confidence interval. When the censored
thresholds do not bound the parameter at all (every seed below the grid at one n and above it
at the next, say), the likelihood keeps its maximum out to infinity: there is then no estimate
(NaN), only the interval.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import optimize, special, stats

from sdyn.analysis.fits.result import Fit, columns, nan_fit

# sigma's floor, as a fraction of the typical grid cell (log scale): where every threshold fits
# one line, the likelihood rises as sigma -> 0; the floor keeps the optimum finite.
SIGMA_FLOOR = 1e-3
# The profile interval is searched this far from the estimate (in the parameter's units, about
# 100 decades for an exponent); beyond it the data do not bound the parameter: +-inf.
SEARCH_LIMIT = 100.0
# A fit whose observations have a geometric-mean probability above this lies within every
# observation's cell: the likelihood is flat along the lines through all cells.
ONE_LINE = 0.95
# A profile log-likelihood within this of its maximum at SEARCH_LIMIT from the estimate is flat
# out to infinity on that side: the maximum is not attained, so there is no point estimate.
FLAT = 0.01
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _allowed(design: np.ndarray, lo: np.ndarray, hi: np.ndarray, j: int) -> tuple[float, float]:
    """The range of coefficient ``j`` over the lines through every threshold's cell (``lo <=
    design @ beta <= hi``, log scale; an infinite end bounds nothing), by linear programming:
    what the grid allows where the thresholds fit one line. An end the cells do not bound is
    infinite; NaN where the solver finds no such line."""
    rows, ends = np.vstack([-design, design]), np.concatenate([-lo, hi])
    keep = np.isfinite(ends)
    found = []
    for sign in (1.0, -1.0):  # the least, then the greatest
        objective = np.zeros(design.shape[1])
        objective[j] = sign
        free = [(None, None)] * design.shape[1]
        res = optimize.linprog(objective, A_ub=rows[keep], b_ub=ends[keep], bounds=free)
        unbounded = -sign * math.inf if res.status == 3 else math.nan
        found.append(sign * res.fun if res.status == 0 else unbounded)
    return found[0], found[1]


def threshold_intervals(x, value, level: float, groups=None) -> pd.DataFrame:
    """Per group, the interval of ``x`` in which the threshold lies.

    Success means ``value <= level`` (a NaN value, e.g. a diverged run, is a failure). Within a
    group, rows are sorted by ``x``; the threshold is the smallest ``x`` from which every row
    succeeds, so it lies in ``(x[k-1], x[k]]`` where ``x[k-1]`` is the last failure. No failure:
    left-censored, ``(0, x[0]]``. The largest ``x`` fails: right-censored, ``(x[-1], inf)``.

    Args:
        x: 1-D array-like, shape (n,), positive finite values of the swept quantity.
        value: 1-D array-like, shape (n,), the metric compared with ``level`` (lower is better).
        level: finite success level for ``value``.
        groups: optional 1-D array-like, shape (n,), seed/run label of each row; ``None``: all
            rows form one group labelled 0.

    Returns:
        DataFrame with one row per group, in order of first appearance: ``group``, ``low``
        (0 when left-censored), ``high`` (inf when right-censored), ``censored`` (``"left"``,
        ``"right"`` or ``""``) and ``non_monotone`` (a success below the last failure: the
        outcome is noisy in ``x``).

    Raises:
        ValueError: if the inputs are not 1-D of equal length, ``x`` has a non-finite or
            non-positive entry, or ``level`` is not finite.
    """
    (x, value), groups = columns((x, value), groups, ("x", "value"))
    if not np.all(np.isfinite(x) & (x > 0)):
        raise ValueError("x must be finite and positive (thresholds are read on a log scale)")
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
        xs, ok = x[order], value[order] <= level
        failures = np.flatnonzero(~ok)
        if failures.size == 0:
            rows.append((label, 0.0, xs[0], "left", False))
            continue
        last = failures[-1]
        non_monotone = bool(ok[:last].any())
        if last == xs.size - 1:
            rows.append((label, xs[-1], math.inf, "right", non_monotone))
        else:
            rows.append((label, xs[last], xs[last + 1], "", non_monotone))
    return pd.DataFrame(rows, columns=["group", "low", "high", "censored", "non_monotone"])


def fit_threshold(low, high, axis=None, *, confidence: float = 0.95) -> Fit:
    """Interval-censored log-normal fit of thresholds, optionally as a power law in ``axis``.

    Without ``axis``: the typical threshold ``exp(beta_0)`` (the median of the log-normal).
    With ``axis``: the exponent ``alpha`` of ``x* ~ c * axis**alpha`` (see the module doc for
    the model, the likelihood and the interval).

    Args:
        low: 1-D array-like, shape (N,), each observation's lower bound (exclusive), ``>= 0``;
            0 for a left-censored observation. Units of the threshold (e.g. width m).
        high: 1-D array-like, shape (N,), upper bounds (inclusive), ``> low``; ``inf`` for a
            right-censored observation.
        axis: optional 1-D array-like, shape (N,), positive covariate of each observation
            (e.g. the sample size n).
        confidence: interval level in (0, 1).

    Returns:
        A :class:`Fit` of kind ``"threshold"`` (value: typical threshold) or
        ``"threshold_power_law"`` (value: ``alpha``; ``prefactor``: ``c``), with
        ``ci_method="profile"``. ``residual_std`` is the fitted sigma, ``n_points == n_groups``
        the observations (censored ones included, ``n_excluded`` is 0), ``n_levels`` the
        distinct axis values with at least 2 observations, ``resolution`` (power law only) the
        typical grid cell over the span of ``log axis``: the slope difference the grid itself
        can tell apart. ``details`` holds the censoring counts, sigma, and per axis value the
        estimated typical threshold at the fitted sigma (``None`` where all its observations
        are censored on one side). Fewer observations than the model has parameters plus one
        give a NaN fit; an optimiser failure gives ``converged=False``.

    Raises:
        ValueError: inputs not 1-D of equal length, ``low < 0``, ``high <= low``, a NaN bound,
            a non-positive or non-finite ``axis`` value, or ``confidence`` outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    arrays = (low, high) if axis is None else (low, high, axis)
    cols, _ = columns(arrays, None, ("low", "high", "axis")[: len(arrays)])
    low, high = cols[:2]
    if np.isnan(low).any() or np.isnan(high).any() or (low < 0).any() or (high <= low).any():
        raise ValueError("threshold intervals need 0 <= low < high (NaN not allowed)")
    kind = "threshold" if axis is None else "threshold_power_law"
    n = low.size
    with np.errstate(divide="ignore"):
        lo, hi = np.log(low), np.log(high)
    counts = {
        "left_censored": int(np.isneginf(lo).sum()),
        "right_censored": int(np.isposinf(hi).sum()),
    }
    counts["interval_censored"] = n - counts["left_censored"] - counts["right_censored"]
    censoring = (
        f"{n} thresholds: {counts['interval_censored']} between two grid values, "
        f"{counts['left_censored']} left-censored, {counts['right_censored']} right-censored"
    )
    finite = np.isfinite(lo) & np.isfinite(hi)
    cell = float(np.median(hi[finite] - lo[finite])) if finite.any() else 1.0
    if axis is None:
        design, n_levels, resolution = np.ones((n, 1)), 0, math.nan
    else:
        axis = cols[2]
        if not np.all(np.isfinite(axis) & (axis > 0)):
            raise ValueError("axis must be finite and positive (it enters on a log scale)")
        log_axis = np.log(axis)
        centre = log_axis.mean()  # conditioning: beta_0 is then the log threshold at the centre
        design = np.column_stack([np.ones(n), log_axis - centre])
        _, per_value = np.unique(log_axis, return_counts=True)
        n_levels = int(np.count_nonzero(per_value >= 2))
        span = float(np.ptp(log_axis))
        resolution = cell / span if span > 0 else math.nan
    p = design.shape[1]
    df = n - p - 1
    if df < 1 or (axis is not None and not span > 0):
        need = "2 distinct axis values and " if axis is not None else ""
        return nan_fit(
            kind, n, n, 0, f"{censoring}; too few to fit (need {need}{p + 2} thresholds)",
            n_levels=n_levels, details=counts,
        )  # fmt: skip

    model = _CensoredNormal(design, lo, hi, sigma_floor=SIGMA_FLOOR * cell)
    best = model.fit()
    j = p - 1  # the parameter of interest: alpha, or beta_0 without an axis
    t = stats.t.ppf(0.5 + confidence / 2.0, df)
    drop = 0.5 * n * math.log1p(t * t / df)  # q / 2, see the module doc
    low_ci, high_ci = (model.profile_bound(best, j, drop, side) for side in (-1.0, 1.0))
    sigma = math.exp(best.x[p])
    notes = [censoring]
    unbounded = [
        side for side, end in ((-1.0, low_ci), (1.0, high_ci))
        if math.isinf(end) and model.flat(best, j, side)
    ]  # fmt: skip
    if unbounded:
        ends = ("0", "inf") if axis is None else ("-inf", "+inf")
        towards = " and ".join(ends[side > 0] for side in unbounded)
        notes.append(
            f"no estimate: the likelihood stays at its maximum as it goes to {towards} (the "
            "censored thresholds do not bound it); only the interval is known"
        )
    # no estimate where the maximum is not attained (its location is where the optimiser stopped)
    beta = np.full(p, math.nan) if unbounded else best.x[:p]
    if not best.success:
        notes.append(f"the likelihood's optimiser stopped early: {best.message}")
    bracket = bool(best.success and not unbounded and -best.fun / n > math.log(ONE_LINE))
    if bracket:
        allowed = _allowed(design, lo, hi, j)
        if axis is None:
            allowed = tuple(math.exp(end) for end in allowed)
        what = "typical thresholds" if axis is None else "slopes"
        notes.append(
            f"every threshold fits one line within its grid cell (sigma is not identified): "
            f"the grid allows {what} in [{allowed[0]:.3g}, {allowed[1]:.3g}], which the "
            "interval holds (wider where the thresholds are few)"
        )
    per_axis = []
    if axis is not None:
        for value in np.unique(axis):
            here = axis == value
            estimate = model.location(here, sigma)
            per_axis.append(
                {"x": float(value), "estimate": None if estimate is None else math.exp(estimate)}
            )
    if axis is None:
        value, ci_low, ci_high = (math.exp(b) for b in (beta[0], low_ci, high_ci))
        prefactor = math.nan
    else:
        value, ci_low, ci_high = beta[1], low_ci, high_ci
        prefactor = math.exp(beta[0] - beta[1] * centre)
    return Fit(
        kind=kind,
        value=value,
        ci_low=ci_low,
        ci_high=ci_high,
        prefactor=prefactor,
        r2=math.nan,
        residual_std=sigma,
        n_points=n,
        n_groups=n,
        n_excluded=0,
        converged=bool(best.success and np.isfinite(value)),
        ci_method="profile",
        window=None,
        message="; ".join(notes),
        n_levels=n_levels,
        resolution=resolution,
        details={**counts, "sigma": sigma, "per_axis": per_axis, "bracket": bracket},
    )


def _log_mass(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``log(Phi(b) - Phi(a))`` for ``a < b`` (either may be infinite), stable in both tails."""
    upper = a > 0  # both in the upper tail: use the mirror image, where Phi is not ~1
    lo, hi = np.where(upper, -b, a), np.where(upper, -a, b)
    log_hi, log_lo = special.log_ndtr(hi), special.log_ndtr(lo)
    gap = log_lo - log_hi  # <= 0
    with np.errstate(divide="ignore"):
        return log_hi + np.where(
            gap > -math.log(2.0), np.log(-np.expm1(gap)), np.log1p(-np.exp(gap))
        )


class _CensoredNormal:
    """Negative log-likelihood of interval-censored normal regression, its gradient, the
    maximum and profile bounds. Parameters ``theta = (beta, log sigma)``."""

    def __init__(self, design: np.ndarray, lo: np.ndarray, hi: np.ndarray, sigma_floor: float):
        self.design, self.lo, self.hi = design, lo, hi
        self.sigma_floor = sigma_floor
        bounds = np.concatenate([lo[np.isfinite(lo)], hi[np.isfinite(hi)]])
        spread = float(np.ptp(bounds)) if bounds.size else 1.0
        self.log_sigma_bounds = (math.log(sigma_floor), math.log(10.0 * spread + 1.0))

    def objective(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        mu = self.design @ theta[:-1]
        sigma = math.exp(theta[-1])
        za, zb = (self.lo - mu) / sigma, (self.hi - mu) / sigma
        log_p = _log_mass(za, zb)
        # d log P / d mu and d log P / d log sigma, from phi(z) / P; infinite z contribute 0.
        with np.errstate(over="ignore", invalid="ignore"):
            fa = np.where(np.isfinite(za), np.exp(-0.5 * za * za - _LOG_SQRT_2PI - log_p), 0.0)
            fb = np.where(np.isfinite(zb), np.exp(-0.5 * zb * zb - _LOG_SQRT_2PI - log_p), 0.0)
            zfa = np.where(np.isfinite(za), za * fa, 0.0)
            zfb = np.where(np.isfinite(zb), zb * fb, 0.0)
        d_mu = (fa - fb) / sigma
        d_log_sigma = zfa - zfb
        gradient = np.concatenate([self.design.T @ d_mu, [d_log_sigma.sum()]])
        return -float(log_p.sum()), -gradient

    def start(self) -> np.ndarray:
        """Least squares on the cells' midpoints (censored ones one cell beyond their bound)."""
        finite = np.isfinite(self.lo) & np.isfinite(self.hi)
        cell = float(np.median(self.hi[finite] - self.lo[finite])) if finite.any() else 1.0
        mid = np.where(
            finite,
            0.5 * (self.lo + self.hi),
            np.where(np.isfinite(self.lo), self.lo + cell, self.hi - cell),
        )
        beta = np.linalg.lstsq(self.design, mid, rcond=None)[0]
        spread = max(float(np.std(mid - self.design @ beta)), 2.0 * self.sigma_floor)
        return np.append(beta, math.log(spread))

    def fit(self, fixed: tuple[int, float] | None = None, start: np.ndarray | None = None):
        """The maximum likelihood (``fixed = (j, v)``: with parameter j held at v), as a scipy
        ``OptimizeResult`` whose ``x`` is the full parameter vector and ``fun`` the minimum."""
        theta0 = self.start() if start is None else start
        bounds = [(None, None)] * (theta0.size - 1) + [self.log_sigma_bounds]
        if fixed is None:
            return optimize.minimize(
                self.objective, theta0, jac=True, method="L-BFGS-B", bounds=bounds
            )
        j, v = fixed
        free = np.arange(theta0.size) != j

        def reduced(theta_free):
            theta = np.insert(theta_free, j, v)
            value, gradient = self.objective(theta)
            return value, gradient[free]

        result = optimize.minimize(
            reduced, theta0[free], jac=True, method="L-BFGS-B",
            bounds=[b for b, keep in zip(bounds, free, strict=True) if keep],
        )  # fmt: skip
        result.x = np.insert(result.x, j, v)
        return result

    def profile_bound(self, best, j: int, drop: float, side: float) -> float:
        """The end, on ``side`` (-1 or +1) of the estimate, of the set of values of parameter
        ``j`` whose profile log-likelihood is within ``drop`` of the maximum (+-inf if the
        data do not bound it within :data:`SEARCH_LIMIT`)."""
        target = best.fun + drop

        def excess(v: float) -> float:
            return self.fit((j, v), start=best.x).fun - target

        # First try near where a quadratic log-likelihood would put the bound (the optimiser's
        # inverse-Hessian estimate), then double the step until the bound is bracketed.
        curvature = float(best.hess_inv.todense()[j, j])
        guess = math.sqrt(2.0 * drop * curvature) if curvature > 0 else 0.05
        inner, step = best.x[j], min(max(guess, 0.01), 1.0)
        while step <= SEARCH_LIMIT:
            outer = best.x[j] + side * step
            if excess(outer) > 0:
                lo, hi = sorted((inner, outer))
                return optimize.brentq(excess, lo, hi, xtol=1e-5)
            inner, step = outer, 2.0 * step
        return side * math.inf

    def flat(self, best, j: int, side: float) -> bool:
        """Whether parameter ``j``'s profile log-likelihood is still within :data:`FLAT` of the
        maximum at :data:`SEARCH_LIMIT` from the estimate on ``side`` (-1 or +1): the maximum
        is then approached at infinity, e.g. when every threshold is censored on one side."""
        far = self.fit((j, best.x[j] + side * SEARCH_LIMIT), start=best.x)
        return far.fun - best.fun < FLAT

    def location(self, members: np.ndarray, sigma: float) -> float | None:
        """The maximum-likelihood location of the observations ``members`` at a fixed sigma, or
        None when they are all censored on one side (the likelihood has no interior maximum)."""
        lo, hi = self.lo[members], self.hi[members]
        if np.isneginf(lo).all() or np.isposinf(hi).all():
            return None
        bounds = np.concatenate([lo[np.isfinite(lo)], hi[np.isfinite(hi)]])
        span = (bounds.min() - 10.0 * sigma - 1.0, bounds.max() + 10.0 * sigma + 1.0)
        result = optimize.minimize_scalar(
            lambda mu: -float(_log_mass((lo - mu) / sigma, (hi - mu) / sigma).sum()),
            bounds=span,
            method="bounded",
        )
        return float(result.x)
