"""Fits of the empirical laws sdyn compares with theorems, each with a confidence interval.

One public entry per kind of fit, all returning a :class:`Fit`:

* :func:`fit_power_law` (``power_law``): ``y ~ prefactor * x**exponent`` across a sweep of
  ``x``, several seeds per ``x``; interval: OLS's heteroscedasticity-consistent (HC3) t
  interval, or, for curves (``clustered``), the cluster-robust t interval over whole curves;
* :func:`fit_threshold` (``threshold`` / ``threshold_power_law``): thresholds read on a grid,
  as interval-censored data (from :func:`threshold_intervals`), optionally as a power law in
  an axis; interval: profile likelihood;
* :func:`fit_geometric_rate` (``geometric_rate``): ``y_t ~ prefactor * rate**t`` on an
  automatically chosen window of one or more training curves, pooled or run by run;
  interval: over whole curves as for ``clustered`` power laws, or, run by run, the Student t
  interval of the mean log rate;
* :func:`fit_ratio` (``ratio``): the typical ratio ``y / reference`` of paired measurements;
  interval: the Student t interval of the mean log ratio;
* :func:`fit_exceedance` (``exceedance``): the fraction of runs above a per-run bound;
  interval: Clopper-Pearson.

Too little data never raises: the fit comes back with ``value`` NaN, ``converged=False`` and a
message, which :func:`sdyn.analysis.verdict.verdict` reports as "inconclusive". Malformed input
(mismatched lengths, bad options) raises ``ValueError``. ``Fit.ci_method`` records where the
interval came from (``ols``: statsmodels' t interval, clustered or not, :mod:`~.intervals`;
``profile``, ``clopper-pearson``, or ``none`` when no interval could be computed).
"""

from sdyn.analysis.fits.bound import fit_exceedance
from sdyn.analysis.fits.power_law import fit_power_law
from sdyn.analysis.fits.rate import fit_geometric_rate
from sdyn.analysis.fits.ratio import fit_ratio
from sdyn.analysis.fits.result import Fit
from sdyn.analysis.fits.threshold import fit_threshold, threshold_intervals

__all__ = [
    "Fit",
    "fit_exceedance",
    "fit_geometric_rate",
    "fit_power_law",
    "fit_ratio",
    "fit_threshold",
    "threshold_intervals",
]
