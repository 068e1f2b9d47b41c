"""The lsq plugin's own test: its sweep, run through sdyn's testing helper (real Ray, a real
MLflow store in a temporary directory), and the verdicts it reads."""

from sdyn.testing import run_sweep


def test_gd_converges_to_the_minimum_norm_interpolant(tmp_path):
    verdicts = run_sweep(["experiment=lsq", "+grid=samples"], tmp_path)
    assert verdicts.loc["min_norm_rate", "verdict"] == "consistent"
    assert verdicts.loc["min_norm_rate", "slack"]["value"] > 0  # in decades: every run below it
    assert verdicts.loc["interpolant_norm", "verdict"] == "consistent"
    assert verdicts.loc["learning_time", "verdict"] == "consistent"  # the plugin's own kind
    assert verdicts.loc["learning_time", "value"] <= 1
