"""Table-driven tests of sdyn.analysis.verdict.verdict, the standard judgment of a kind's fit
(``judge``: convergence, the kind's evidence rule) and the slacks (a difference, a factor, a
per-run bound's decades)."""

import math

import pytest

from sdyn.analysis.fits import Fit
from sdyn.analysis.kinds import Bound, PairedRatio, PowerLaw, ThresholdPowerLaw
from sdyn.analysis.kinds.bound import POWER_LIMIT
from sdyn.analysis.verdict import VACUOUS, factor_slack, format_interval, judge, slack, verdict

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


@pytest.mark.parametrize(
    ("direction", "expected"),
    [("<=", ("consistent", "violated")), (">=", ("violated", "consistent")),
     ("==", ("violated", "violated"))],
)  # fmt: skip
def test_a_zero_width_interval_is_an_exact_value_compared_as_it_is(direction, expected):
    """A collapsed interval ([1, 1]) inside (or outside) the bound. Changed rule (issue 41,
    :data:`sdyn.analysis.verdict.RESOLUTION`): an interval narrower than float64's resolution
    of its value is the exact value (every run agrees), compared as a value and never called a
    CI; it was "inconclusive" (a degenerate interval)."""
    for value, label in zip((1.0, 5.0), expected, strict=True):
        result, reason = verdict(value, value, value, theory=2.0, direction=direction)
        assert result == label and reason.startswith(f"the exact value {value:g}")
        assert "CI" not in reason
    # Within rounding of the value, an interval is exact too: [1 - 1e-12, 1 + 1e-12].
    result, reason = verdict(1.0, 1 - 1e-12, 1 + 1e-12, theory=2.0, direction=direction)
    assert result == expected[0] and "exact value 1 " in reason


def test_a_one_sided_interval_is_never_an_exact_value():
    # An infinite end (a censored threshold's uninformative side) is as wide as can be: the
    # finite end decides, as for any interval.
    result, reason = verdict(1.0, -math.inf, 1.5, theory=2.0, direction="<=")
    assert (result, reason) == ("consistent", "95% CI [-inf, 1.5] lies at or below the bound 2")
    assert verdict(3.0, 2.5, math.inf, theory=2.0, direction="<=")[0] == "violated"
    assert verdict(3.0, 2.5, math.inf, theory=2.0, direction=">=")[0] == "consistent"


def _fit(value, low, high, *, converged=True, n_points=30, n_levels=6, kind="power_law", **kw):
    return Fit(kind, value, low, high, 1.0, 0.99, 0.1, n_points, 5, 0, converged, "ols",
               None, "", n_levels, **kw)  # fmt: skip


def test_verdict_accepts_a_fit_and_judge_reads_its_convergence():
    """``verdict`` reads a fit's interval only; whether the fit converged is the judgment's
    (:func:`sdyn.analysis.verdict.judge`). A fit without a value is "not measured" before any
    judgment (issue 41: no NaN rows; see test_claims and test_referee), so ``verdict`` only
    names the NaN."""
    assert verdict(_fit(1.5, 1.4, 1.7), theory=2.0, direction="<=")[0] == "consistent"
    assert verdict(_fit(2.5, 2.4, 2.7), theory=2.0, direction="<=")[0] == "violated"
    nan_fit = _fit(NAN, NAN, NAN, converged=False, n_points=2)
    assert verdict(nan_fit, theory=2.0, direction="<=") == (
        "inconclusive",
        "no estimate or interval (NaN)",
    )
    claim, _, _ = PowerLaw.example()
    assert judge(claim, _fit(1.5, 1.4, 1.7), 2.0)[0] == "consistent"
    stuck = _fit(1.5, 1.4, 1.7, converged=False)
    assert judge(claim, stuck, 2.0) == ("inconclusive", "fit did not converge")
    stuck = Fit(**{**stuck.as_dict(), "window": None, "message": "the solver stopped"})
    assert judge(claim, stuck, 2.0) == (
        "inconclusive",
        "fit did not converge: the solver stopped",
    )


@pytest.mark.parametrize(
    ("kind", "counts", "words"),
    [
        (PowerLaw, {"n_levels": 3}, "3 distinct x values with at least 2 seeds each (need 4)"),
        (ThresholdPowerLaw, {"n_levels": 2}, "2 distinct x values"),
        (PairedRatio, {"n_points": 2}, "2 values (need 3)"),
    ],
)
def test_too_little_evidence_is_inconclusive_whatever_the_interval(kind, counts, words):
    """Each kind's own evidence rule (``Claim.evidence``), read by ``judge``."""
    claim, _, _ = kind.example()
    # A tight interval far from the bound: decisive if the evidence rule did not apply.
    thin = _fit(5.0, 4.9, 5.1, **counts)
    result, reason = judge(claim, thin, 2.0)
    assert result == "inconclusive" and reason.startswith("too little evidence") and words in reason
    enough = _fit(5.0, 4.9, 5.1, n_levels=4, n_points=3)
    assert judge(claim, enough, 2.0)[0] == "violated"


def test_an_interval_below_the_grids_resolution_is_degenerate():
    # Thresholds read on a 2x grid over one decade resolve slopes of about 0.3; an interval
    # 0.001 wide cannot come from such data.
    narrow = _fit(1.19, 1.1895, 1.1905, kind="threshold_power_law", resolution=0.3)
    assert verdict(narrow, theory=2.0, direction="<=")[0] == "inconclusive"
    assert verdict(_fit(1.19, 1.0, 1.4, resolution=0.3), theory=2.0, direction="<=")[0] == (
        "consistent"
    )


def test_the_name_labels_the_interval():
    _, reason = verdict(1.5, 1.4, 1.6, theory=2.0, direction="<=", name="90% CI")
    assert reason.startswith("90% CI [1.4, 1.6]")
    _, reason = verdict(1.5, 1.4, 1.6, theory=2.0, direction="<=", name="bracket")
    assert reason.startswith("bracket [1.4, 1.6]")


def test_a_named_interval_is_what_its_kind_calls_it():
    """A plugin kind's zero-width interval that it names a CI is compared as an interval:
    sdyn does not know its runs agree (the reason said "every run agrees to float64
    resolution"). An interval made by a plugin's own method, at no stated level, is named by
    that method, not called a 95% CI."""
    result, reason = verdict(2.0, 2.0, 2.0, theory=2.0, direction="<=", name="95% CI")
    assert (result, reason) == ("consistent", "95% CI [2, 2] lies at or below the bound 2")
    # Above the bound by less than float64 rounding: an exact value meets it, an interval not.
    above = 2.0 * (1 + 1e-12)
    assert verdict(above, above, above, theory=2.0, direction="<=", name="95% CI")[0] == "violated"
    assert verdict(above, above, above, theory=2.0, direction="<=")[0] == "consistent"
    claim, _, _ = PowerLaw.example()
    own = Fit("lsq", 1.5, 1.2, 1.8, 1.0, 0.9, 0.1, 30, 5, 0, True, "jackknife", None, "", 6)
    assert claim.interval_name(own) == "jackknife interval"
    assert judge(claim, own, claim.theory)[1].startswith("jackknife interval [1.2, 1.8]")
    stated = Fit("lsq", 1.5, 1.2, 1.8, 1.0, 0.9, 0.1, 30, 5, 0, True, "jackknife", None, "", 6,
                 details={"confidence": 0.9})  # fmt: skip
    assert claim.interval_name(stated) == "90% CI"


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


def test_the_exact_floor_is_relative_to_the_value():
    """A ratio of 5e-274 with a 30% wide interval is a real measurement, however small, not an
    exact value. Changed rule (issue 41): a zero-width [0, 0] is the exact value 0, compared as
    a value (it was "inconclusive", degenerate)."""
    result, reason = verdict(5.06e-274, 4.03e-274, 5.66e-274, theory=1.0, direction="<=")
    assert result == "consistent" and reason.startswith("95% CI [4.03e-274, 5.66e-274]")
    assert verdict(0.0, 0.0, 0.0205, theory=0.1, direction="<=")[0] == "consistent"
    result, reason = verdict(0.0, 0.0, 0.0, theory=0.1, direction="<=")
    assert result == "consistent" and reason.startswith("the exact value 0 ")
    assert verdict(0.0, 0.0, 0.0, theory=-0.1, direction="<=")[0] == "violated"


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
    # A ratio's room is a factor (the ratio kinds' slack): 0.01 [0.005, 0.02] under 1 leaves
    # 100 [50, 200]; above a lower bound 0.001, 10 [5, 20].
    ratio = factor_slack(_fit(0.01, 0.005, 0.02, kind="ratio"), 1.0, "<=")
    assert ratio.unit == "factor" and ratio.text.startswith("x")
    assert (ratio.value, ratio.ci_low, ratio.ci_high) == pytest.approx((100, 50, 200))
    over = factor_slack(_fit(0.01, 0.005, 0.02, kind="ratio"), 0.001, ">=")
    assert (over.value, over.ci_low, over.ci_high) == pytest.approx((10, 5, 20))
    assert factor_slack(_fit(0.01, 0.005, 0.02, kind="ratio"), 1.0, "==") is None


def test_a_per_run_bound_far_below_every_ratio_is_vacuous():
    """The per-run bound's slack (decades) and its vacuous verdict, now the Bound kind's own
    (``Bound.slack``, ``Bound.judge``)."""
    claim = Bound(id="b", statement="", source="", quantity="r", axis="experiment.n",
                  theory=0.1, direction="<=")  # fmt: skip

    def bound(largest):
        # 0 of 200 runs above: the Clopper-Pearson interval [0, 0.018] lies below delta = 0.1.
        return _fit(0.0, 0.0, 0.018, kind="exceedance", n_points=200,
                    details={"exceeding": 0, "max_ratio": largest})  # fmt: skip

    def vacuous(fit):
        return claim.judge(fit, 0.1, None, notes=[])[0] == VACUOUS

    loose = claim.slack(bound(2.8e-28), 0.1)
    assert loose.unit == "decades" and loose.value == pytest.approx(27.55, abs=0.01)
    assert loose.text.startswith("10^27.6")
    # Measured from each run's bound (ratio 1), not from delta: the report said "the bound 0.1
    # leaves 10^27.6".
    assert loose.against == "each run's bound (measured/bound 1)"
    assert vacuous(bound(2.8e-28)) and vacuous(bound(0.99 * POWER_LIMIT))
    assert not vacuous(bound(0.416)) and not vacuous(bound(POWER_LIMIT))
    assert claim.judge(bound(0.416), 0.1, None, notes=[])[0] == "consistent"
    assert claim.slack(bound(0.416), 0.1).value == pytest.approx(0.381, abs=1e-3)
    # Only per-run bounds can be vacuous: another kind's tight fit far below its bound is not.
    power, _, _ = PowerLaw.example()
    assert judge(power, _fit(1e-9, 0.0, 1e-8), 2.0)[0] == "consistent"


@pytest.mark.parametrize("direction", ["<=", ">=", "=="])
def test_an_exact_value_at_the_bound_up_to_rounding_meets_it(direction):
    """An exact value (every run alike) within float64 rounding of the bound is at the bound:
    it meets it, from either side; one 1e-6 past it does not."""
    for value in (2.0 * (1 + 1e-15), 2.0 * (1 - 1e-15)):
        assert verdict(value, value, value, theory=2.0, direction=direction)[0] == "consistent"
    past = {"<=": 2.0 * (1 + 1e-6), ">=": 2.0 * (1 - 1e-6), "==": 2.0 * (1 + 1e-6)}[direction]
    assert verdict(past, past, past, theory=2.0, direction=direction)[0] == "violated"
