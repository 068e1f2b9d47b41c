"""Grid expansion, run hashing and bundling: the plan before anything trains."""

import dataclasses

import pytest

from sdyn import plan_view, plugins
from sdyn.api import Run
from sdyn.engine import cost
from sdyn.engine.bundles import CPU_BUDGET, bundle_size, choose_device, describe, make_bundles, plan
from sdyn.experiments import ntk
from sdyn.experiments.common import log_spaced_steps
from sdyn.grid import cell_hash, config_hash, expand, run_params


def test_expand_is_the_product_of_points_and_seeds_with_checked_values():
    grid = ntk.WidthGrid(n=[8, 16], widths=[4, 16, 64], seeds=3)
    runs = expand(ntk.NTKConfig(), ntk.SphereData(), grid)
    assert len(runs) == 2 * 3 * 3
    assert {(r.experiment.n, r.experiment.m, r.seed) for r in runs} == {
        (n, m, s) for n in (8, 16) for m in (4, 16, 64) for s in range(3)
    }


def test_default_width_grid_is_geometric_and_even():
    widths = ntk.WidthGrid().width_list()
    assert widths[0] == 2 and all(b == 2 * a for a, b in zip(widths, widths[1:], strict=False))
    assert all(m % 2 == 0 for m in widths)


def test_config_hash_is_stable_and_sees_every_hyperparameter_and_the_code():
    run = expand(ntk.NTKConfig(), ntk.SphereData(), ntk.WidthGrid(n=[8], widths=[4], seeds=1))[0]
    assert config_hash(run, 3) == config_hash(dataclasses.replace(run), 3)
    changed = dataclasses.replace(run, experiment=dataclasses.replace(run.experiment, eps=1e-4))
    assert config_hash(changed, 3) != config_hash(run, 3)
    other_data = dataclasses.replace(run, data=ntk.SphereData(teacher_seed=1))
    assert config_hash(other_data, 3) != config_hash(run, 3)
    assert config_hash(run, 4) != config_hash(run, 3)  # the same config, other code
    assert cell_hash(run, 4) != cell_hash(run, 3)
    assert run_params(run)["experiment.eps"] == 1e-3 and run_params(run)["seed"] == 0


# Each of sdyn's experiments at its defaults, its first grid's first point, seed 0: the config
# and cell hashes computed before runs were keyed by their experiment's version (main at
# 15688a7). Unchanged, so the runs recorded then are still found; bumping an experiment's
# version changes its row here (ntk and score at version 4: each run its own random draws).
RECORDED_KEYS = {
    "ntk": ("46d3ec60344a4aa2", "932c965a38c9a21b"),
    "score": ("1007fc87182a89db", "b7489caad89a810b"),
    "attention_regression": ("8d0f1da4cfcb49b4", "b651698985c928d2"),
    "implicit_bias": ("6f2921a1e81d3b6b", "5572065562e56b77"),
}


@pytest.mark.parametrize("name", RECORDED_KEYS)
def test_sdyns_experiments_keep_the_keys_of_their_recorded_runs(name):
    experiment = plugins.get(name)
    grid = next(iter(experiment.grids.values()))()
    data = experiment.data[experiment.default_data]()
    run = expand(experiment.config(), data, grid)[0]
    keys = (config_hash(run, experiment.version), cell_hash(run, experiment.version))
    assert keys == RECORDED_KEYS[name]


def test_bundles_hold_one_shape_respect_the_size_and_alternate_largest_and_smallest():
    runs = expand(
        ntk.NTKConfig(), ntk.SphereData(), ntk.WidthGrid(n=[8, 64], widths=[4, 512], seeds=5)
    )
    bundles = make_bundles(runs, ntk.shape_key, ntk.footprint, "cpu", size=2)
    assert sorted(len(b) for b in bundles) == [1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]
    assert all(len({ntk.shape_key(r) for r in b}) == 1 for b in bundles)
    assert sorted(id(r) for b in bundles for r in b) == sorted(id(r) for r in runs)
    # Footprints n m: 64*512 (3 bundles), 8*512 (3), 64*4 (3), 8*4 (3). The largest first,
    # then the 3 smallest left, then the largest left, and so on.
    nm = [b[0].experiment.n * b[0].experiment.m for b in bundles]
    assert nm == [32768, 32, 32, 32, 32768, 256, 256, 256, 32768, 4096, 4096, 4096]
    auto = make_bundles(runs, ntk.shape_key, ntk.footprint, "cpu")
    assert all(len(b) <= bundle_size(ntk.footprint(b[0]), "cpu") for b in auto)


def test_bundle_size_fits_the_cache_budget():
    assert bundle_size(CPU_BUDGET // 8, "cpu") == 8
    assert bundle_size(10 * CPU_BUDGET, "cpu") == 1
    assert bundle_size(CPU_BUDGET // 8, "cuda") > 8


def test_log_spaced_steps_cover_the_budget():
    steps = log_spaced_steps(2000, 100)
    assert steps[0] == 0 and steps[-1] == 2000 and steps == sorted(set(steps))
    assert len(steps) <= 100
    assert log_spaced_steps(5, 100) == [0, 1, 2, 3, 4, 5]


def test_device_policy_sends_only_large_runs_of_gpu_experiments_to_gpus():
    assert choose_device("auto", 1 << 20, 1 << 18, gpus=1) == "cuda"
    assert choose_device("auto", 1 << 10, 1 << 18, gpus=1) == "cpu"  # small shape
    assert choose_device("auto", 1 << 20, None, gpus=1) == "cpu"  # a CPU-kernel experiment
    assert choose_device("auto", 1 << 20, 1 << 18, gpus=0) == "cpu"  # no GPU in the cluster
    assert choose_device("cpu", 1 << 20, 1 << 18, gpus=1) == "cpu"
    assert choose_device("cuda", 1 << 10, None, gpus=0) == "cuda"
    runs = expand(
        ntk.NTKConfig(), ntk.SphereData(), ntk.WidthGrid(n=[8, 128], widths=[4, 2048], seeds=2)
    )

    def device(run):
        return choose_device("auto", ntk.footprint(run), ntk.GPU_FOOTPRINT, gpus=1)

    bundles, devices = plan(runs, ntk.shape_key, ntk.footprint, device)
    assert [b[0].experiment.n * b[0].experiment.m for b in bundles] == [
        128 * 2048,
        8 * 2048,
        8 * 4,
        128 * 4,
    ]
    assert devices == ["cuda", "cpu", "cpu", "cpu"]
    assert describe(len(runs), devices) == "8 runs in 4 bundles: 1 on cuda, 3 on cpu"


def test_gpu_bundles_pack_shapes_of_one_pack_key_largest_first():
    runs = expand(
        ntk.NTKConfig(),
        ntk.SphereData(),
        ntk.WidthGrid(n=[16, 32, 128], widths=[4, 1024, 2048], seeds=2),
    )

    def device(run):
        return "cuda" if run.experiment.m >= 1024 else "cpu"

    bundles, devices = plan(runs, ntk.shape_key, ntk.footprint, device, pack_key=ntk.pack_key)
    assert devices == ["cuda", "cuda", "cpu", "cpu", "cpu"]
    # n = 16 and 32 share a power-of-4 class, as do m = 1024 and 2048; n = 128 does not.
    shapes = [[(r.experiment.n, r.experiment.m) for r in b] for b in bundles[:2]]
    assert shapes[0] == [(128, 2048)] * 2 + [(128, 1024)] * 2
    assert shapes[1] == [(32, 2048)] * 2 + [(16, 2048)] * 2 + [(32, 1024)] * 2 + [(16, 1024)] * 2
    assert all(len({ntk.shape_key(r) for r in b}) == 1 for b in bundles[2:])


def test_a_packed_bundles_step_costs_its_padding():
    cfg = ntk.NTKConfig(d=8)
    small, large = (
        Run(dataclasses.replace(cfg, n=n, m=m), ntk.SphereData(), 0)
        for n, m in [(8, 16), (64, 1024)]
    )
    flops, nbytes = ntk.step_cost([large])
    assert flops == 4 * 64 * 1024 * 8 + 4 * 64 * 1024 + 10 * 64 * 1024
    assert nbytes == 8 * (4 * 64 * 1024 + 2 * 8 * 1024 + 1024 + 64 * 8 + 64)
    assert ntk.step_cost([small, large]) == (2 * flops, 2 * nbytes)  # padded to n 64, m 1024
    f32 = Run(dataclasses.replace(large.experiment, dtype="float32"), ntk.SphereData(), 0)
    assert ntk.step_cost([f32]) == (flops, nbytes / 2)


def test_the_fused_step_is_priced_per_run_and_without_the_logits(monkeypatch):
    """With SDYN_FUSED=1, a GPU bundle's step is fused.py's: each run at its own
    n and m (its kernels skip the padding's blocks), and no (n, m) array written or read."""
    from sdyn.experiments.ntk import bundling

    cfg = ntk.NTKConfig(d=8)
    small, large = (
        Run(dataclasses.replace(cfg, n=n, m=m), ntk.SphereData(), 0)
        for n, m in [(8, 16), (1024, 65536)]
    )
    compiled = ntk.step_cost([small, large])
    monkeypatch.setenv("SDYN_FUSED", "1")
    fused = [ntk.step_cost([run]) for run in (small, large)]
    assert ntk.step_cost([small, large]) == tuple(map(sum, zip(*fused, strict=True)))
    assert fused[1][0] == 6 * 1024 * 65536 * 8 + 4 * 1024 * 65536 + 12 * 1024 * 65536
    # The compiled step moves the logits and the gradient factor, 4 n m numbers; the fused
    # step its inputs and partial sums, under 1% of that at the large sweep's widest shape.
    assert fused[1][1] < 0.01 * compiled[1] / 2
    assert bundling.step_cost([large]) == bundling.fused_step_cost([large])


def test_gpu_estimates_take_the_binding_limit_of_the_named_card():
    assert cost.card("NVIDIA H100 PCIe").model == "H100 PCIe"
    assert cost.card("NVIDIA H100 80GB HBM3").model == "H100"
    assert cost.card("NVIDIA H200").model == "H200"
    assert cost.card("NVIDIA GeForce GTX 1080") is None
    h100 = cost.card("NVIDIA H100 80GB HBM3")
    assert cost.gpu_seconds(h100, 1e6, 1e6, 1000) == 1000 * cost.GPU_ITERATION_S  # launch-bound
    share = cost.GPU_LIMIT_SHARE  # of the binding limit, as a step reaches it
    assert cost.gpu_seconds(h100, 1e9, 3.35e10, 10) == pytest.approx(10 * 0.01 / share)
    assert cost.gpu_seconds(h100, 6.7e12, 1e6, 2) == pytest.approx(2 * 0.1 / share)  # FP64


def test_the_probe_trains_the_largest_run_it_can_afford():
    runs = [1 << 10, 1 << 20, cost.PROBE_FOOTPRINT, cost.PROBE_FOOTPRINT + 1]
    assert cost.probe_runs(runs, lambda r: r) == (1 << 10, cost.PROBE_FOOTPRINT)
    too_large = [2 * cost.PROBE_FOOTPRINT, 3 * cost.PROBE_FOOTPRINT]
    assert cost.probe_runs(too_large, lambda r: r) == (too_large[0], too_large[0])


def test_the_probe_prices_the_steps_of_runs_that_stop_early():
    experiment = plugins.get("ntk")
    cfg = ntk.NTKConfig(steps=2000)
    small, large = (
        Run(dataclasses.replace(cfg, n=n, m=m), ntk.SphereData(), 0)
        for n, m in [(8, 16), (64, 2048)]
    )
    assert 0 < experiment.train([large], "cpu").summaries[0]["steps_to_eps"] < 100
    model = cost.measure("ntk", small, large, experiment.footprint)
    # Without full_budget both probe trainings (100 and 200 steps) stopped at the same step, and
    # the model priced a step at nothing: 2,000 steps cost as much as 100.
    footprint = experiment.footprint(large)
    assert model.seconds(footprint, 2000) > 3 * model.seconds(footprint, 100)


# A run that sleeps through its steps and records: the probe's price of a step is known.
TIMED = """
from dataclasses import dataclass, field
import time

import pandas as pd

from sdyn.analysis.kinds import PowerLaw
from sdyn.api import BundleResult, Experiment
from sdyn.experiments.common import log_spaced_steps


@dataclass
class Config:
    name: str = "timed"
    size: int = 1
    steps: int = 20000
    record_points: int = 100


@dataclass
class Grid:
    name: str = "sizes"
    size: list[int] = field(default_factory=lambda: [1, 2])
    seeds: int = 1

    def points(self):
        return [{"size": k} for k in self.size]


def train(runs, device=None):
    c = runs[0].experiment
    with open(TRAINED, "a") as log:  # what the probe asked for
        log.write(f"{c.size} {c.steps}\\n")
    held = [b"1" * (r.experiment.size * UNIT * HOLDS) for r in runs]  # written: resident
    time.sleep(STEP_S * c.steps + RECORD_S * len(log_spaced_steps(c.steps, c.record_points)))
    del held
    return BundleResult([{"status": "converged", "y": 1.0} for _ in runs], pd.DataFrame())


EXPERIMENT = Experiment(
    name="timed", config=Config, grids={"sizes": Grid}, train=train,
    footprint=lambda run: run.experiment.size * UNIT,
    claims=(PowerLaw(id="flat", statement="y ~ 1", source="a test", quantity="y",
                     axis="experiment.size", theory=0.0, direction="=="),),
)
"""


def _timed_toy(
    tmp_path, monkeypatch, name: str, step_s: float, record_s: float, unit=1, holds=False
):
    """TIMED as module ``name`` (one per test: plugins are cached), its footprint ``size *
    unit`` (bytes it holds while it trains if ``holds``); it logs what it trains to
    trained.txt."""
    source = (
        f"STEP_S, RECORD_S, UNIT, HOLDS = {step_s}, {record_s}, {unit}, {holds}\n"
        f"TRAINED = {str(tmp_path / 'trained.txt')!r}\n{TIMED}"
    )
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))  # the probe's spawned process imports it too
    return plugins.get(name)


def test_the_probe_prices_a_step_without_the_records_a_short_run_crowds_in(tmp_path, monkeypatch):
    step_s, record_s = 5e-4, 1e-2  # a record costs 20 steps (at n 1024 one costs about 30)
    experiment = _timed_toy(tmp_path, monkeypatch, "timed_records", step_s, record_s)
    small, large = (Run(experiment.config(size=k), None, 0) for k in (1, 2))
    model = cost.measure("timed_records", small, large, experiment.footprint)
    # Timed with its records, 200 steps over 100 priced a step at 1.3 ms (8 more records).
    assert model.per_byte_step_s * 2 == pytest.approx(step_s, rel=0.3)
    records = len(log_spaced_steps(20000, 100))
    assert model.seconds(2, 20000) == pytest.approx(20000 * step_s + records * record_s, rel=0.2)


def test_a_plan_of_only_runs_too_large_to_probe_probes_its_smallest_for_fewer_steps(
    tmp_path, monkeypatch
):
    # 5 ms a step: the probes' 20-step difference (0.1 s) stands above a loaded machine's
    # jitter, where at 0.1 ms a step (2 ms) it once measured 5e-6 s.
    step_s = 5e-3
    experiment = _timed_toy(tmp_path, monkeypatch, "timed_large", step_s, 0.0, cost.PROBE_FOOTPRINT)
    runs = [Run(experiment.config(size=k), None, 0) for k in (20, 40)]
    model = cost.measure(
        "timed_large", *cost.probe_runs(runs, experiment.footprint), experiment.footprint
    )
    trained = (tmp_path / "trained.txt").read_text().split("\n")[:-1]
    # 20x the largest footprint it probes: 100 / 20 steps, and 5x that; trained once, not twice.
    assert sorted(set(trained)) == ["20 25", "20 5"] and len(trained) == 3 * 3 + 1  # +1: 2 runs
    assert model.per_byte_step_s * 20 * cost.PROBE_FOOTPRINT == pytest.approx(step_s, rel=0.3)


def test_a_plan_of_one_shape_prices_a_bundles_memory_by_its_runs(tmp_path, monkeypatch):
    unit = 128 << 20  # the run holds 128 MiB: beyond PROBE_FOOTPRINT, so probed alone
    experiment = _timed_toy(tmp_path, monkeypatch, "timed_memory", 1e-5, 0.0, unit, holds=True)
    run = Run(experiment.config(size=1), None, 0)
    parent = b"1" * (1 << 30)  # the probe's parent is large (a test worker, a driver)
    model = cost.measure("timed_memory", run, run, experiment.footprint)
    del parent
    # Its memory measured after it trained, a bundle of 4 was priced as one; and the probe read
    # its parent's peak (getrusage keeps it across exec), above any it reached.
    assert 0.9 * 3 * unit < model.memory(4 * unit) - model.memory(unit) < 1.5 * 3 * unit


def test_the_plan_adds_a_data_sheet_estimate_on_one_gpu():
    model = cost.CostModel(0.0, 0.0, 1e-9, 1e8, 0.0, 1.0)  # 1 ns per byte and step
    stage = plan_view.Stage("grid", "cpu", [plan_view.Bundle(2, "n=8 m=16", 2 << 10, (1000, 1000))])
    gpu = plan_view.GPUPlan([(1000, 1e9, 3.35e10)], [plan_view.Bundle(1, "n=8 m=4", 1, (10,))])
    text = plan_view.format_plan(["sdyn: plan"], [stage], model, 2, (), gpu)
    line = next(line for line in text.splitlines() if line.startswith("on one GPU"))
    assert "its 1 bundle in " in line and "H100 33 s" in line and "H200 23 s" in line
    assert "a data-sheet estimate, not measured" in line and "1 left on the CPUs" in line
    alone = plan_view.format_plan(["sdyn: plan"], [stage], model, 2)
    assert "on one GPU" not in alone
    assert "peak memory 95 MiB (1 bundles at once)" in alone  # said 2, of 1 bundle


def test_a_search_plan_times_its_cheapest_probes_on_the_cpus_and_one_gpu():
    model = cost.CostModel(0.0, 0.0, 1e-9, 1e8, 0.0, 1.0)  # 1 ns per byte and step
    stage = plan_view.Stage("grid", "cpu", [plan_view.Bundle(1, "n=8 m=16", 1 << 30, (100,))])
    cheap = [plan_view.Bundle(1, "n=8 m=4", 1 << 20, (1000,)) for _ in range(3)]
    gpu = plan_view.GPUPlan([(1000, 1e9, 3.35e10)], cheap[:1])
    lower = plan_view.Bound(3, cheap, gpu)
    text = plan_view.format_plan(["sdyn: plan"], [stage], model, 2, lower=lower)
    line = next(line for line in text.splitlines() if line.startswith("at least"))
    assert text.index("estimate:") < text.index(line)
    # 3 bundles of 1.05 s on 2 CPUs: 1.6 s; on one H100 the GPU's 33 s beside the CPU's 1 s.
    assert line.startswith("at least (the probes of the cheapest threshold positions, 3 runs): ")
    assert "2 s on 2 CPUs" in line and "H100 33 s" in line and "1 s on 2 CPUs beside it" in line


def test_a_bundle_on_a_gpu_is_timed_by_the_data_sheet_not_the_cpu_model():
    model = cost.CostModel(0.0, 0.0, 1e-9, 1e8, 0.0, 1.0)  # 1 ns per byte and step: 2,048 s
    big = plan_view.Bundle(1, "n=1024 m=65536", 2 << 40, (1000,), (67e12, 3.35e12))
    gpu = plan_view.GPUPlan([(1000, 67e12, 3.35e12)], [])
    text = plan_view.format_plan(["sdyn: plan"], [plan_view.Stage("grid", "cuda", [big])], model,
                                 2, (), gpu, cost.card("NVIDIA H200"))  # fmt: skip
    # 1,000 iterations of 1 s of FLOP at the H200's FP64 rate, at 30% of it: 56 min.
    assert "cuda       56 min" in text, text
    assert "their time on one H200" in text and "estimate: every bundle on a GPU" in text


def test_a_bundle_costs_each_run_its_own_steps_on_a_cpu_and_its_last_on_a_gpu():
    model = cost.CostModel(0.0, 0.0, 1e-9, 1e8, 0.0, 1.0)  # 1 ns per byte and step
    # Two runs of 1 GB: one stops after 10 steps, one after 1,000: 1,010 s on a CPU, not 2,000.
    bundle = plan_view.Bundle(2, "n=1024 m=65536", 2 * 10**9, (10, 1000), (67e12, 3.35e12))
    text = plan_view.format_plan(["sdyn: plan"], [plan_view.Stage("grid", "cpu", [bundle])],
                                 model, 1, forecast=True)  # fmt: skip
    assert "estimate: 17 min on 1 CPUs (17 min of training, each run to the step its " in text
    on_gpu = plan_view.Stage("grid", "cuda", [bundle])
    text = plan_view.format_plan(["sdyn: plan"], [on_gpu], model, 1, card=cost.card("H200"))
    assert "cuda       56 min" in text, text  # 1,000 iterations of 1 s of FLOP at 30%
