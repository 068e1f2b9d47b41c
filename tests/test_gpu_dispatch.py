"""The GPU dispatch path, on a CPU machine: a real embedded Ray that declares one GPU.

Ray accounts for a declared GPU exactly as for a real one (it assigns its id and holds it), so
what is checked here is the dispatch: valid options, the GPU taken, workers reused. torch sees
no CUDA on this machine, so the GPU worker trains on the CPU (and says so in its outcome).
"""

import time

import pytest
import ray
import torch

from sdyn.engine import dispatch
from sdyn.engine.bundles import make_bundles
from sdyn.experiments import ntk
from sdyn.grid import expand

pytestmark = pytest.mark.slow  # each test starts a real Ray instance


@pytest.fixture
def ray_with_a_gpu():
    if ray.is_initialized():  # the session's shared instance declares no GPU
        ray.shutdown()
    ray.init(
        address="local",
        num_cpus=2,
        num_gpus=1,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
    )
    yield
    ray.shutdown()


def test_gpu_bundles_take_the_gpu_and_reuse_one_worker(ray_with_a_gpu):
    cfg = ntk.NTKConfig(steps=200, record_points=8)
    grid = ntk.WidthGrid(n=[8], widths=[4, 8, 16, 32], seeds=2)
    runs = expand(cfg, ntk.SphereData(), grid)
    bundles = make_bundles(runs, ntk.shape_key, ntk.footprint, "cuda")
    assert len(bundles) == 4
    devices = ["cuda", "cuda", "cuda", "cpu"]
    outcomes = []
    dispatch.dispatch("ntk", bundles, outcomes.append, devices)

    assert sorted(o.bundle for o in outcomes) == [0, 1, 2, 3]
    assert all(o.error is None for o in outcomes)
    on_gpu = [o for o in outcomes if devices[o.bundle] == "cuda"]
    assert all(o.gpus == ("0",) for o in on_gpu)  # each GPU bundle held the declared GPU
    assert len({o.worker for o in on_gpu}) == 1  # one process served all three
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert all(o.device == expected for o in on_gpu)
    (on_cpu,) = (o for o in outcomes if devices[o.bundle] == "cpu")
    assert on_cpu.gpus == () and on_cpu.device == "cpu"
    # The same science as training in this process.
    for o in outcomes:
        direct = ntk.train(bundles[o.bundle], "cpu").summaries
        assert [s["final_loss"] for s in o.result.summaries] == [s["final_loss"] for s in direct]
    # The GPU actor is gone and its GPU is free again.
    deadline = time.monotonic() + 30
    while ray.available_resources().get("GPU", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("GPU", 0) == 1


def test_cuda_bundles_on_a_cluster_without_gpus_are_refused():
    dispatch.start(num_cpus=1)
    if dispatch.gpu_count() > 0:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="want a GPU"):
        dispatch.dispatch("ntk", [[object()]], lambda o: None, ["cuda"])
