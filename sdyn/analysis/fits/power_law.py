"""Power laws ``y = prefactor * x**exponent`` across a sweep of ``x``, several seeds per ``x``."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.regression.linear_model import OLS
from statsmodels.robust.norms import HuberT
from statsmodels.robust.robust_linear_model import RLM

from sdyn.analysis.fits.intervals import (
    adjusted,
    bootstrap_ci,
    clustered_slope_ci,
    wald_ci,
)
from sdyn.analysis.fits.result import Fit, check_options, columns, nan_fit

RLM_MAXITER = 50


def fit_power_law(
    x,
    y,
    groups=None,
    *,
    robust: bool = False,
    clustered: bool = False,
    confidence: float = 0.95,
    n_resamples: int = 500,
    seed: int = 0,
    min_points: int = 3,
) -> Fit:
    """Fit ``y = prefactor * x**exponent`` by linear regression of ``log y`` on ``log x``.

    The point fit is statsmodels OLS, or RLM with Huber's T norm when ``robust``; ``r2`` is
    statsmodels' R^2 for OLS and ``1 - SSR / SST`` of the RLM residuals (all points, unweighted)
    for RLM.

    The confidence interval is the slope plus or minus Student t (``n - 2`` degrees of
    freedom) times its heteroscedasticity-consistent (HC3) standard error: the noise between
    seeds may differ from one ``x`` to the next. Rows sharing both ``x`` and a group label are
    one replicate, not independent: the standard error is then that of the fit to the
    ``(x, group)`` cells' means. On lognormal, heavy-tailed (t3) and heteroscedastic noise at 4
    values of ``x`` with 2-20 replicates each, HC3 covered 93.5-96.8% of 1,000 trials a
    setting, the classic t interval 92.3-96.1% (``benchmarks/coverage.py``); a bootstrap
    stratified by ``x`` (BCa with the small-sample corrections of :mod:`~.intervals`) covered
    90-94% (800-3,000 trials). With ``robust``, the bootstrap stratified by ``x`` (RLM inside
    each resample), then the statsmodels interval. Neither sees systematic departures from a
    power law; check ``r2``.

    Args:
        x: 1-D array-like, shape (n,), the swept quantity (e.g. width, tokens), any positive unit.
        y: 1-D array-like, shape (n,), the measured quantity at each ``x``.
        groups: optional 1-D array-like, shape (n,), seed/run label of each row. Only counted
            (``n_groups``) and used to pool duplicate ``(x, group)`` rows. ``None``: every row is
            its own replicate and ``n_groups`` is the largest number of rows sharing one ``x``.
        robust: use RLM (HuberT) instead of OLS, for the point fit and inside the bootstrap.
        clustered: each group is a whole curve (one run's recorded steps, ``x`` the step), not
            one replicate per ``x``: its points are not independent, so the interval is over
            the groups (:func:`~sdyn.analysis.fits.intervals.clustered_slope_ci`: the
            cluster-robust t interval), not by ``x``. Needs ``groups``; not with ``robust``.
        confidence: interval level in (0, 1).
        n_resamples: bootstrap resamples (``robust`` only; each a full RLM fit).
        seed: seed of the bootstrap's random generator (``robust`` only).
        min_points: fewest usable rows for a fit (>= 2).

    Returns:
        A :class:`Fit` of kind ``"power_law"``; ``n_levels`` counts the distinct ``x`` with at
        least 2 replicates. Rows with non-finite or non-positive ``x`` or
        ``y`` are dropped and counted in ``n_excluded``. With fewer than ``min_points`` usable
        rows or fewer than 2 distinct ``x``, ``value`` and the interval are NaN,
        ``converged`` is False and ``message`` says why.

    Raises:
        ValueError: if the inputs are not 1-D of equal length, an option is out of range, or
            ``clustered`` without ``groups`` or with ``robust``.
    """
    if clustered and (groups is None or robust):
        raise ValueError("clustered needs groups (the curves) and is not robust")
    (x, y), groups = columns((x, y), groups, ("x", "y"))
    check_options(confidence, min_points, name="min_points", min_allowed=2)
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
        return nan_fit("power_law", n, n_groups, n_excluded, "; ".join([*notes, reason]))

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
        result = OLS(log_y, design).fit()
        converged = True
        r2 = result.rsquared
    intercept, slope = result.params
    converged = converged and bool(np.isfinite(slope))
    residual_std = math.sqrt(float(result.resid @ result.resid) / (n - 2)) if n > 2 else math.nan

    replicates = _stratum_replicates(log_y, stratum, codes, distinct_x.size)
    resampled = [k for k, r in enumerate(replicates) if r.size >= 2]
    held = [k for k, r in enumerate(replicates) if r.size == 1]
    ci = None
    if clustered:
        ci = clustered_slope_ci(result, codes, confidence, notes)
    elif not robust:
        ci = _heteroscedastic_ci(result, log_x, log_y, stratum, codes, confidence, notes)
    elif resampled:
        data = [adjusted(replicates[k]) for k in resampled]
        fixed_x = distinct_x[held]
        fixed_y = np.array([replicates[k][0] for k in held])
        statistic = _robust_slope(distinct_x[resampled], fixed_x, fixed_y)
        df = sum(r.size - 1 for r in data)
        ci = bootstrap_ci(data, statistic, False, confidence, n_resamples, seed, df, notes)
    else:
        notes.append("every x has a single replicate, nothing to resample")
    if ci is None:
        ci = wald_ci(result, 1, confidence, notes)
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
        n_levels=len(resampled),
    )


def _rlm(endog: np.ndarray, exog: np.ndarray):
    return RLM(endog, exog, M=HuberT()).fit(maxiter=RLM_MAXITER)


def _rlm_converged(result) -> bool:
    # statsmodels stops early on convergence (or on a perfect fit); at maxiter, check the
    # last change of its deviance criterion against its default tolerance.
    history = result.fit_history
    if history["iteration"] < RLM_MAXITER:
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


def _heteroscedastic_ci(
    result,
    log_x: np.ndarray,
    log_y: np.ndarray,
    stratum: np.ndarray,
    codes: np.ndarray | None,
    confidence: float,
    notes: list[str],
) -> tuple[float, float, str] | None:
    """The slope of the OLS fit ``result`` plus or minus Student t times its HC3 standard error;
    where ``(x, group)`` cells hold several rows, the standard error of the fit to the cells'
    means (one replicate each). None where it is not finite (a row of leverage 1: a single
    row at one of two distinct x)."""
    fit = result
    cells = None if codes is None else stratum * (codes.max() + 1) + codes
    if cells is not None and np.unique(cells).size < cells.size:
        means = pd.DataFrame({"x": log_x, "y": log_y}).groupby(cells).mean()
        fit = OLS(means["y"].to_numpy(), np.column_stack([np.ones(len(means)), means["x"]])).fit()
    with np.errstate(divide="ignore", invalid="ignore"):
        se = float(fit.get_robustcov_results("HC3", use_t=True).bse[1])
    half = stats.t.ppf(0.5 + confidence / 2.0, fit.df_resid) * se if fit.df_resid > 0 else np.nan
    if np.isfinite(half):
        return result.params[1] - half, result.params[1] + half, "ols"
    notes.append("the HC3 interval is not finite")
    return None


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
