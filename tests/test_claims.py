"""Claims on runs tables: censored thresholds, bounds, directions, the evidence rule, settings
outside a theorem's assumptions, and claims a sweep does not measure."""

import math
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from sdyn.analysis.claim_plots import plot_overlay
from sdyn.analysis.claims import evaluate, limits
from sdyn.analysis.kinds import ColumnRatio, GeometricMean, PairedRatio, PowerLaw
from sdyn.api import Describe
from sdyn.experiments import implicit_bias, ntk

CLAIMS = {c.id: c for c in ntk.CLAIMS}
WIDTHS = 2 ** np.arange(1, 16)


def _runs(alpha=1.5, seeds=4, noise=0.2, seed=0, ns=(8, 16, 32, 64, 128), law=None, **columns):
    """A width sweep whose NTK-regime threshold is m*(n) = 2.7 n^alpha, or ``law(n)`` (per
    seed, with log-normal noise), inside Thm 4.2's setting unless ``columns`` say otherwise."""
    rng = np.random.default_rng(seed)
    rows = []
    for n in ns:
        for s in range(seeds):
            typical = law(n) if law else 2.7 * n**alpha
            m_star = typical * np.exp(noise * rng.standard_normal())
            for m in WIDTHS:
                margin = (m_star / m) ** 1.0  # <= 1 from m* on
                rows.append(
                    {
                        "experiment.n": n,
                        "experiment.m": m,
                        "seed": s,
                        "ntk_margin": margin,
                        "fit_margin": margin,
                        "ntk_regime": int(margin <= 1),
                        "lambda_min": 0.5,
                        "experiment.activation": "softmax",
                        "experiment.lr_scale": 1.0,
                        "experiment.theorem_delta": 0.1,
                        "budget_covers_theorem": 1,
                        "theorem_steps": 100.0,
                        "status": "converged",
                        "run_id": f"{n}-{m}-{s}",
                        "config_hash": f"{n}-{m}-{s}",
                    }
                )
    return pd.DataFrame(rows).assign(**columns)


def test_width_threshold_recovers_a_known_exponent():
    (result,) = evaluate(CLAIMS["width_threshold"], _runs(alpha=1.5))
    assert result.fit.kind == "threshold_power_law" and result.fit.ci_method == "profile"
    assert abs(result.fit.value - 1.5) < 0.1
    assert result.fit.ci_low <= 1.5 <= result.fit.ci_high
    assert result.verdict == "consistent"  # the bound is <= 2
    (violated,) = evaluate(CLAIMS["width_threshold"], _runs(alpha=2.6))
    assert violated.verdict == "violated" and "2" in violated.reason


def test_a_threshold_law_states_its_local_exponent_at_the_largest_n():
    # m* ~ n up to n = 32, then ~ n^2.5: the whole range's exponent lies between, and only the
    # local one, over n = 64-256, shows the steeper law the range ends in.
    def bent(n):
        return 2.7 * n if n <= 32 else 2.7 * 32 * (n / 32) ** 2.5

    runs = _runs(law=bent, ns=(8, 16, 32, 64, 128, 256))
    (result,) = evaluate(CLAIMS["width_threshold"], runs)
    (note,) = [n for n in result.notes if n.startswith("local exponent")]
    assert "over the largest 3 values of experiment.n (64-256)" in note
    local, low, high = map(float, re.search(r": ([\d.]+) \[([\d.]+), ([\d.]+)\]", note).groups())
    assert low <= 2.5 <= high and low > result.fit.value
    assert result.fit.value < 2.2


def test_a_power_law_states_its_local_exponent_at_the_largest_x_as_a_threshold_law_does():
    # q ~ n up to n = 32, then ~ n^0.3 (a law that bends, as wmm_norm_vs_n does): only the
    # local exponent, over n = 64-256, shows where the range ends.
    claim = PowerLaw(
        id="slope", statement="", source="", quantity="q",
        axis="experiment.n", theory=1.0, direction="<=",
    )  # fmt: skip
    rng = np.random.default_rng(0)
    n = np.repeat([8.0, 16.0, 32.0, 64.0, 128.0, 256.0], 5)
    q = np.where(n <= 32, n, 32 * (n / 32) ** 0.3) * np.exp(0.02 * rng.standard_normal(n.size))
    runs = pd.DataFrame({"experiment.n": n, "seed": np.tile(range(5), 6), "q": q})
    (result,) = evaluate(claim, runs)
    (note,) = [n for n in result.notes if n.startswith("local exponent")]
    assert "over the largest 3 values of experiment.n (64-256)" in note
    local, low, high = map(float, re.search(r": ([\d.]+) \[([\d.]+), ([\d.]+)\]", note).groups())
    assert low <= 0.3 <= high and result.fit.value > 0.5


def test_censored_seeds_are_kept_and_counted():
    # At alpha = 2.1 and n = 128, m* ~ 71,000 is above the widest swept width (2^15).
    (result,) = evaluate(CLAIMS["width_threshold"], _runs(alpha=2.1))
    points = result.points
    right = points[points["censored"] == "right"]
    assert len(points) == 20 and len(right) == 4 and (right["x"] == 128).all()
    assert np.isinf(right["high"]).all() and (right["low"] == WIDTHS[-1]).all()
    assert "4 right-censored" in result.fit.message
    assert result.fit.ci_low <= 2.1 <= result.fit.ci_high


def test_lambda_normalised_threshold_multiplies_by_lambda_squared():
    runs = _runs(alpha=1.5)
    (plain,) = evaluate(CLAIMS["width_threshold"], runs)
    (scaled,) = evaluate(CLAIMS["width_threshold_lambda"], runs)
    for column in ("low", "high", "y"):
        assert np.allclose(scaled.points[column], plain.points[column] * 0.25)
    assert scaled.fit.value == pytest.approx(plain.fit.value, abs=1e-4)


@pytest.mark.parametrize(
    ("direction", "theory", "expected"),
    [("<=", 2.0, "consistent"), ("<=", 1.0, "violated"), (">=", 1.0, "consistent"),
     (">=", 2.0, "violated"), ("==", 1.5, "consistent"), ("==", 2.0, "violated")],
)  # fmt: skip
def test_each_direction_judges_the_interval_against_the_bound(direction, theory, expected):
    claim = PowerLaw(
        id="slope", statement="", source="", quantity="q",
        axis="experiment.n", theory=theory, direction=direction,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    n = np.repeat([8.0, 16.0, 32.0, 64.0, 128.0], 5)
    runs = pd.DataFrame(
        {"experiment.n": n, "seed": np.tile(range(5), 5),
         "q": n**1.5 * np.exp(0.05 * rng.standard_normal(n.size))}
    )  # fmt: skip
    (result,) = evaluate(claim, runs)
    assert abs(result.fit.value - 1.5) < 0.05
    assert result.verdict == expected


def test_too_few_axis_values_are_inconclusive_whatever_the_interval():
    # Three n values: a tight interval far above the bound, still no verdict.
    (result,) = evaluate(CLAIMS["width_threshold"], _runs(alpha=3.0, ns=(8, 16, 32)))
    assert result.fit.ci_low > 2.0
    assert result.verdict == "inconclusive" and result.reason.startswith("too little evidence")


@pytest.mark.parametrize(("theory", "expected"), [(2.0, "consistent"), (1.4, "violated")])
def test_a_zero_width_interval_is_an_exact_value_compared_as_it_is(theory, expected):
    """Noise-free replicates: the slope's interval has zero width. Changed rule (issue 41,
    sdyn.analysis.verdict.RESOLUTION): an interval narrower than float64's resolution is the
    exact value, compared as a value (it was "inconclusive", a degenerate interval), and
    never called a CI."""
    claim = PowerLaw(
        id="slope", statement="", source="", quantity="q",
        axis="experiment.n", theory=theory, direction="<=",
    )  # fmt: skip
    n = np.repeat([8.0, 16.0, 32.0, 64.0], 3)
    runs = pd.DataFrame({"experiment.n": n, "seed": np.tile(range(3), 4), "q": n**1.5})
    (result,) = evaluate(claim, runs)
    assert result.fit.ci_low == pytest.approx(result.fit.ci_high)
    assert result.verdict == expected and "the exact value 1.5" in result.reason
    assert result.interval == "exact" and "CI" not in result.reason


def test_another_activation_is_outside_the_theorems_assumptions():
    # Checked where each threshold is read: each seed's widest run and its last failure.
    (result,) = evaluate(CLAIMS["width_threshold"], _runs(**{"experiment.activation": "relu"}))
    assert result.verdict == "outside assumptions"
    assert "softmax" in result.reason and "40 of 40 runs" in result.reason
    assert abs(result.fit.value - 1.5) < 0.1  # the measured value is still reported


def test_a_budget_below_the_theorems_is_judged_where_the_threshold_is_read():
    """m_fit is read where a run fails to fit within the budget: the budget must cover the
    lemma's steps at each seed's widest run and at its last failure, which bounds the
    threshold. The last failure was not checked: the README's m_fit read "consistent" where
    every failure below it had lambda_min(H(0)) = 0 and no step count covered it."""
    runs = _runs()
    short = (runs["experiment.n"] == 128) & (runs["experiment.m"] == WIDTHS[-1])
    runs.loc[short, ["budget_covers_theorem", "theorem_steps"]] = (0, 21000.0)
    (result,) = evaluate(CLAIMS["fit_threshold"], runs)
    assert result.verdict == "outside assumptions"
    assert "budget" in result.reason and "4 of 40 runs" in result.reason
    assert "theorem_steps=2.1e+04" in result.reason and "at n=128" in result.reason
    runs = _runs()
    failed = (runs["experiment.n"] == 128) & (runs["fit_margin"] > 1)
    runs.loc[failed, "budget_covers_theorem"] = 0
    (result,) = evaluate(CLAIMS["fit_threshold"], runs)
    assert result.verdict == "outside assumptions" and "4 of 40 runs" in result.reason
    # Narrow widths far below the threshold do not decide it: the same gap there is harmless.
    runs = _runs()
    runs.loc[runs["experiment.m"] == 2, "budget_covers_theorem"] = 0
    assert evaluate(CLAIMS["fit_threshold"], runs)[0].verdict == "consistent"


def test_a_plan_checks_a_threshold_laws_setting_at_its_widest_runs():
    """Planned runs have no outcome, so no last failure: ``--plan`` checks the assumptions on
    the config columns at each seed's widest run (it raised a KeyError on the quantity)."""
    planned = _runs(**{"experiment.activation": "relu"})
    planned = planned[["experiment.n", "experiment.m", "seed", "experiment.activation"]]
    found = dict(limits([CLAIMS["width_threshold"]], planned, grid="width"))
    assert "Thm 4.2 is about softmax networks: not so in 20 of 20" in found["width_threshold"]


def test_the_ntk_threshold_is_the_widths_unless_its_last_failure_ran_out_of_steps():
    """m* is read where a run fits but leaves the NTK regime: the lemma's worst-case step
    count does not bound it (runs fit ~20 times faster), a run that ran out of steps does.
    Lemma 5.3's count at the widest run put the diabetes and large-n sweeps' m* outside
    assumptions though every failure bracketing it had fit."""
    runs = _runs()
    runs["budget_covers_theorem"] = 0
    assert evaluate(CLAIMS["width_threshold"], runs)[0].verdict == "consistent"
    last = runs[runs["ntk_margin"] > 1].sort_values("experiment.m")
    last = last.groupby(["experiment.n", "seed"]).tail(1)
    runs.loc[last.index[last["experiment.n"] == 128], "status"] = "budget_exhausted"
    (result,) = evaluate(CLAIMS["width_threshold"], runs)
    assert result.verdict == "outside assumptions" and "4 of 40 runs" in result.reason
    assert "within the budget" in result.reason
    # A run far below m* that ran out of steps does not bound it.
    runs = _runs()
    runs.loc[runs["experiment.m"] == 2, "status"] = "budget_exhausted"
    assert evaluate(CLAIMS["width_threshold"], runs)[0].verdict == "consistent"


def _bound_runs(ratio, n_runs=40):
    rng = np.random.default_rng(1)
    m = np.tile([64.0, 128.0, 256.0, 512.0], n_runs // 4)
    return pd.DataFrame(
        {
            "experiment.n": 32,
            "experiment.m": m,
            "seed": np.repeat(range(n_runs // 4), 4),
            "ntk_regime": 1,
            "experiment.activation": "softmax",
            "experiment.lr_scale": 1.0,
            "experiment.theorem_delta": 0.1,
            "weight_movement_bound_ratio": ratio,
            "weight_movement_bound_ratio_eff": 1e-7,
            "max_weight_movement": m**-0.8 * np.exp(0.02 * rng.standard_normal(n_runs)),
            "rms_weight_movement": m**-1.0 * np.exp(0.02 * rng.standard_normal(n_runs)),
        }
    )


def test_weight_movement_is_a_bound_with_its_slope_described():
    (result,) = evaluate(CLAIMS["weight_movement"], _bound_runs(0.5))
    assert result.fit.kind == "exceedance" and result.fit.value == 0.0
    assert result.verdict == "consistent" and result.theory == 0.1
    assert result.slack.unit == "decades" and result.slack.value == pytest.approx(0.301, 1e-3)
    # Every run 10^30 below its bound: a check that could not have failed, counted apart.
    (loose,) = evaluate(CLAIMS["weight_movement"], _bound_runs(1e-30))
    assert loose.verdict == "consistent (vacuous)" and loose.fit.value == 0.0
    assert loose.reason.startswith("no power: every measured/bound ratio is below 1e-06")
    assert loose.slack.text == "10^30 (largest ratio 1e-30)"
    assert loose.as_dict()["slack"]["value"] == pytest.approx(30.0)
    slope = {d.quantity: d for d in result.described}
    assert slope["max_weight_movement"].fit.value == pytest.approx(-0.8, abs=0.03)
    assert "the bound scales as m^-1" in slope["max_weight_movement"].text
    assert "median 1e-07" in slope["weight_movement_bound_ratio_eff"].text
    # A tenth of the runs above their bound: the theorem's delta = 0.1 cannot be ruled in.
    ratio = np.where(np.arange(40) % 10 == 0, 3.0, 1e-30)
    assert evaluate(CLAIMS["weight_movement"], _bound_runs(ratio))[0].verdict == "inconclusive"
    ratio = np.where(np.arange(40) % 2 == 0, 3.0, 1e-30)
    assert evaluate(CLAIMS["weight_movement"], _bound_runs(ratio))[0].verdict == "violated"


def test_claims_a_sweep_does_not_vary_are_not_measured():
    (one_n,) = evaluate(CLAIMS["width_threshold"], _runs(ns=(32,)))
    assert one_n.verdict == "not measured" and "experiment.n is not swept" in one_n.reason
    assert not one_n.measured
    ordering = next(c for c in implicit_bias.CLAIMS if c.id == "alignment_ahead_of_gd")
    other_grid = evaluate(ordering, pd.DataFrame({"seed": [0]}), grid="samples")
    assert [r.verdict for r in other_grid] == ["not measured"]
    assert "+grid=iters" in other_grid[0].reason
    # The reference optimiser (GD) was not run: nothing to compare with.
    runs = pd.DataFrame(
        {"seed": [0, 0], "experiment.optimizer": ["ngd", "polyak"], "svm_feasible": 1,
         "status": "converged"}
    )  # fmt: skip
    (no_reference,) = evaluate(ordering, runs, grid="iters")
    assert no_reference.verdict == "not measured" and "gd" in no_reference.reason


def test_failed_runs_are_excluded_and_counted_and_empty_claims_plot(tmp_path):
    runs = _runs().iloc[:3].assign(status="failed")
    for result in evaluate(CLAIMS["width_threshold"], runs) + evaluate(
        CLAIMS["weight_movement"], runs
    ):
        assert result.n_failed == 3 and result.verdict == "not measured"
        assert result.reason == "all 3 runs failed"  # was "no runs"
        assert result.points.dtypes.eq(float).all()
        plot_overlay([(None, result)], tmp_path / "empty.png")
        assert (tmp_path / "empty.png").stat().st_size > 0
    # No run recorded yet (a report of a sweep just started): said so, not "no run meets its
    # selection (...)".
    for result in evaluate(CLAIMS["weight_movement"], _runs().iloc[:0]):
        assert result.reason == "no run is recorded"


def test_a_figures_ordering_is_judged_in_that_figures_setting_only():
    # Fig. 2's ordering (empirical) holds for its data, rates and caps: elsewhere it is
    # another experiment, outside assumptions, the reason naming the setting that differs.
    ordering = next(c for c in implicit_bias.CLAIMS if c.id == "alignment_ahead_of_ngd")
    assert "empirical" in ordering.source and math.isclose(ordering.theory, 1.0)
    settings = {(a.column, a.when) for a in ordering.assumed()}  # the figure's setting too
    assert ("experiment.eta_ngd", (("decoder_trained", 0),)) in settings  # Fig. 2
    assert ("data.name", (("decoder_trained", 1),)) in settings  # Fig. 3


def _checkpoint_runs(ratios: dict[int, float], seeds=5, floor_at=None):
    """Runs of a reference optimiser ``a`` and a compared ``b`` (one per seed) with a curve
    ``q`` recorded at steps 0, 1, 3, 10, 30, 100, 300, 1000; b's value over a's at step t is
    ``ratios[t]`` (else 1) times a little seed noise, and from ``floor_at`` on b is 1e-20 of
    its start (below float64 resolution)."""
    rng = np.random.default_rng(0)
    steps = [0, 1, 3, 10, 30, 100, 300, 1000]
    runs, curves = [], []
    for s in range(seeds):
        for optimizer in ("a", "b"):
            run = f"{optimizer}{s}"
            runs.append({"experiment.optimizer": optimizer, "seed": s, "config_hash": run,
                         "status": "budget_exhausted", "run_id": run})  # fmt: skip
            for t in steps:
                value = 1.0 / (1 + t)
                if optimizer == "b":
                    value *= ratios.get(t, 1.0) * math.exp(0.05 * rng.standard_normal())
                    if floor_at is not None and t >= floor_at:
                        value = 1e-20
                curves.append({"config_hash": run, "step": t, "q": value})
    return pd.DataFrame(runs), pd.DataFrame(curves)


ORDERING = PairedRatio(
    id="ahead",
    statement="b is ahead of a at every checkpoint",
    source="Fig. X (empirical)",
    quantity="q",
    axis="seed",
    by="experiment.optimizer",
    reference="a",
    theory=1.0,
    direction="<=",
    checkpoints=(10, 100, 1000),
    relative_floor=1e-16,
)


def test_an_ordering_claim_is_judged_at_several_checkpoints():
    # Ahead at t = 10 and 100, behind at t = 1000: one t alone (10 or 100) would say consistent.
    runs, curves = _checkpoint_runs({10: 0.5, 100: 0.5, 1000: 2.0})
    (result,) = evaluate(ORDERING, runs, curves)
    assert result.label == "ahead[b]" and result.verdict == "violated"
    assert result.reason.startswith("t = 1000 decides (2 of 3 consistent)")
    steps = result.fit.details["checkpoints"]
    assert [c["checkpoint"] for c in steps] == [10, 100, 1000]
    assert [c["verdict"] for c in steps] == ["consistent", "consistent", "violated"]
    assert math.isclose(steps[0]["value"], 0.5, rel_tol=0.05)
    assert "98.3% CI" in result.reason  # Bonferroni: 95% jointly over three checkpoints
    # Ahead everywhere: consistent, decided by the checkpoint closest to the bound.
    runs, curves = _checkpoint_runs({10: 0.5, 100: 0.8, 1000: 0.3})
    (result,) = evaluate(ORDERING, runs, curves)
    assert result.verdict == "consistent" and result.reason.startswith("t = 100 decides")
    assert math.isclose(result.fit.value, 0.8, rel_tol=0.05)


def test_comparisons_below_float64_resolution_are_dropped(tmp_path):
    # From t = 1000 on b is at 1e-20 of its start: a ratio of 1e-17 there compares nothing.
    runs, curves = _checkpoint_runs({10: 0.5, 100: 0.5}, floor_at=1000)
    (result,) = evaluate(ORDERING, runs, curves)
    assert result.verdict == "consistent" and "(2 of 2 consistent)" in result.reason
    assert any(
        "t = 1000 (0 resolved, 5 of 5 below float64's resolution)" in note for note in result.notes
    )
    assert [c["checkpoint"] for c in result.fit.details["checkpoints"]] == [10, 100]
    plot_overlay([(None, result)], tmp_path / "ahead.png", ("png", "svg", "pdf"))
    for kind in ("svg", "pdf"):  # the formats asked for, beside the PNG
        assert (tmp_path / f"ahead.{kind}").stat().st_size > 0
    # A step budget that ends before every checkpoint: not measured, and said why.
    short = curves[curves["step"] < 10]
    (absent,) = evaluate(ORDERING, runs, short)
    assert absent.verdict == "not measured" and "beyond its runs' budget" in absent.reason


def test_a_geometric_mean_claim_reads_a_normalised_curve_at_its_checkpoints():
    runs, curves = _checkpoint_runs({})
    runs = runs.assign(l_irr=0.01 * (1 + 0.1 * runs["seed"]))
    claim = GeometricMean(
        id="near",
        statement="",
        source="Fig. X (empirical)",
        quantity="q",
        axis="seed",
        normalise=("l_irr", -1.0),
        theory=1e3,
        direction="<=",
        where=(("experiment.optimizer", "a"),),
        checkpoints=(0, 100),
    )
    (result,) = evaluate(claim, runs, curves)
    # q / l_irr = 100 / (1 + seed / 10) at t = 0, 100 times less at t = 100: below 10^3.
    assert result.verdict == "consistent" and result.reason.startswith("t = 0 decides")
    expected = math.exp(np.mean([math.log(100 / (1 + 0.1 * s)) for s in range(5)]))
    assert math.isclose(result.fit.value, expected, rel_tol=1e-9)


def test_a_column_ratio_compares_two_columns_of_the_same_runs_at_the_largest_axis_value(tmp_path):
    # Per run, the learned model's error over a baseline's on the same draws: 0.7 at the largest
    # n, 1.3 below it; the smaller n must not enter.
    rng = np.random.default_rng(0)
    runs = pd.DataFrame(
        [
            {"experiment.n": n, "seed": s, "baseline": b, "status": "budget_exhausted",
             "error": b * (0.7 if n == 64 else 1.3) * math.exp(0.02 * rng.standard_normal())}
            for n in (16, 64)
            for s in range(5)
            for b in [rng.uniform(0.5, 2.0)]
        ]
    )  # fmt: skip
    claim = ColumnRatio(
        id="beats", statement="", source="", quantity="error",
        reference="baseline", axis="experiment.n", at_largest="experiment.n", theory=1.0,
        direction="<=", references=(("baseline", "baseline"), (0.0, "exact")),
        describe=(Describe(("error",), where=(("baseline", ">", 1.0),)),),
    )  # fmt: skip
    (result,) = evaluate(claim, runs)
    assert result.fit.kind == "ratio" and result.n_runs == 5
    assert result.fit.value == pytest.approx(0.7, rel=0.03) and result.verdict == "consistent"
    assert dict(result.references)["exact"] == 0.0
    assert dict(result.references)["baseline"] == pytest.approx(runs["baseline"][5:].median())
    large = runs[(runs["experiment.n"] == 64) & (runs["baseline"] > 1.0)]
    assert f"over {len(large)} runs" in result.described[0].text
    plot_overlay([(None, result)], tmp_path / "ratio.png")
    (missing,) = evaluate(claim, runs.drop(columns="baseline"))
    assert missing.verdict == "not measured" and "baseline was not recorded" in missing.reason


def test_results_say_which_values_of_the_other_axes_they_hold(tmp_path):
    runs = pd.concat([_bound_runs(1e-30).assign(**{"experiment.n": n}) for n in (8, 32, 64)])
    (bound,) = evaluate(CLAIMS["weight_movement"], runs)
    assert bound.scope == "n = 8, 32, 64 pooled"  # the bound is read on every run
    assert {d.at for d in bound.described if d.fit is not None} == {"n = 32"}  # the middle n
    assert "at n = 32" in bound.described[0].text
    (threshold,) = evaluate(CLAIMS["width_threshold"], _runs())
    assert threshold.scope == ""  # n is its axis and m its threshold axis: nothing else swept
    one_n = _bound_runs(1e-30).assign(**{"experiment.n": 32})
    assert evaluate(CLAIMS["weight_movement"], one_n)[0].scope == ""  # n not swept at all
    plot_overlay([(None, bound)], tmp_path / "bound.png")  # the title's second line draws


def test_a_y_label_too_long_for_the_axes_goes_on_two_lines_outside_math():
    import matplotlib.pyplot as plt

    from sdyn.analysis.claim_plots import _set_ylabel

    fig, ax = plt.subplots(figsize=(3.3, 2.8))
    _set_ylabel(ax, r"$m^* \lambda^2$")
    assert ax.get_ylabel() == r"$m^* \lambda^2$"
    _set_ylabel(ax, r"learned score's samples: $\exp(\mathrm{mean}\,\log p_0)$")
    assert ax.get_ylabel() == "learned score's samples:\n$\\exp(\\mathrm{mean}\\,\\log p_0)$"
    plt.close(fig)


def test_a_title_wider_than_the_axes_puts_the_verdicts_on_a_line_of_their_own():
    import matplotlib.pyplot as plt

    from sdyn.analysis.claim_plots import _title

    def result(label: str, verdict: str, scope: str = ""):
        return (None, SimpleNamespace(label=label, verdict=verdict, scope=scope))

    fig, ax = plt.subplots(figsize=(3.3, 2.8))
    _title(ax, [result("kernel_drift", "consistent", "n = 8, 32 pooled")])
    assert ax.get_title() == "kernel_drift: consistent\nn = 8, 32 pooled"
    _title(ax, [result("alignment_ahead_of_ngd[ngd_momentum]", "consistent (vacuous)")])
    assert ax.get_title() == "alignment_ahead_of_ngd[ngd_momentum]:\nconsistent (vacuous)"
    plt.close(fig)
