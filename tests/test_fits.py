"""Statistical and edge-case tests of sdyn.analysis.fits.

The coverage tests draw 200 seeded synthetic data sets with a known truth and check that the
point estimate is unbiased, that the 95% interval covers the truth in 90-99% of trials, and
that its mean width is within 0.85-1.2 of the width implied by the estimates' actual spread
(so an interval cannot pass by being uselessly wide).
"""

import json
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from sdyn.analysis.fits import (
    Fit,
    fit_geometric_rate,
    fit_power_law,
    fit_threshold,
    threshold_crossings,
)

TRIALS = 200
RESAMPLES = 500


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
        fit = fit_power_law(x, y, groups, n_resamples=RESAMPLES, seed=trial)
        estimates.append(fit.exponent)
        lows.append(fit.ci_low)
        highs.append(fit.ci_high)
        methods.add(fit.ci_method)
    coverage, mean, width = _coverage(estimates, lows, highs, 1.7)
    print(f"power law: mean exponent {mean:.4f}, coverage {coverage:.3f}, width {width:.2f}")
    assert abs(mean - 1.7) < 0.05
    assert 0.90 <= coverage <= 0.99
    assert 0.85 <= width <= 1.2
    assert methods == {"BCa"}


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
        fit = fit_geometric_rate(t, y, groups, n_resamples=RESAMPLES, seed=trial)
        assert fit.ci_method == "BCa" and fit.n_groups == 10
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


def test_geometric_rate_data_needs_the_window():
    # The same data fitted over all steps is far off: the window selection is what works.
    t, y, _ = _geometric_data(np.random.default_rng(0))
    naive_rate = math.exp(np.polyfit(t, np.log(y), 1)[0])
    assert abs(naive_rate - 0.9) > 0.02
    assert abs(fit_geometric_rate(t, y, n_resamples=RESAMPLES).rate - 0.9) < 1e-3


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


def _threshold_data(rng, x0=30.0, spread=0.3, groups=10):
    """value(x) = (x / x0_g)**-1 on a geometric grid, x0_g lognormal around x0."""
    grid = np.geomspace(1.0, 1000.0, 12)
    x = np.tile(grid, groups)
    group = np.repeat(np.arange(groups), grid.size)
    x0_g = x0 * np.exp(spread * rng.normal(size=groups))
    return x, (x / x0_g[group]) ** -1.0, group


def test_threshold_estimate_unbiased_and_ci_covers():
    estimates, lows, highs = [], [], []
    for trial in range(TRIALS):
        x, value, groups = _threshold_data(np.random.default_rng(trial))
        fit = fit_threshold(x, value, 1.0, groups, n_resamples=RESAMPLES, seed=trial)
        assert fit.n_groups == 10 and fit.n_excluded == 0 and fit.ci_method == "BCa"
        estimates.append(fit.value)
        lows.append(fit.ci_low)
        highs.append(fit.ci_high)
    coverage, mean_log, width = _coverage(
        np.log(estimates), np.log(lows), np.log(highs), math.log(30)
    )
    print(
        f"threshold: estimate {math.exp(mean_log):.3f}, coverage {coverage:.3f}, width {width:.2f}"
    )
    assert abs(mean_log - math.log(30.0)) < 0.03
    assert 0.90 <= coverage <= 0.99
    assert 0.85 <= width <= 1.2


def test_threshold_crossings_interpolates_and_censors():
    x = np.array([1.0, 10.0, 100.0, 1000.0])
    curves = {
        "between": (x / 20.0) ** -1.0,  # crosses 1 at x = 20, exactly on log-log
        "low": np.full(4, 0.5),  # succeeds already at x = 1
        "high": np.full(4, 2.0),  # never succeeds
        "relapse": np.array([0.5, 2.0, 0.5, 0.5]),  # the last failure decides: k = 2
        "nan": np.array([2.0, np.nan, 0.5, 0.5]),  # NaN fails; no log line: geometric mean
    }
    frame = threshold_crossings(np.tile(x, len(curves)), np.concatenate(list(curves.values())),
                                1.0, np.repeat(list(curves), 4))  # fmt: skip
    table = frame.set_index("group")
    assert list(frame.columns) == ["group", "threshold", "censored"]
    assert list(frame["group"]) == list(curves)
    assert table.loc["between", "threshold"] == pytest.approx(20.0)
    assert table.loc["low", "threshold"] == 1.0 and table.loc["low", "censored"] == "low"
    assert np.isnan(table.loc["high", "threshold"]) and table.loc["high", "censored"] == "high"
    # Line through (log 10, log 2) and (log 100, log 0.5) hits log 1 at sqrt(10 * 100).
    assert table.loc["relapse", "threshold"] == pytest.approx(math.sqrt(1000.0))
    assert table.loc["nan", "threshold"] == pytest.approx(math.sqrt(1000.0))
    assert list(table["censored"]) == ["", "low", "high", "", ""]


def test_fit_threshold_counts_censored_groups():
    x, value, groups = _threshold_data(np.random.default_rng(3), groups=6)
    value[groups == 0] = 0.1  # censored low
    value[groups == 1] = 10.0  # censored high
    fit = fit_threshold(x, value, 1.0, groups, n_resamples=RESAMPLES)
    assert fit.n_excluded == 2 and fit.n_groups == 4 and fit.n_points == 4
    assert "2 groups censored (1 below x_min, 1 above x_max)" in fit.message
    crossings = threshold_crossings(x, value, 1.0, groups)
    uncensored = crossings.loc[crossings["censored"] == "", "threshold"]
    assert fit.value == pytest.approx(math.exp(np.log(uncensored).mean()))
    assert fit.ci_low < fit.value < fit.ci_high


def test_too_little_data_gives_nan_fit_not_an_error():
    too_few = [
        fit_power_law([1.0, 2.0], [1.0, 4.0]),
        fit_power_law([5.0, 5.0, 5.0], [1.0, 2.0, 3.0]),  # one distinct x
        fit_power_law([1.0, 2.0, 3.0, 4.0], [1.0, np.nan, -2.0, 0.0]),  # 1 usable row
        fit_geometric_rate([0, 1, 2], [1.0, 0.5, 0.25]),
        fit_threshold([1.0, 10.0, 1.0, 10.0], [2.0, 0.5, 0.5, 0.5], 1.0, [0, 0, 1, 1]),
    ]
    for fit in too_few:
        assert not fit.converged
        assert math.isnan(fit.value) and math.isnan(fit.ci_low) and math.isnan(fit.ci_high)
        assert fit.ci_method == "none"
        assert fit.message
    assert "only 2 usable points (need 3)" in too_few[0].message
    assert "fewer than 2 distinct x" in too_few[1].message
    assert too_few[2].n_excluded == 3
    assert "only 1 uncensored groups (need 2)" in too_few[4].message


def test_bad_points_are_excluded_and_counted():
    x, y, groups = _power_law_data(np.random.default_rng(5))
    clean = fit_power_law(x, y, groups, n_resamples=RESAMPLES)
    bad_x = np.concatenate([x, [np.nan, np.inf, -1.0, 0.0, 50.0, 50.0, 50.0]])
    bad_y = np.concatenate([y, [1.0, 1.0, 1.0, 1.0, np.nan, -np.inf, 0.0]])
    bad_groups = np.concatenate([groups, np.zeros(7, dtype=int)])
    dirty = fit_power_law(bad_x, bad_y, bad_groups, n_resamples=RESAMPLES)
    assert dirty.n_excluded == 7 and dirty.n_points == clean.n_points == 30
    assert "7 points excluded" in dirty.message
    assert (dirty.value, dirty.ci_low, dirty.ci_high) == (clean.value, clean.ci_low, clean.ci_high)


def test_point_fit_matches_statsmodels_ols():
    x, y, groups = _power_law_data(np.random.default_rng(6))
    fit = fit_power_law(x, y, groups, n_resamples=RESAMPLES)
    ols = sm.OLS(np.log(y), sm.add_constant(np.log(x))).fit()
    assert fit.exponent == pytest.approx(ols.params[1])
    assert fit.prefactor == pytest.approx(math.exp(ols.params[0]))
    assert fit.r2 == pytest.approx(ols.rsquared)
    assert fit.residual_std == pytest.approx(math.sqrt(ols.mse_resid))
    assert fit.n_groups == 5 and fit.converged


def test_robust_fit_resists_gross_outliers():
    x, y, groups = _power_law_data(np.random.default_rng(7), sigma=0.05)
    # Three runs at the largest x blew up by 1000x (e.g. diverged and logged a huge loss).
    outliers = np.flatnonzero(x == x.max())[:3]
    y[outliers] *= 1e3
    ols = fit_power_law(x, y, groups, n_resamples=RESAMPLES)
    robust = fit_power_law(x, y, groups, robust=True, n_resamples=200)
    assert abs(ols.exponent - 1.7) > 0.3
    assert abs(robust.exponent - 1.7) < 0.1
    assert robust.converged and np.isfinite(robust.ci_low) and np.isfinite(robust.ci_high)


def test_single_replicate_per_x_falls_back_to_ols_interval():
    rng = np.random.default_rng(8)
    x = np.geomspace(1.0, 100.0, 8)
    y = 2.0 * x**-0.5 * np.exp(0.1 * rng.normal(size=x.size))
    fit = fit_power_law(x, y)
    ols = sm.OLS(np.log(y), sm.add_constant(np.log(x))).fit()
    assert fit.ci_method == "ols"
    assert (fit.ci_low, fit.ci_high) == pytest.approx(tuple(ols.conf_int(alpha=0.05)[1]))
    assert "single replicate" in fit.message


def test_identical_replicates_make_the_bootstrap_degenerate():
    # Noise-free replicates: every resample gives the same slope, so BCa and percentile are
    # degenerate and the (zero-width) OLS interval is reported.
    x = np.repeat([1.0, 10.0, 100.0], 3)
    fit = fit_power_law(x, 5.0 * x**2.0, n_resamples=RESAMPLES)
    assert fit.ci_method == "ols" and "bootstrap degenerate" in fit.message
    assert fit.value == pytest.approx(2.0)
    assert fit.ci_low == pytest.approx(2.0) and fit.ci_high == pytest.approx(2.0)


def test_as_dict_is_json_serialisable():
    x, y, groups = _power_law_data(np.random.default_rng(9))
    t, y_t, g_t = _geometric_data(np.random.default_rng(9), groups=3)
    xt, value, gt = _threshold_data(np.random.default_rng(9), groups=4)
    fits = [
        fit_power_law(x, y, groups, n_resamples=RESAMPLES),
        fit_geometric_rate(t, y_t, g_t, n_resamples=RESAMPLES),
        fit_threshold(xt, value, 1.0, gt, n_resamples=RESAMPLES),
        fit_power_law([1.0], [1.0]),
    ]
    for fit in fits:
        data = json.loads(json.dumps(fit.as_dict()))
        assert set(data) == {f.name for f in Fit.__dataclass_fields__.values()}
        assert data["kind"] == fit.kind and isinstance(data["n_points"], int)
    assert json.loads(json.dumps(fits[1].as_dict()))["window"] == list(fits[1].window)


def test_malformed_input_raises():
    with pytest.raises(ValueError, match="equal lengths"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="equal lengths"):
        fit_geometric_rate([0, 1, 2, 3], [1.0, 0.5, 0.25, 0.125], groups=[0, 1])
    with pytest.raises(ValueError, match="confidence"):
        fit_power_law([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], confidence=95)
    with pytest.raises(ValueError, match="r2_min"):
        fit_geometric_rate([0, 1, 2, 3], [1.0, 0.5, 0.25, 0.125], r2_min=0.0)
    with pytest.raises(ValueError, match="positive"):
        threshold_crossings([0.0, 1.0], [2.0, 0.5], 1.0)
    with pytest.raises(ValueError, match="1-D"):
        fit_power_law(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="kind"):
        Fit("slope", 1, 0, 2, 1, 1, 0, 3, 1, 0, True, "BCa", None, "")


def test_threshold_crossings_accepts_a_dataframe_column_of_labels():
    frame = pd.DataFrame({"x": [1.0, 10.0] * 2, "v": [2.0, 0.5, 0.5, 0.5], "seed": list("aabb")})
    out = threshold_crossings(frame["x"], frame["v"], 1.0, frame["seed"])
    assert list(out["group"]) == ["a", "b"] and list(out["censored"]) == ["", "low"]
    # Without groups, all rows are one group labelled 0.
    single = threshold_crossings([1.0, 10.0], [2.0, 0.5], 1.0)
    assert list(single["group"]) == [0] and single["threshold"][0] == pytest.approx(math.sqrt(10))


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
