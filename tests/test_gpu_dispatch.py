"""The GPU dispatch path, on a CPU machine: a real embedded Ray that declares one GPU.

Ray accounts for a declared GPU exactly as for a real one (it assigns its id and holds it), so
what is checked here is the dispatch: valid options, the GPU taken, workers reused, a GPU worker
lost and its bundle trained again. torch sees no CUDA on this machine, so the GPU worker trains
on the CPU (and says so in its outcome).
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
import mlflow
import pandas as pd
import pytest
import ray
import torch

from sdyn.engine import dispatch
from sdyn.engine.bundles import make_bundles
from sdyn.experiments import ntk
from sdyn.grid import expand
from sdyn.plan import plan

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


def test_a_gpu_worker_killed_while_it_trains_is_retried_and_its_runs_recorded_once(tmp_path):
    # The GPU actor's process is killed -9 (by itself, on cue) while it trains a bundle, three
    # times: Ray restarts the actor and retries the call twice (max_task_retries=2), then the
    # engine submits the bundle again itself (a system retry), and the fourth try trains it.
    args = ["experiment=faults", "+grid=width", "grid.n=[8,16]", "grid.widths=[4,16]"]
    args += ["grid.seeds=2", "sweep.bundle_size=2", "sweep.name=gpu", "sweep.progress=false"]
    args += ["cluster.num_cpus=2", "cluster.num_gpus=1", "cluster.device=cuda"]
    args += [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"sweep.out_dir={tmp_path}"]
    planned = plan(args).hashes
    victim = planned[0]
    env = {**os.environ, **harness.faulty(tmp_path / "faults", kill={victim: 3})}
    sweep = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert len(list((tmp_path / "faults").glob(f"kill-{victim}-*"))) == 3  # killed 3 times

    log = harness.Events(tmp_path / "gpu" / "events.jsonl")
    log.poll()
    assert {e["device"] for e in log.of("bundle_started")} == {"cuda"}
    (retried,) = log.of("bundle_retried")  # Ray's own retries are not the engine's
    assert victim in retried["runs"] and retried["attempt"] == 1, retried
    again = [e for e in log.of("bundle_started") if e["bundle"] == retried["bundle"]]
    assert [e["attempt"] for e in again] == [0, 1]
    assert sorted(log.runs("bundle_finished")) == sorted(planned)
    assert sorted(log.runs("recorded")) == sorted(planned)

    # The store: each run recorded once, trained (read back with plain MLflow and Parquet).
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (parent,) = client.search_runs(
        [client.get_experiment_by_name("sdyn").experiment_id], "tags.`sdyn.kind` = 'sweep'"
    )
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(client.download_artifacts(parent.info.run_id, "runs", tmp)).glob("*.parquet")
        table = pd.concat([pd.read_parquet(f) for f in files])
    assert sorted(table["config_hash"]) == sorted(planned)
    assert "failed" not in set(table["status"])
