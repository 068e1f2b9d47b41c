"""The synthetic referee (sdyn.analysis.referee) against every claim kind, sdyn's and the example
plugin's, and the cases a referee struck in real sweeps, each with the verdict it expects."""

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sdyn.analysis.kinds as kinds
from sdyn.analysis import referee
from sdyn.analysis.claims import evaluate, limits, scope
from sdyn.analysis.kinds.shared import synthetic_curves, synthetic_frame
from sdyn.analysis.tables import verdict_counts
from sdyn.api import KINDS, Claim, Experiment, PluginError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "lsq"))
import sdyn_lsq  # noqa: E402  (the example plugin, with a kind of its own)

BUILT_IN = [kinds.__dict__[name] for name in kinds.__all__ if kinds.__dict__[name].kind]


@pytest.mark.parametrize("kind", [*BUILT_IN, sdyn_lsq.LearningTime], ids=lambda k: k.kind)
def test_every_kind_passes_the_referee(kind):
    referee.check_kind(kind)


def test_the_nine_kinds_and_the_plugins_are_registered_by_their_classes():
    assert {k.kind for k in BUILT_IN} <= set(KINDS) and len(BUILT_IN) == 9
    assert KINDS["learning_time"] is sdyn_lsq.LearningTime


def test_no_kind_name_is_compared_outside_its_class():
    # power_law and threshold_power_law also name fits (sdyn.analysis.fits), not only kinds.
    fits = ("power_law", "threshold_power_law", "bound")
    names = [k.kind for k in BUILT_IN if k.kind not in fits]
    compared = re.compile(r"\.kind\s*(==|!=|in\b)")
    for path in (ROOT / "sdyn").rglob("*.py"):
        text = path.read_text()
        assert not compared.search(text), f"{path}: compares a claim's kind"
        if path.parent.name == "kinds":
            continue
        for name in names:
            assert f'"{name}"' not in text, f"{path} names the kind {name}"


def test_a_kind_missing_a_field_it_needs_is_one_line_at_construction():
    common = dict(statement="s", source="s", quantity="q", axis="a", theory=1.0, direction="<=")
    for kind, missing in (
        (kinds.ThresholdPowerLaw, "threshold_axis"),
        (kinds.GeometricMean, "checkpoints"),
        (kinds.ColumnRatio, "reference"),
        (kinds.PairedRatio, "by"),
    ):
        with pytest.raises(ValueError, match=missing) as caught:
            kind(id="x", **common)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="delta"):
        kinds.Bound(id="x", **{**common, "theory": 1.5})


def test_a_second_kind_of_one_name_is_refused():
    with pytest.raises(PluginError, match="defined twice"):

        @dataclasses.dataclass(frozen=True, kw_only=True)
        class Impostor(Claim):
            kind = "power_law"


def test_an_experiment_refuses_a_claim_of_no_kind_and_an_unknown_derivation():
    claim, _, _ = kinds.PowerLaw.example()
    fields = dict(name="toy", config=sdyn_lsq.LsqConfig, grids={"samples": sdyn_lsq.SamplesGrid},
                  train=sdyn_lsq.train)  # fmt: skip
    with pytest.raises(PluginError, match="no claim kind"):
        base = Claim(id="b", statement="s", source="s", quantity="q", axis="a", theory=1.0,
                     direction="<=")  # fmt: skip
        Experiment(claims=(base,), **fields)
    with pytest.raises(PluginError, match="derived from 'ghost'"):
        Experiment(claims=(dataclasses.replace(claim, derived_from="ghost"),), **fields)


def _one(claim, runs, curves=None, grid=None):
    (result,) = evaluate(claim, runs, curves, grid=grid)
    return result


def _rate_runs(curves_by_run: list[np.ndarray], steps: np.ndarray, **columns):
    runs = synthetic_frame([{"seed": k, **{c: v[k] for c, v in columns.items()}}
                            for k in range(len(curves_by_run))])  # fmt: skip
    values = dict(zip(runs["config_hash"], curves_by_run, strict=True))
    return runs, synthetic_curves(runs, steps, {"column": "d", **values})


RATE = kinds.CurveGeometricRate(id="rate", statement="s", source="s", quantity="d", axis="step",
                                theory=1.0, direction="<=")  # fmt: skip
POWER = kinds.CurvePowerLaw(id="slope", statement="s", source="s", quantity="d", axis="step",
                            theory=-0.5, direction="<=", window=(0.1, 1.0))  # fmt: skip


def test_a_flat_curve_holds_no_rate():
    steps = np.arange(200.0)
    rng = np.random.default_rng(1)
    runs, curves = _rate_runs([1 + 0.01 * rng.random(200) for _ in range(5)], steps)
    result = _one(RATE, runs, curves)
    assert result.verdict == "not measured" and "no contraction" in result.reason


def test_a_rate_over_a_window_its_curve_hardly_falls_over_is_inconclusive():
    """saturation[ngd] at 200 steps: fitted on t = 23-28, where the curve fell 2%."""
    steps = np.arange(300.0)
    curve = np.where(steps < 250, 0.99**steps, 0.99**250 * 0.5 ** (steps - 250))
    rng = np.random.default_rng(2)
    runs, curves = _rate_runs([curve * (1 + 1e-3 * rng.random(300)) for _ in range(5)], steps)
    fit = RATE.measure(runs, curves, theory=1.0, notes=[])[1]
    lo, hi = fit.window
    fall = np.interp(lo, steps, curve) / np.interp(hi, steps, curve)
    result = _one(RATE, runs, curves)
    if fall < 2:
        assert result.verdict == "inconclusive" and "holds no rate" in result.reason
    else:
        assert result.verdict == "consistent"


def test_a_rate_still_changing_across_its_window_is_inconclusive():
    steps = np.unique(np.round(np.geomspace(1, 10001, 120)) - 1)
    t = np.maximum(steps, 1.0)
    mid = np.sqrt(1000 * 10000)
    curve = np.where(t < mid, t**-0.1, mid**-0.1 * (t / mid) ** -0.45)
    rng = np.random.default_rng(3)
    runs, curves = _rate_runs([curve * np.exp(0.01 * rng.normal(size=t.size)) for _ in range(6)],
                              steps)  # fmt: skip
    result = _one(POWER, runs, curves)
    assert result.verdict == "inconclusive" and "still changing" in result.reason


def test_a_curve_at_float64s_floor_is_not_measured():
    steps = np.unique(np.round(np.geomspace(1, 10001, 60)) - 1)
    curve = np.where(steps < 100, np.maximum(steps, 1.0) ** -1.0, 1e-300)
    runs, curves = _rate_runs([curve] * 5, steps)
    floored = dataclasses.replace(POWER, relative_floor=1e-8)
    result = _one(floored, runs, curves)
    assert result.verdict == "not measured" and "float64 resolution" in result.reason


def test_an_exact_rate_is_reported_as_exact_never_as_a_zero_width_ci():
    """saturation[polyak]: exp(-eta) exactly, by the step rule."""
    steps = np.arange(100.0)
    runs, curves = _rate_runs([np.exp(-steps)] * 5, steps)
    result = _one(RATE, runs, curves)
    assert result.interval == "exact" and result.verdict == "consistent"
    assert "exact value 0.367879" in result.reason and "95% CI" not in result.reason


def _bound_runs(ratios):
    return synthetic_frame([{"experiment.n": 8, "seed": k, "ratio": r}
                            for k, r in enumerate(ratios)])  # fmt: skip


SURE = kinds.Bound(id="sure", statement="s", source="s", quantity="ratio", axis="experiment.n",
                   theory=0.0, direction="<=")  # fmt: skip


def test_a_sure_bound_attained_up_to_rounding_holds():
    result = _one(SURE, _bound_runs([1 + 1e-15] * 10 + [0.9] * 15))
    assert result.verdict == "consistent"
    assert "at the bound" in result.slack.text and "e-16" not in result.slack.text


def test_a_sure_bound_missed_by_one_percent_in_one_run_is_violated():
    result = _one(SURE, _bound_runs([1.01] + [0.9] * 24))
    assert result.verdict == "violated" and "1 of 25 runs exceed" in result.reason


def test_a_probability_bound_with_too_few_runs_to_ever_decide_says_so_before_and_after():
    delta = dataclasses.replace(SURE, theory=0.1)
    runs = _bound_runs([0.5] * 25)
    result = _one(delta, runs)
    assert result.verdict == "inconclusive" and "needs 36" in result.reason
    ((label, why),) = limits([delta], runs[["experiment.n", "seed"]], grid="")
    assert label == "sure" and "36" in why
    assert not limits([delta], _bound_runs([0.5] * 36)[["experiment.n", "seed"]], grid="")


def test_a_threshold_law_whose_sigma_the_grid_cannot_identify_is_a_bracket():
    claim, inside, _ = kinds.ThresholdPowerLaw.example()
    runs, _ = claim.synthetic(inside, seeds=3, levels=5, noise=0.0, rng=np.random.default_rng(0))
    result = _one(claim, runs)
    assert result.interval == "bracket" and "bracket [" in result.reason
    assert "95% CI" not in result.reason


def test_a_figures_statement_outside_the_figures_setting_is_outside_assumptions():
    """sgd_initial_loss judged at n = 256 against Fig. 1, drawn at n = 1000."""
    from sdyn.experiments.attention_regression.claims import CLAIMS

    claim = next(c for c in CLAIMS if c.id == "sgd_initial_loss")
    steps = np.array([0.0, 100.0])
    runs, curves = _rate_runs([np.array([2000.0, 10.0])] * 5, steps,
                              **{"experiment.optimizer": ["sgd"] * 5, "experiment.n": [256] * 5,
                                 "experiment.batch": [32] * 5, "experiment.lr": [0.1] * 5,
                                 "experiment.init_scale": [1.0] * 5,
                                 "data.noise_var": [0.002] * 5, "l_irr": [1.0] * 5})  # fmt: skip
    curves = curves.rename(columns={"d": "loss"})
    result = _one(claim, runs, curves, grid="iters")
    assert result.verdict == "outside assumptions" and "Fig. 1 has n = 1000" in result.reason
    inside = runs.assign(**{"experiment.n": 1000})
    assert _one(claim, inside, curves, grid="iters").verdict == "consistent"


def test_no_value_resolving_is_not_measured_not_a_nan_row():
    """loss_ahead_of_gd[polyak]: every checkpoint below float64 resolution."""
    claim, _, _ = kinds.GeometricMean.example()
    floored = dataclasses.replace(claim, relative_floor=1e-16)
    runs = synthetic_frame([{"seed": k} for k in range(5)])
    curves = synthetic_curves(runs, [0.0, 10.0, 100.0],
                              {"column": "q", **{h: np.array([1.0, 1e-20, 1e-30])
                                                 for h in runs["config_hash"]}})  # fmt: skip
    result = _one(floored, runs, curves)
    assert result.verdict == "not measured" and "no value resolves" in result.reason


def test_a_derived_claim_is_no_second_verdict():
    claim, inside, _ = kinds.PowerLaw.example()
    runs, _ = claim.synthetic(inside, seeds=3, levels=5, noise=0.05, rng=np.random.default_rng(0))
    results = [_one(claim, runs), _one(dataclasses.replace(claim, derived_from=claim.id), runs)]
    assert [r.verdict for r in results] == ["consistent", "derived"]
    assert verdict_counts(results) == "verdicts: 1 consistent, 1 derived"


def test_a_plots_title_scope_names_only_the_runs_drawn():
    """Per-run rates whose lr = 0.01 runs are flat (left out) are drawn for lr = 0.1 only."""
    steps = np.arange(200.0)
    rng = np.random.default_rng(4)
    falling = [0.9**steps * np.exp(0.01 * rng.normal(size=200)) for _ in range(4)]
    flat = [1 + 0.01 * rng.random(200) for _ in range(4)]
    runs, curves = _rate_runs(falling + flat, steps, **{"experiment.lr": [0.1] * 4 + [0.01] * 4})
    claim = kinds.PerRunGeometricRate(id="r", statement="s", source="s", quantity="d",
                                      axis="step", theory=1.0, direction="<=")  # fmt: skip
    result = _one(claim, runs, curves)
    assert result.scope == "lr = 0.1"
    assert scope(claim, runs, runs) == "lr = 0.01, 0.1 pooled"


@settings(max_examples=25, deadline=None)
@given(
    truth=st.floats(-1.5, 2.5),
    noise=st.floats(0.0, 0.5),
    seed=st.integers(0, 2**16),
)
def test_a_power_laws_verdict_follows_its_interval(truth, noise, seed):
    claim, _, _ = kinds.PowerLaw.example()
    runs, _ = claim.synthetic(truth, seeds=3, levels=5, noise=noise,
                              rng=np.random.default_rng(seed))  # fmt: skip
    result = _one(claim, runs)
    fit = result.fit
    if result.verdict == "consistent":
        assert fit.ci_high <= claim.theory + 1e-9 * max(1, abs(fit.value))
    elif result.verdict == "violated":
        assert fit.ci_low > claim.theory - 1e-9 * max(1, abs(fit.value))
    else:
        assert result.verdict == "inconclusive"
    if noise == 0:
        assert result.interval == "exact" and abs(fit.value - truth) < 1e-9


@settings(max_examples=40, deadline=None)
@given(ratios=st.lists(st.floats(0.01, 1.5), min_size=1, max_size=60))
def test_a_sure_bound_is_violated_exactly_when_a_run_exceeds_it(ratios):
    result = _one(SURE, _bound_runs(ratios))
    above = any(r > 1 + kinds.bound.ROUNDING for r in ratios)
    assert (result.verdict == "violated") == above
    assert result.verdict in ("violated", "consistent")


def test_the_example_plugins_kind_is_one_class_in_its_own_file():
    source = (ROOT / "examples" / "lsq" / "sdyn_lsq.py").read_text()
    assert (
        "class LearningTime(KindBase):" in source
        and 'kind: ClassVar[str] = "learning_time"' in (source)
    )
    frame = pd.DataFrame({"seed": range(5), "experiment.n": [8] * 5})
    ((label, why),) = limits([c for c in sdyn_lsq.CLAIMS if c.id == "learning_time"], frame, "")
    assert label == "learning_time" and "needs 6" in why


def test_the_plugin_guides_example_of_each_kind_runs_and_covers_the_nine():
    page = (ROOT / "docs" / "plugins.md").read_text()
    section = page[page.index("## Claim kinds") : page.index("### A kind of your own")]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    scope_ = {}
    exec(code, scope_)
    assert {type(c) for c in scope_["claims"]} == set(BUILT_IN)


def test_a_per_run_rate_with_a_run_its_fit_leaves_out_is_judged_without_it():
    """A run no window fits (noise without a trend) beside runs that contract: the rate is the
    others', and the run that has no window is left out (it raised KeyError in fall())."""
    steps = np.arange(200.0)
    rng = np.random.default_rng(5)
    contracting = [0.9**steps * np.exp(0.01 * rng.normal(size=200)) for _ in range(3)]
    noise = [np.exp(rng.normal(size=200))]
    runs, curves = _rate_runs(contracting + noise, steps)
    claim = kinds.PerRunGeometricRate(id="r", statement="s", source="s", quantity="d",
                                      axis="step", theory=1.0, direction="<=")  # fmt: skip
    result = _one(claim, runs, curves)
    assert result.verdict == "consistent" and abs(result.fit.value - 0.9) < 0.01
    assert result.fit.n_groups == 3


def test_a_plateau_is_settled_over_each_runs_own_fraction_of_its_steps():
    """Curves that drop below the floor 0.2 at t = 128 of 200 have settled over their last
    quarter, not over their last half: the fraction comes from each run's config column."""
    steps = np.arange(200.0)
    rng = np.random.default_rng(6)
    falling = [10 * 0.97**steps * np.exp(0.01 * rng.normal(size=200)) for _ in range(4)]
    claim = kinds.PerRunGeometricRate(id="r", statement="s", source="s", quantity="d",
                                      axis="step", theory=1.0, direction="<=", floor=0.2,
                                      settled="experiment.plateau_fraction")  # fmt: skip
    quarter = _one(
        claim, *_rate_runs(falling, steps, **{"experiment.plateau_fraction": [0.25] * 4})
    )
    assert quarter.verdict == "consistent" and abs(quarter.fit.value - 0.97) < 0.005
    half = _one(claim, *_rate_runs(falling, steps, **{"experiment.plateau_fraction": [0.5] * 4}))
    assert half.verdict == "not measured"
    assert "4 of 4 runs left out: no plateau yet (above 0.2 in the last 0.5 " in half.reason
