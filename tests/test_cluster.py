"""The cluster path for real, on loopback: a two-node Ray cluster (`ray start --head` and a second
`ray start --address` node with its own resources, Ray's token authentication on) and an MLflow
tracking server on PostgreSQL (started by cluster/mlflow-server.sh, the recipe users run): the
fixtures of tests/conftest.py. A small sweep runs through them with tasks landing on both nodes,
and its results must equal those of the embedded local run.

PostgreSQL comes from the distribution's packages (.ci/run installs them); the test is skipped
only where they are missing.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdyn.analysis.load import load_sweep

pytestmark = pytest.mark.slow
SWEEP = ["+grid=width", "grid.n=[8,16]", "grid.widths=[4,16,64]", "grid.seeds=2"]


def _run(cwd: Path, *args: str, env: dict | None = None) -> str:
    """Run a sweep; its stdout."""
    proc = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *args, "sweep.progress=false"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_sweep_on_a_two_node_cluster_with_a_postgres_tracking_server(
    ray_cluster, tracking_server, tmp_path
):
    server = tracking_server.uri
    out = _run(
        tmp_path,
        *SWEEP,
        "sweep.name=on-cluster",
        "sweep.bundle_size=1",
        "cluster=address",
        f"cluster.address={ray_cluster.address}",
        "tracking=server",
        f"tracking.uri={server}",
        f"sweep.out_dir={tmp_path}/c",
        env=ray_cluster.env,  # Ray's token: the driver's only in its environment
    )
    assert "View run" not in out  # MLflow prints two lines per run ended on a server
    assert f"sdyn: browse it at {server}/#/experiments/" in out  # sdyn's one link instead
    page = (tmp_path / "c" / "on-cluster" / "index.html").read_text()
    assert f'href="{server}/#/experiments/' in page and "mlflow ui" not in page
    (tmp_path / "local").mkdir()
    _run(
        tmp_path / "local",
        *SWEEP,
        "sweep.name=embedded",
        f"sweep.out_dir={tmp_path}/l",
        "sweep.bundle_size=1",
    )

    remote = load_sweep("on-cluster", server)
    local = load_sweep("embedded", f"sqlite:///{tmp_path}/local/mlflow.db")
    assert len(remote) == len(local) == 12

    assert remote["node"].nunique() == 2, "tasks must land on both nodes"

    metrics = ["lambda_min", "final_loss", "max_kernel_drift", "steps_to_eps"]
    a = remote.set_index("config_hash").sort_index()
    b = local.set_index("config_hash").sort_index()
    assert (a.index == b.index).all() and (a["status"] == b["status"]).all()
    a, b = a[metrics], b[metrics]
    assert ((a - b).abs() <= 1e-12 * (1 + b.abs())).all().all()

    claims = [
        json.loads((tmp_path / d / n / "report.json").read_text())["claims"]
        for d, n in (("c", "on-cluster"), ("l", "embedded"))
    ]
    for remote_claim, local_claim in zip(*claims, strict=True):
        assert remote_claim["claim"] == local_claim["claim"]
        assert remote_claim["verdict"] == local_claim["verdict"]
        for key in ("value", "ci_low", "ci_high"):
            a, b = remote_claim[key], local_claim[key]
            assert (a is None and b is None) or abs(a - b) <= 1e-9 * (1 + abs(b)), key

    # sdyn's settings reach the nodes' tasks as they reach an embedded instance's (the nodes
    # were started without them), but the driver's cache folder, which only its machine has.
    probe = (
        "import json, os, sys, ray; from sdyn.engine import dispatch; dispatch.start(sys.argv[1])\n"
        "seen = ray.remote(lambda: [os.environ.get(k) for k in ('SDYN_SETTING', 'SDYN_CACHE')])\n"
        "tasks = [seen.options(resources={r: 0.01}).remote() for r in sys.argv[2:]]\n"
        "print(json.dumps(ray.get(tasks)))"
    )
    env = {**ray_cluster.env, "SDYN_SETTING": "on", "SDYN_CACHE": str(tmp_path / "driver-cache")}
    nodes = ["head", *(f"node{k}" for k in range(2, ray_cluster.nodes + 1))]
    out = subprocess.run(
        [sys.executable, "-c", probe, ray_cluster.address, *nodes],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.splitlines()[-1])
    assert len(seen) == 2 and all(v[0] == "on" and v[1] != env["SDYN_CACHE"] for v in seen), seen
