"""Table-driven tests of sdyn.analysis.verdict.verdict."""

import math

import pytest

from sdyn.analysis.fits import Fit
from sdyn.analysis.verdict import POWER_LIMIT, format_interval, slack, vacuous, verdict

NAN = math.nan

CASES = [
    # (direction, ci_low, ci_high, tolerance, expected verdict, words in the reason)
    ("<=", 1.41, 1.73, 0.0, "consistent", "95% CI [1.41, 1.73] lies at or below the bound 2"),
    ("<=", 1.5, 2.0, 0.0, "consistent", "at or below"),  # touching the bound is allowed
    ("<=", 2.1, 2.5, 0.0, "violated", "95% CI [2.1, 2.5] lies above the bound 2"),
    ("<=", 0.3, 2.5, 0.0, "inconclusive", "95% CI [0.3, 2.5] straddles the bound 2"),
    ("<=", 2.1, 2.5, 0.2, "inconclusive", "straddles the bound 2 (tolerance 0.2)"),
    ("<=", 2.1, 2.15, 0.2, "consistent", "at or below the bound 2 (tolerance 0.2)"),
    (">=", 2.1, 2.5, 0.0, "consistent", "95% CI [2.1, 2.5] lies at or above the bound 2"),
    (">=", 1.41, 1.73, 0.0, "violated", "95% CI [1.41, 1.73] lies below the bound 2"),
    (">=", 1.8, 2.2, 0.0, "inconclusive", "straddles the bound 2"),
    (">=", 1.92, 1.95, 0.1, "consistent", "at or above the bound 2 (tolerance 0.1)"),
    ("==", 1.9, 2.1, 0.0, "consistent", "95% CI [1.9, 2.1] meets the prediction 2"),
    ("==", 2.1, 2.5, 0.0, "violated", "95% CI [2.1, 2.5] lies above the prediction 2"),
    ("==", 1.2, 1.5, 0.0, "violated", "lies below the prediction 2"),
    ("==", 2.1, 2.5, 0.2, "consistent", "meets the prediction 2 +/- 0.2"),
    ("==", 1.2, 1.5, 0.2, "violated", "lies below the prediction 2 +/- 0.2"),
    ("<=", -math.inf, 1.5, 0.0, "consistent", "[-inf, 1.5]"),  # one-sided intervals
    ("<=", 1.5, math.inf, 0.0, "inconclusive", "straddles"),
]


@pytest.mark.parametrize(("direction", "low", "high", "tolerance", "expected", "words"), CASES)
def test_verdict_table(direction, low, high, tolerance, expected, words):
    result, reason = verdict(
        (low + high) / 2, low, high, theory=2.0, direction=direction, tolerance=tolerance
    )
    assert result == expected
    assert words in reason
    assert "2" in reason


@pytest.mark.parametrize("direction", ["<=", ">=", "=="])
@pytest.mark.parametrize(("low", "high"), [(NAN, 1.0), (1.0, NAN)])
def test_a_nan_interval_is_inconclusive(direction, low, high):
    result, reason = verdict(2.0, low, high, theory=2.0, direction=direction)
    assert result == "inconclusive" and "NaN" in reason


@pytest.mark.parametrize("direction", ["<=", ">=", "=="])
def test_a_zero_width_interval_is_never_decisive(direction):
    # A collapsed bootstrap ([1, 1]) far inside (or outside) the bound says nothing.
    for value in (1.0, 5.0):
        result, reason = verdict(value, value, value, theory=2.0, direction=direction)
        assert result == "inconclusive" and "degenerate interval" in reason


def _fit(value, low, high, *, converged=True, n_points=30, n_levels=6, kind="power_law", **kw):
    return Fit(kind, value, low, high, 1.0, 0.99, 0.1, n_points, 5, 0, converged, "BCa",
               None, "", n_levels, **kw)  # fmt: skip


def test_verdict_accepts_a_fit():
    assert verdict(_fit(1.5, 1.4, 1.7), theory=2.0, direction="<=")[0] == "consistent"
    assert verdict(_fit(2.5, 2.4, 2.7), theory=2.0, direction="<=")[0] == "violated"
    nan_fit = _fit(NAN, NAN, NAN, converged=False, n_points=2)
    nan_fit = Fit(**{**nan_fit.as_dict(), "window": None, "message": "only 2 usable points"})
    assert verdict(nan_fit, theory=2.0, direction="<=") == (
        "inconclusive",
        "no fit: only 2 usable points",
    )
    stuck = _fit(1.5, 1.4, 1.7, converged=False)
    assert verdict(stuck, theory=2.0, direction="<=") == ("inconclusive", "fit did not converge")


@pytest.mark.parametrize(
    ("kind", "counts", "words"),
    [
        ("power_law", {"n_levels": 3}, "3 distinct x values with at least 2 seeds each (need 4)"),
        ("threshold_power_law", {"n_levels": 2}, "2 distinct x values"),
        ("ratio", {"n_points": 2}, "2 pairs (need 3)"),
    ],
)
def test_too_little_evidence_is_inconclusive_whatever_the_interval(kind, counts, words):
    # A tight interval far from the bound: decisive if the evidence rule did not apply.
    thin = _fit(5.0, 4.9, 5.1, kind=kind, **counts)
    result, reason = verdict(thin, theory=2.0, direction="<=")
    assert result == "inconclusive" and reason.startswith("too little evidence") and words in reason
    enough = _fit(5.0, 4.9, 5.1, kind=kind, n_levels=4, n_points=3)
    assert verdict(enough, theory=2.0, direction="<=")[0] == "violated"


def test_an_interval_below_the_grids_resolution_is_degenerate():
    # Thresholds read on a 2x grid over one decade resolve slopes of about 0.3; an interval
    # 0.001 wide cannot come from such data.
    narrow = _fit(1.19, 1.1895, 1.1905, kind="threshold_power_law", resolution=0.3)
    assert verdict(narrow, theory=2.0, direction="<=")[0] == "inconclusive"
    assert verdict(_fit(1.19, 1.0, 1.4, resolution=0.3), theory=2.0, direction="<=")[0] == (
        "consistent"
    )


def test_confidence_labels_the_interval():
    _, reason = verdict(1.5, 1.4, 1.6, theory=2.0, direction="<=", confidence=0.9)
    assert reason.startswith("90% CI [1.4, 1.6]")


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((1.0, 0.5, 1.5), {"theory": 2.0, "direction": "<"}, "direction"),
        ((1.0, 0.5, 1.5), {"theory": 2.0, "direction": "le"}, "direction"),
        ((1.0, 0.5, 1.5), {"theory": NAN, "direction": "<="}, "theory"),
        ((1.0, 0.5, 1.5), {"theory": 2.0, "direction": "<=", "tolerance": -0.1}, "tolerance"),
        ((1.0, 1.5, 0.5), {"theory": 2.0, "direction": "<="}, "ci_low"),
        ((1.0,), {"theory": 2.0, "direction": "<="}, "required"),
        ((_fit(1.5, 1.4, 1.7), 1.4, 1.7), {"theory": 2.0, "direction": "<="}, "not both"),
    ],
)
def test_bad_arguments_raise(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        verdict(*args, **kwargs)


def test_bad_direction_raises_even_for_unusable_fits():
    with pytest.raises(ValueError, match="direction"):
        verdict(_fit(NAN, NAN, NAN, converged=False), theory=2.0, direction="=>")


def test_the_degenerate_floor_is_relative_to_the_interval():
    # A ratio of 5e-274 with a 30% wide interval is a real measurement, however small.
    assert verdict(5.06e-274, 4.03e-274, 5.66e-274, theory=1.0, direction="<=")[0] == ("consistent")
    assert verdict(0.0, 0.0, 0.0205, theory=0.1, direction="<=")[0] == "consistent"
    assert verdict(0.0, 0.0, 0.0, theory=0.1, direction="<=")[0] == "inconclusive"


def test_intervals_print_with_the_digits_their_width_needs():
    assert format_interval(0.99993, 1.00001, 1.0) == "1 [0.99993, 1.00001]"
    assert format_interval(0.9016, 1.192, 1.051) == "1.05 [0.902, 1.19]"
    assert format_interval(4.03e-274, 5.66e-274) == "[4.03e-274, 5.66e-274]"
    assert format_interval(-math.inf, 1.5) == "[-inf, 1.5]"
    _, reason = verdict(1.0, 0.99993, 1.00001, theory=1.0, direction="==", tolerance=0.05)
    assert "[0.99993, 1.00001]" in reason


def test_slack_is_the_room_a_bound_leaves_with_its_interval():
    # An exponent 1.05 [0.9, 1.2] under the bound 2 leaves 0.95 [0.8, 1.1]; above a lower
    # bound 0.5 it leaves 0.55 [0.4, 0.7]; a prediction has no slack.
    exponent = _fit(1.05, 0.9, 1.2)
    below = slack(exponent, 2.0, "<=")
    assert below.unit == "difference"
    assert (below.value, below.ci_low, below.ci_high) == pytest.approx((0.95, 0.8, 1.1))
    above = slack(exponent, 0.5, ">=")
    assert (above.value, above.ci_low, above.ci_high) == pytest.approx((0.55, 0.4, 0.7))
    assert slack(exponent, 1.0, "==") is None
    assert slack(_fit(NAN, NAN, NAN), 2.0, "<=") is None
    # A violated bound has negative slack.
    assert slack(_fit(2.5, 2.4, 2.6), 2.0, "<=").ci_high == pytest.approx(-0.4)
    # A ratio's room is a factor: 0.01 [0.005, 0.02] under 1 leaves 100 [50, 200].
    ratio = slack(_fit(0.01, 0.005, 0.02, kind="ratio"), 1.0, "<=")
    assert ratio.unit == "factor" and ratio.text.startswith("x")
    assert (ratio.value, ratio.ci_low, ratio.ci_high) == pytest.approx((100, 50, 200))


def test_a_per_run_bound_far_below_every_ratio_is_vacuous():
    def bound(largest):
        return _fit(0.0, 0.0, 0.02, kind="exceedance", details={"max_ratio": largest})

    loose = slack(bound(2.8e-28), 0.1, "<=")
    assert loose.unit == "decades" and loose.value == pytest.approx(27.55, abs=0.01)
    assert loose.text.startswith("10^27.6")
    assert vacuous(bound(2.8e-28)) and vacuous(bound(0.99 * POWER_LIMIT))
    assert not vacuous(bound(0.416)) and not vacuous(bound(POWER_LIMIT))
    assert slack(bound(0.416), 0.1, "<=").value == pytest.approx(0.381, abs=1e-3)
    assert not vacuous(_fit(1e-9, 0.0, 1e-8))  # only per-run bounds can be vacuous
