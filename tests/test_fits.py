"""Statistical and edge-case tests of sdyn.analysis.fits.

The coverage tests draw 200 seeded synthetic data sets with a known truth and check that the
point estimate is unbiased, that the 95% interval covers the truth in 90-99% of trials, and
that its mean width is within 0.85-1.2 of the width implied by the estimates' actual spread
(so an interval cannot pass by being uselessly wide).
"""

import json
import math
import types

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from lifelines import LogNormalAFTFitter
from scipy import stats

from sdyn.analysis.fits import (
    Fit,
    fit_exceedance,
    fit_geometric_rate,
    fit_power_law,
    fit_ratio,
    fit_threshold,
    threshold_intervals,
)
from sdyn.analysis.kinds import ThresholdPowerLaw
from sdyn.analysis.verdict import judge, verdict

TRIALS = 200


def _power_law_data(rng, exponent=1.7, prefactor=3.0, sigma=0.2, seeds=5):
    """6 x values over 1.5 decades, `seeds` runs each, lognormal noise."""
    x = np.repeat(np.geomspace(10.0, 10.0**2.5, 6), seeds)
    groups = np.tile(np.arange(seeds), 6)
    y = prefactor * x**exponent * np.exp(sigma * rng.normal(size=x.size))
    return x, y, groups


def _coverage(estimates, lows, highs, truth):
    """Coverage of `truth`, mean estimate, and mean CI width over that of a normal 95% CI.

    The width ratio uses the estimates' spread across trials as the true standard error, so it
    catches intervals that cover by being too wide as well as ones that are too narrow.
    """
    estimates, lows, highs = np.asarray(estimates), np.asarray(lows), np.asarray(highs)
    coverage = float(np.mean((lows <= truth) & (truth <= highs)))
    width_ratio = float(np.mean(highs - lows) / (2 * 1.96 * np.std(estimates)))
    return coverage, float(np.mean(estimates)), width_ratio


def test_power_law_estimate_unbiased_and_ci_covers():
    estimates, lows, highs, methods = [], [], [], set()
    for trial in range(TRIALS):
        x, y, groups = _power_law_data(np.random.default_rng(trial))
        fit = fit_power_law(x, y, groups)
        estimates.append(fit.exponent)
        lows.append(fit.ci_low)
        highs.append(fit.ci_high)
        methods.add(fit.ci_method)
    coverage, mean, width = _coverage(estimates, lows, highs, 1.7)
    print(f"power law: mean exponent {mean:.4f}, coverage {coverage:.3f}, width {width:.2f}")
    assert abs(mean - 1.7) < 0.05
    assert 0.90 <= coverage <= 0.99
    assert 0.85 <= width <= 1.2
    assert methods == {"ols"}


def _geometric_data(rng, rate=0.9, groups=10, sigma=0.1):
    """Curves flat until t = 15 (a transient), geometric until the floor 1e-4 (t ~ 87)."""
    steps = np.arange(120)
    t = np.tile(steps, groups)
    group = np.repeat(np.arange(groups), steps.size)
    prefactor = np.exp(0.1 * rng.normal(size=groups))[group]
    clean = np.maximum(prefactor * rate ** np.maximum(t, 15), 1e-4)
    return t, clean * np.exp(sigma * rng.normal(size=t.size)), group


def test_geometric_rate_window_excludes_transient_and_floor_and_ci_covers():
    estimates, lows, highs, windows = [], [], [], []
    for trial in range(TRIALS):
        t, y, groups = _geometric_data(np.random.default_rng(trial))
        fit = fit_geometric_rate(t, y, groups)
        assert fit.ci_method == "ols" and fit.n_groups == 10  # clustered t
        estimates.append(fit.rate)
        lows.append(fit.ci_low)
        highs.append(fit.ci_high)
        windows.append(fit.window)
    coverage, mean, width = _coverage(estimates, lows, highs, 0.9)
    start, end = np.median(windows, axis=0)
    print(f"geometric: mean rate {mean:.5f}, coverage {coverage:.3f}, width {width:.2f}")
    # One estimate's standard deviation is ~1.6e-4: the mean of 200 is within a few 1e-5.
    assert abs(mean - 0.9) < 5e-5
    assert 0.90 <= coverage <= 0.99
    assert 0.85 <= width <= 1.2
    # The geometric stretch runs from t = 15 to t ~ 87, where the floor takes over.
    assert 14 <= start <= 17 and 85 <= end <= 88


@pytest.mark.parametrize("groups", [2, 3, 5])
def test_few_groups_get_an_interval_as_wide_as_their_spread_allows(groups):
    """From the evidence rules' least (2 runs for a rate, 3 pairs for a ratio), a bootstrap
    over groups covered 61% (2 groups), 81% (3), 90-92% (5) and 93% (10) of trials: resampling
    few cannot reach past the data. The pooled rate's interval is clustered by group, and a
    geometric mean's (a ratio, a per-run rate) the Student t interval of its logs."""
    rng = np.random.default_rng(groups)
    steps = np.arange(60.0)
    t, group = np.tile(steps, groups), np.repeat(np.arange(groups), steps.size)
    covered = {"pooled": 0, "per run": 0, "ratio": 0}
    for _ in range(TRIALS):
        slopes = np.log(0.95) + rng.normal(0, 0.005, groups)  # each run's own rate
        log_y = rng.normal(0, 0.3, groups)[group] + slopes[group] * t
        y = np.exp(log_y + rng.normal(0, 0.02, t.size))
        for name, per_group in (("pooled", False), ("per run", True)):
            fit = fit_geometric_rate(t, y, group, per_group=per_group)
            assert fit.ci_method == "ols"
            covered[name] += fit.ci_low <= 0.95 <= fit.ci_high
        ratio = fit_ratio(np.exp(rng.normal(0, 0.1, groups)), np.ones(groups))
        assert ratio.ci_method == "ols"
        covered["ratio"] += ratio.ci_low <= 1.0 <= ratio.ci_high
    coverage = {name: hits / TRIALS for name, hits in covered.items()}
    print(f"{groups} groups: coverage {coverage}")
    assert all(0.90 <= c <= 0.995 for c in coverage.values()), coverage


@pytest.mark.parametrize("seeds", [2, 5])
def test_a_power_laws_interval_allows_for_a_spread_that_differs_between_x(seeds):
    """The seeds' spread grows 7-fold over the x values: the HC3 interval covers; the bootstrap
    stratified by x covered 90-92% of such trials at 5-10 seeds per x (the 95% level)."""
    covered, trials = 0, 2 * TRIALS  # no resampling: cheap, and a narrower coverage estimate
    sigma = np.repeat(np.linspace(0.05, 0.35, 6), seeds)
    for trial in range(trials):
        x, y, groups = _power_law_data(np.random.default_rng(trial), sigma=sigma, seeds=seeds)
        fit = fit_power_law(x, y, groups)
        assert fit.ci_method == "ols"
        covered += fit.ci_low <= 1.7 <= fit.ci_high
    print(f"{seeds} seeds per x: coverage {covered / trials:.3f}")
    assert 0.93 <= covered / trials <= 0.99


@pytest.mark.parametrize(
    ("slope_sd", "offset_sd"), [(0.05, 0.0), (0.0, 0.3)], ids=["slopes-differ", "offsets-differ"]
)
def test_a_power_law_on_curves_is_clustered_by_curve(slope_sd, offset_sd):
    """Steps of one curve are not replicates: stratified by step, the interval covered 86-88%
    where the curves' slopes differ and was 30 times too wide where only their offsets do."""
    rng = np.random.default_rng(7)
    steps = np.unique(np.round(np.geomspace(100, 10_000, 40)))
    x, curve = np.tile(steps, 10), np.repeat(np.arange(10), steps.size)
    estimates, lows, highs = [], [], []
    for _ in range(TRIALS // 2):
        slopes = -0.5 + slope_sd * rng.normal(size=10)
        log_y = rng.normal(0, offset_sd, 10)[curve] + slopes[curve] * np.log(x)
        y = np.exp(log_y + 0.01 * rng.normal(size=x.size))
        fit = fit_power_law(x, y, curve, clustered=True)
        estimates.append(fit.exponent)
        lows.append(fit.ci_low)
        highs.append(fit.ci_high)
    coverage, _, width = _coverage(estimates, lows, highs, -0.5)
    assert coverage >= 0.9 and 0.8 <= width <= 1.5, (coverage, width)


def test_many_curves_keep_the_cluster_robust_t_interval():
    """Changed rule (2026-12-07): from 20 curves sdyn bootstrapped whole curves; the
    cluster-robust t interval covered as well at 20-80 curves and better where the slopes are
    heavy-tailed (95-96% against 91-92%, ``benchmarks/coverage.py``), so it is kept at any
    number of curves: for 25 curves, exactly statsmodels' clustered interval."""
    rng = np.random.default_rng(3)
    steps = np.arange(1.0, 41.0)
    x, curve = np.tile(steps, 25), np.repeat(np.arange(25), steps.size)
    slopes = -0.5 + 0.05 * rng.standard_t(3, 25)
    y = np.exp(slopes[curve] * np.log(x) + 0.01 * rng.normal(size=x.size))
    ols = sm.OLS(np.log(y), sm.add_constant(np.log(x))).fit()
    expected = ols.get_robustcov_results("cluster", groups=curve, use_t=True).conf_int(0.05)[1]
    fit = fit_power_law(x, y, curve, clustered=True)
    assert fit.ci_method == "ols" and fit.n_groups == 25
    assert (fit.ci_low, fit.ci_high) == pytest.approx(tuple(expected), rel=1e-12)
    rates = np.exp(-0.05 + 0.005 * rng.standard_t(3, 25))
    y = rates[curve] ** x * np.exp(0.01 * rng.normal(size=x.size))
    fit = fit_geometric_rate(x, y, curve)
    inside = (x >= fit.window[0]) & (x <= fit.window[1])
    ols = sm.OLS(np.log(y[inside]), sm.add_constant(x[inside])).fit()
    clustered = ols.get_robustcov_results("cluster", groups=curve[inside], use_t=True)
    expected = np.exp(clustered.conf_int(0.05)[1])
    assert fit.ci_method == "ols" and fit.n_groups == 25
    assert (fit.ci_low, fit.ci_high) == pytest.approx(tuple(expected), rel=1e-12)


def test_geometric_rate_data_needs_the_window():
    # The same data fitted over all steps is far off: the window selection is what works.
    t, y, _ = _geometric_data(np.random.default_rng(0))
    naive_rate = math.exp(np.polyfit(t, np.log(y), 1)[0])
    assert abs(naive_rate - 0.9) > 0.02
    assert abs(fit_geometric_rate(t, y).rate - 0.9) < 1e-3


def test_geometric_rate_needs_three_distinct_steps_in_its_window():
    # Ten curves seen at t = 11 and 13 only (the rest at a floor): 20 points, but a line through
    # two values of t says nothing of a geometric law.
    groups = np.repeat(np.arange(10), 2)
    t = np.tile([11.0, 13.0], 10)
    y = np.tile([0.5, 1e-6], 10) * np.geomspace(1, 2, 20)
    fit = fit_geometric_rate(t, y, groups)
    assert not fit.converged and "fewer than 3 distinct t" in fit.message
    # With a third step the same curves are fitted, over all three.
    t3 = np.tile([11.0, 12.0, 13.0], 10)
    y3 = np.tile([0.5, 0.5e-3, 1e-6], 10) * np.repeat(np.geomspace(1, 2, 10), 3)
    fit3 = fit_geometric_rate(t3, y3, np.repeat(np.arange(10), 3))
    assert fit3.converged and fit3.window == (11.0, 13.0)


def test_geometric_rate_single_group_uses_ols_interval():
    t, y, groups = _geometric_data(np.random.default_rng(1), groups=1)
    fit = fit_geometric_rate(t, y, groups)
    assert fit.ci_method == "ols" and fit.n_groups == 1
    inside = (t >= fit.window[0]) & (t <= fit.window[1])
    ols = sm.OLS(np.log(y[inside]), sm.add_constant(t[inside].astype(float))).fit()
    low, high = np.exp(ols.conf_int(alpha=0.05)[1])
    assert fit.ci_low == pytest.approx(low) and fit.ci_high == pytest.approx(high)
    assert fit.rate == pytest.approx(math.exp(ols.params[1]))
    assert fit.r2 == pytest.approx(ols.rsquared)


def test_geometric_rate_floor_and_bad_points_are_excluded():
    t = np.arange(40.0)
    y = 2.0 * 0.8**t
    y[[3, 5, 7]] = [np.nan, np.inf, -1.0]
    with_floor = fit_geometric_rate(t, y, floor=1e-3)
    # 3 bad rows + the rows with 2 * 0.8**t <= 1e-3, i.e. t >= 35 (5 rows).
    assert with_floor.n_excluded == 3 + 5
    assert with_floor.window[1] <= 34
    assert with_floor.rate == pytest.approx(0.8)
    assert "8 points excluded" in with_floor.message


GRID = 2.0 ** np.arange(6, 12)  # widths 64 ... 2048, ratio 2


def _threshold_sweep(rng, alpha=1.5, sigma=0.3, seeds=5, grid=GRID):
    """A width sweep: per n in 8 ... 128 and seed, m*(n) = 2 n^alpha e^(sigma eps), and the
    success margin m* / m read on ``grid``; returns its threshold intervals with column n.

    With the default grid about 18% of the thresholds fall below it and 18% above."""
    frames = []
    for n in 2.0 ** np.arange(3, 8):
        for seed in range(seeds):
            m_star = 2.0 * n**alpha * math.exp(sigma * rng.standard_normal())
            cells = threshold_intervals(grid, m_star / grid, 1.0)
            frames.append(cells.assign(n=n, group=seed))
    return pd.concat(frames, ignore_index=True)


def _threshold_coverage(trials, sigma, alpha=1.5):
    fits = [
        fit_threshold(*_columns_of(_threshold_sweep(np.random.default_rng(k), alpha, sigma)))
        for k in range(trials)
    ]
    for fit in fits:
        assert fit.kind == "threshold_power_law" and fit.ci_method == "profile" and fit.converged
        assert fit.ci_high - fit.ci_low > 0.5 * fit.resolution  # never a near-point interval
    return _coverage([f.value for f in fits], [f.ci_low for f in fits],
                     [f.ci_high for f in fits], alpha)  # fmt: skip


def _columns_of(cells):
    return cells["low"], cells["high"], cells["n"]


def test_censored_threshold_exponent_unbiased_and_ci_covers():
    # ~35% of the thresholds censored (half on each side), the rest snapped to a 2x grid.
    censored = np.mean(
        [(_threshold_sweep(np.random.default_rng(k))["censored"] != "").mean() for k in range(20)]
    )
    assert 0.25 <= censored <= 0.45
    coverage, mean, width = _threshold_coverage(TRIALS, sigma=0.3)
    print(f"censored threshold: mean exponent {mean:.4f}, coverage {coverage:.3f}, width {width}")
    assert abs(mean - 1.5) < 0.03
    assert 0.90 <= coverage <= 0.99
    assert 0.85 <= width <= 1.3


def test_grid_snapped_thresholds_with_little_noise_keep_an_honest_interval():
    # sigma 0.05 against grid cells of log 2 = 0.69: the grid, not the noise, limits what the
    # data say. A bootstrap of interpolated thresholds collapses here; the likelihood of the
    # intervals does not.
    coverage, mean, _ = _threshold_coverage(100, sigma=0.05)
    print(f"snapped threshold: mean exponent {mean:.4f}, coverage {coverage:.3f}")
    assert abs(mean - 1.5) < 0.03
    assert 0.88 <= coverage <= 1.0


def test_thresholds_on_one_line_give_the_slopes_the_grid_allows():
    # Every threshold sits in the cell its line puts it in, with no noise: sigma is not
    # identified and the interval is the set of slopes whose line passes through every cell.
    n = np.repeat([8.0, 16.0, 32.0, 64.0], 3)
    m_star = 3.0 * n**1.5
    cells = threshold_intervals(np.tile(GRID, n.size), np.concatenate(
        [m / GRID for m in m_star]), 1.0, np.repeat(np.arange(n.size), GRID.size))  # fmt: skip
    fit = fit_threshold(cells["low"], cells["high"], n)
    assert "fits one line within its grid cell" in fit.message
    assert fit.ci_low < 1.5 < fit.ci_high
    # The cells are log 2 wide over log(64 / 8): slopes within about 1/3 of 1.5 fit them all.
    assert 0.2 < fit.ci_high - fit.ci_low < 1.0


def test_a_law_censored_on_one_side_is_unbounded_there():
    # Every threshold is above the grid at the largest n and below it at the smallest: the
    # data bound the exponent from below only at one end... here from neither, once all are
    # censored: the interval is infinite and a verdict can only be inconclusive.
    n = np.repeat([8.0, 16.0, 32.0, 64.0], 3)
    fit = fit_threshold(np.zeros(n.size), np.full(n.size, 10.0), n)
    assert math.isinf(fit.ci_low) and math.isinf(fit.ci_high)
    # The likelihood is maximal all the way out: where the optimiser stopped is no estimate.
    assert math.isnan(fit.value) and math.isnan(fit.prefactor)
    assert "no estimate" in fit.message
    assert verdict(fit, theory=2.0, direction="<=")[0] == "inconclusive"


@pytest.mark.parametrize(
    ("low", "high", "axis", "unbounded_side"),
    [
        # Below the grid at n = 8, above it at n = 16: any slope above 1 fits every seed.
        ([0, 0, 4, 4], [2, 2, math.inf, math.inf], [8, 8, 16, 16], "+inf"),
        # Right-censored lambda-thresholds spanning 32 decades (a relu sweep): the maximum
        # runs off so far that exp(prefactor) overflowed (OverflowError in the report).
        ([1.8e-2, 0.14, 3.9e-34, 6.5e-3], [math.inf] * 4, [8, 8, 16, 16], "+inf"),
        # No axis, every seed below the grid: the typical threshold goes to 0.
        ([0, 0, 0, 0], [2, 2, 2, 2], None, "0"),
    ],
)
def test_a_likelihood_without_a_peak_gives_no_estimate(low, high, axis, unbounded_side):
    """No estimate, only an interval: inconclusive, with the fit's message. Since issue 41 the
    judgment (``verdict.judge``: convergence, the kind's evidence) reads the fit, and
    ``verdict()`` only its interval, so the reason reads "fit did not converge: ..." (it read
    "no fit: ...")."""
    fit = fit_threshold(low, high, axis)
    assert math.isnan(fit.value) and not fit.converged
    assert f"goes to {unbounded_side}" in fit.message or f"and {unbounded_side}" in fit.message
    assert fit.ci_low < fit.ci_high and not (math.isnan(fit.ci_low) or math.isnan(fit.ci_high))
    claim, _, _ = ThresholdPowerLaw.example()
    assert judge(claim, fit, 2.0) == ("inconclusive", f"fit did not converge: {fit.message}")


def test_fit_threshold_matches_lifelines_log_normal_aft():
    cells = _threshold_sweep(np.random.default_rng(3))
    fit = fit_threshold(*_columns_of(cells))
    frame = pd.DataFrame(
        {"lower": cells["low"].replace(0.0, 1e-300), "upper": cells["high"],
         "log_n": np.log(cells["n"])}
    )  # fmt: skip
    reference = LogNormalAFTFitter().fit_interval_censoring(frame, "lower", "upper")
    assert fit.value == pytest.approx(reference.params_.loc[("mu_", "log_n")], rel=1e-5)
    sigma = math.exp(reference.params_.loc[("sigma_", "Intercept")])
    assert fit.residual_std == pytest.approx(sigma, rel=1e-5)
    assert fit.prefactor == pytest.approx(
        math.exp(reference.params_.loc[("mu_", "Intercept")]), rel=1e-4
    )


def test_truncating_the_grid_keeps_the_estimate_consistent():
    # Cutting the grid turns interval-censored thresholds into censored ones; their
    # likelihood keeps the information that is left, so the intervals overlap.
    for k in range(10):
        rng = np.random.default_rng(k)
        full = _threshold_sweep(rng, grid=2.0 ** np.arange(2, 16))
        narrow = _threshold_sweep(np.random.default_rng(k), grid=2.0 ** np.arange(7, 10))
        a, b = fit_threshold(*_columns_of(full)), fit_threshold(*_columns_of(narrow))
        assert (narrow["censored"] != "").mean() > 0.4
        assert max(a.ci_low, b.ci_low) <= min(a.ci_high, b.ci_high)


def test_threshold_intervals_bracket_and_censor():
    x = np.array([1.0, 10.0, 100.0, 1000.0])
    curves = {
        "between": (x / 20.0) ** -1.0,  # succeeds from x = 100 on: (10, 100]
        "low": np.full(4, 0.5),  # succeeds already at x = 1: left-censored (0, 1]
        "high": np.full(4, 2.0),  # never succeeds: right-censored (1000, inf)
        "relapse": np.array([0.5, 2.0, 0.5, 0.5]),  # the last failure decides: (10, 100]
        "nan": np.array([2.0, np.nan, 0.5, 0.5]),  # NaN (a diverged run) fails
    }
    frame = threshold_intervals(np.tile(x, len(curves)), np.concatenate(list(curves.values())),
                                1.0, np.repeat(list(curves), 4))  # fmt: skip
    table = frame.set_index("group")
    assert list(frame.columns) == ["group", "low", "high", "censored", "non_monotone"]
    assert list(frame["group"]) == list(curves)
    assert tuple(table.loc["between", ["low", "high"]]) == (10.0, 100.0)
    assert tuple(table.loc["low", ["low", "high"]]) == (0.0, 1.0)
    assert table.loc["high", "low"] == 1000.0 and math.isinf(table.loc["high", "high"])
    assert tuple(table.loc["relapse", ["low", "high"]]) == (10.0, 100.0)
    assert tuple(table.loc["nan", ["low", "high"]]) == (10.0, 100.0)
    assert list(table["censored"]) == ["", "left", "right", "", ""]
    assert list(table["non_monotone"]) == [False, False, False, True, False]


def test_the_thresholds_table_shows_each_ladder_width_whole():
    # 4 significant digits once printed the ladder's 32768 as 32770, a width no run had.
    claim = ThresholdPowerLaw.example()[0]
    points = pd.DataFrame(
        {"x": [1024.0], "seed": [0], "low": [23170.0], "high": [32768.0]}
        | {"censored": [""], "non_monotone": [False]}
    )
    row = claim.details(types.SimpleNamespace(points=points)).splitlines()[-1]
    assert [cell.strip() for cell in row.strip("|").split("|")][:4] == [
        "1024",
        "0",
        "23170",
        "32768",
    ]


def test_typical_threshold_without_an_axis():
    # 20 seeds whose threshold is 2 e^(0.3 eps), read on a 2x grid from 1 to 32.
    grid = GRID / 64
    m_star = 2.0 * np.exp(0.3 * np.random.default_rng(4).normal(size=20))
    values = np.concatenate([m / grid for m in m_star])
    cells = threshold_intervals(np.tile(grid, 20), values, 1.0, np.repeat(np.arange(20), grid.size))
    fit = fit_threshold(cells["low"], cells["high"])
    assert fit.kind == "threshold" and fit.ci_low < 2.0 < fit.ci_high
    assert fit.ci_low < fit.value < fit.ci_high


@pytest.mark.parametrize(
    ("exceeding", "runs", "expected"),
    [(0, 36, "consistent"), (0, 20, "inconclusive"), (2, 36, "inconclusive"), (9, 30, "violated")],
)
def test_a_bound_holds_with_probability_delta(exceeding, runs, expected):
    # Per run, measured / bound; the theorem allows a fraction delta = 0.1 of runs above 1.
    ratio = np.r_[np.full(exceeding, 2.0), np.full(runs - exceeding, 1e-3), np.nan]
    fit = fit_exceedance(ratio)
    exact = stats.binomtest(exceeding, runs).proportion_ci(method="exact")
    assert fit.value == exceeding / runs and fit.n_points == runs and fit.n_excluded == 1
    assert (fit.ci_low, fit.ci_high) == pytest.approx((exact.low, exact.high))
    assert fit.details["exceeding"] == exceeding
    assert fit.details["max_ratio"] == (2.0 if exceeding else 1e-3)
    assert verdict(fit, theory=0.1, direction="<=")[0] == expected


def test_too_little_data_gives_nan_fit_not_an_error():
    too_few = [
        fit_power_law([1.0, 2.0], [1.0, 4.0]),
        fit_power_law([5.0, 5.0, 5.0], [1.0, 2.0, 3.0]),  # one distinct x
        fit_power_law([1.0, 2.0, 3.0, 4.0], [1.0, np.nan, -2.0, 0.0]),  # 1 usable row
        fit_geometric_rate([0, 1, 2], [1.0, 0.5, 0.25]),
        fit_threshold([1.0, 10.0, 0.0], [2.0, 20.0, 1.0], [8.0, 16.0, 32.0]),  # 3 < 4 needed
    ]
    for fit in too_few:
        assert not fit.converged
        assert math.isnan(fit.value) and math.isnan(fit.ci_low) and math.isnan(fit.ci_high)
        assert fit.ci_method == "none"
        assert fit.message
    assert "only 2 usable points (need 3)" in too_few[0].message
    assert "fewer than 2 distinct x" in too_few[1].message
    assert too_few[2].n_excluded == 3
    assert "too few to fit (need 2 distinct axis values and 4 thresholds)" in too_few[4].message


def test_bad_points_are_excluded_and_counted():
    x, y, groups = _power_law_data(np.random.default_rng(5))
    clean = fit_power_law(x, y, groups)
    bad_x = np.concatenate([x, [np.nan, np.inf, -1.0, 0.0, 50.0, 50.0, 50.0]])
    bad_y = np.concatenate([y, [1.0, 1.0, 1.0, 1.0, np.nan, -np.inf, 0.0]])
    bad_groups = np.concatenate([groups, np.zeros(7, dtype=int)])
    dirty = fit_power_law(bad_x, bad_y, bad_groups)
    assert dirty.n_excluded == 7 and dirty.n_points == clean.n_points == 30
    assert "7 points excluded" in dirty.message
    assert (dirty.value, dirty.ci_low, dirty.ci_high) == (clean.value, clean.ci_low, clean.ci_high)


def test_point_fit_matches_statsmodels_ols():
    x, y, groups = _power_law_data(np.random.default_rng(6))
    fit = fit_power_law(x, y, groups)
    ols = sm.OLS(np.log(y), sm.add_constant(np.log(x))).fit()
    assert fit.exponent == pytest.approx(ols.params[1])
    assert fit.prefactor == pytest.approx(math.exp(ols.params[0]))
    assert fit.r2 == pytest.approx(ols.rsquared)
    assert fit.residual_std == pytest.approx(math.sqrt(ols.mse_resid))
    assert fit.n_groups == 5 and fit.converged


def test_the_interval_is_statsmodels_hc3_and_clusters_repeated_cells():
    rng = np.random.default_rng(8)
    x = np.geomspace(1.0, 100.0, 8)
    y = 2.0 * x**-0.5 * np.exp(0.1 * rng.normal(size=x.size))
    fit = fit_power_law(x, y)
    hc3 = sm.OLS(np.log(y), sm.add_constant(np.log(x))).fit(cov_type="HC3", use_t=True)
    assert fit.ci_method == "ols"
    assert (fit.ci_low, fit.ci_high) == pytest.approx(tuple(hc3.conf_int(alpha=0.05)[1]))
    # The same rows twice under one seed label are not new replicates: the interval is the
    # same (counted as replicates, it would shrink by about sqrt(2)).
    twice = fit_power_law(np.r_[x, x], np.r_[y, y], np.zeros(2 * x.size))
    assert (twice.ci_low, twice.ci_high) == pytest.approx((fit.ci_low, fit.ci_high))
    # A single row at one of two x has leverage 1: HC3 is undefined, the classic t is used.
    lone = fit_power_law([1.0, 1.0, 2.0], [1.0, 1.1, 0.5])
    assert np.isfinite(lone.ci_low) and "HC3 interval is not finite" in lone.message


def test_identical_replicates_give_a_zero_width_interval():
    x = np.repeat([1.0, 10.0, 100.0], 5)
    fit = fit_power_law(x, 5.0 * x**2.0)
    assert fit.ci_method == "ols"
    assert fit.value == pytest.approx(2.0)
    assert fit.ci_low == pytest.approx(2.0) and fit.ci_high == pytest.approx(2.0)


def test_as_dict_is_json_serialisable():
    x, y, groups = _power_law_data(np.random.default_rng(9))
    t, y_t, g_t = _geometric_data(np.random.default_rng(9), groups=3)
    cells = _threshold_sweep(np.random.default_rng(9))
    fits = [
        fit_power_law(x, y, groups),
        fit_geometric_rate(t, y_t, g_t),
        fit_threshold(*_columns_of(cells)),
        fit_power_law([1.0], [1.0]),
    ]
    for fit in fits:
        data = json.loads(json.dumps(fit.as_dict()))
        assert set(data) == {f.name for f in Fit.__dataclass_fields__.values()}
        assert data["kind"] == fit.kind and isinstance(data["n_points"], int)
    assert json.loads(json.dumps(fits[1].as_dict()))["window"] == list(fits[1].window)


def test_malformed_input_raises():
    """Changed rule (issue 41): ``Fit.kind`` and ``ci_method`` accept any non-empty string (a
    plugin kind's own fit); only an empty one is refused (an unknown kind was)."""
    with pytest.raises(ValueError, match="equal lengths"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="equal lengths"):
        fit_geometric_rate([0, 1, 2, 3], [1.0, 0.5, 0.25, 0.125], groups=[0, 1])
    with pytest.raises(ValueError, match="confidence"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], confidence=95)
    with pytest.raises(ValueError, match="r2_min"):
        fit_geometric_rate([0, 1, 2, 3], [1.0, 0.5, 0.25, 0.125], r2_min=0.0)
    with pytest.raises(ValueError, match="positive"):
        threshold_intervals([0.0, 1.0], [2.0, 0.5], 1.0)
    with pytest.raises(ValueError, match="low < high"):
        fit_threshold([2.0, 1.0, 1.0, 1.0], [1.0, 2.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError, match="1-D"):
        fit_power_law(np.ones((2, 2)), np.ones((2, 2)))
    assert Fit("slope", 1, 0, 2, 1, 1, 0, 3, 1, 0, True, "exact", None, "").kind == "slope"
    with pytest.raises(ValueError, match="kind"):
        Fit("", 1, 0, 2, 1, 1, 0, 3, 1, 0, True, "ols", None, "")
    with pytest.raises(ValueError, match="ci_method"):
        Fit("slope", 1, 0, 2, 1, 1, 0, 3, 1, 0, True, "", None, "")


def test_threshold_intervals_accept_a_dataframe_column_of_labels():
    frame = pd.DataFrame({"x": [1.0, 10.0] * 2, "v": [2.0, 0.5, 0.5, 0.5], "seed": list("aabb")})
    out = threshold_intervals(frame["x"], frame["v"], 1.0, frame["seed"])
    assert list(out["group"]) == ["a", "b"] and list(out["censored"]) == ["", "left"]
    # Without groups, all rows are one group labelled 0.
    single = threshold_intervals([1.0, 10.0], [2.0, 0.5], 1.0)
    assert list(single["group"]) == [0] and tuple(single.loc[0, ["low", "high"]]) == (1.0, 10.0)


def test_geometric_window_ties_go_to_the_later_stretch():
    # Two noise-free geometric stretches of equal span, meeting at t = 19: the later one wins.
    t = np.arange(39.0)
    log_y = np.where(t <= 19, t * math.log(0.5), 19 * math.log(0.5) + (t - 19) * math.log(0.9))
    fit = fit_geometric_rate(t, np.exp(log_y))
    assert fit.window == (19.0, 38.0)
    assert fit.rate == pytest.approx(0.9)
    assert fit.r2 == pytest.approx(1.0)


def test_geometric_without_decay_says_so():
    t = np.arange(100.0)
    y = np.exp(0.1 * np.random.default_rng(10).normal(size=t.size))
    fit = fit_geometric_rate(t, y)
    assert "no window reached R^2 >= 0.98" in fit.message
    assert fit.ci_low <= 1.0 <= fit.ci_high


def test_a_bracket_states_the_slopes_the_grid_allows_which_its_interval_holds():
    # 2 n x 2 seeds in one cell each: the grid allows slopes in [0, 2], while the message said
    # the interval ([-5.2, 7.2], its profile likelihood's with df = 1) was that range.
    few = fit_threshold([8, 8, 16, 16], [16, 16, 32, 32], [8, 8, 16, 16])
    assert few.details["bracket"] and "the grid allows slopes in [0, 2]" in few.message
    assert few.ci_low < 0 and few.ci_high > 2  # it holds them, and is wider with few
    n = np.repeat([8.0, 16, 32, 64, 128], 5)
    many = fit_threshold(2 * n, 4 * n, n)
    assert "the grid allows slopes in [0.75, 1.25]" in many.message
    assert many.ci_low == pytest.approx(0.75, abs=1e-3) and many.ci_high == pytest.approx(
        1.25, abs=1e-3
    )
