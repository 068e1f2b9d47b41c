"""The forecast of the step at which an NTK run stops (what ``--plan`` prices it at), against
the same runs trained."""

import dataclasses

from sdyn.api import Run
from sdyn.experiments import ntk
from sdyn.experiments.ntk.forecast import FORECAST_WIDTH, steps_to_stop


def _run(n: int, m: int, seed: int = 0, **config) -> Run:
    return Run(ntk.NTKConfig(n=n, m=m, steps=3000, **config), ntk.SphereData(), seed)


def _trained(run: Run) -> dict:
    return ntk.train([run], "cpu").summaries[0]


def test_a_wide_run_stops_at_the_step_its_kernel_regime_forecasts():
    # Wide runs keep H(t) near H(0): the forecast is their trained step, far below Thm 4.2's
    # step count (theorem_steps), which rests on the slowest rate alone.
    runs = [_run(32, 512), _run(64, 1024, seed=1), _run(16, 64, seed=2, d_out=2)]
    for run, forecast in zip(runs, steps_to_stop(runs), strict=True):
        trained = _trained(run)
        assert trained["status"] == "converged"
        assert abs(forecast - trained["steps_to_eps"]) <= 1, (run, forecast, trained)
        assert forecast < 0.2 * trained["theorem_steps"]


def test_a_run_wider_than_the_forecast_width_is_forecast_at_that_width():
    wide = _run(16, 4 * FORECAST_WIDTH)
    forecast, at_cap = steps_to_stop(
        [wide, dataclasses.replace(wide, experiment=_run(16, FORECAST_WIDTH).experiment)]
    )
    assert forecast == at_cap
    trained = _trained(wide)["steps_to_eps"]
    assert 0.5 * trained <= forecast <= 2 * trained, (forecast, trained)


def test_a_run_that_cannot_fit_or_leaves_the_kernel_regime_is_forecast_its_budget():
    # m = 4, d = 8: H(0) has rank below n = 32 (softmax loses one direction per input), so the
    # run never fits and trains its whole budget. lr_scale 3 makes the top mode grow under
    # H(0), but the softmax's bounded outputs keep it from diverging: it trains its budget.
    singular, unstable = _run(32, 4), _run(32, 256, lr_scale=3.0)
    forecast = steps_to_stop([singular, unstable])
    assert forecast[0] == 3000 and _trained(singular)["status"] == "budget_exhausted"
    assert forecast[1] == 3000 and _trained(unstable)["status"] == "budget_exhausted"
