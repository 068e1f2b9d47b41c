"""Shared fixtures: one embedded Ray instance per test session, shut down at the end; a
PostgreSQL server and an MLflow tracking server on it (cluster/mlflow-server.sh, the recipe users
run), which a test may stop and start again on the same port and store.

PostgreSQL comes from the distribution's packages (.ci/run installs them); the tests that need it
are skipped only where they are missing.
"""

import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

# Sweeps, Ray workers and the statistical tests share two cores: OpenBLAS threads that spin while
# they wait took them from the others (two fit tests: 12 s alone, 86 s beside a sweep). Set
# before NumPy loads, and inherited by every process a test starts.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import ray  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


@pytest.fixture(scope="session", autouse=True)
def _ray_shutdown():
    yield
    if ray.is_initialized():
        ray.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_postgres(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    # PostgreSQL refuses to run as root: drop to its own system user when we are root.
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    return subprocess.run(prefix + cmd, check=True, capture_output=True, text=True, **kw)


def wait_http(url: str, seconds: float) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=2).read()
            return
        time.sleep(0.5)
    raise TimeoutError(url)


@pytest.fixture
def postgres():
    if not PG_BIN:
        pytest.skip("PostgreSQL server binaries not installed (.ci/run installs them)")
    bin_dir = PG_BIN[-1]
    root = Path(tempfile.mkdtemp(prefix="sdyn-pg-"))
    root.chmod(0o755)
    data, password = root / "data", secrets.token_hex(16)
    (root / "pw").write_text(password)
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(root / "pw", "postgres")
    port = free_port()
    _as_postgres(
        [
            f"{bin_dir}/initdb",
            "-D",
            str(data),
            "-U",
            "mlflow",
            "--auth=scram-sha-256",
            f"--pwfile={root / 'pw'}",
        ]
    )
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1"
    _as_postgres(
        [f"{bin_dir}/pg_ctl", "-D", str(data), "-o", opts, "-w", "-l", str(root / "log"), "start"]
    )
    env = {**os.environ, "PGPASSWORD": password}
    subprocess.run(
        [f"{bin_dir}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "mlflow", "mlflow"],
        check=True,
        env=env,
    )
    yield {
        "PGHOST": "127.0.0.1",
        "PGPORT": str(port),
        "PGUSER": "mlflow",
        "PGPASSWORD": password,
        "PGDATABASE": "mlflow",
    }
    _as_postgres([f"{bin_dir}/pg_ctl", "-D", str(data), "-m", "immediate", "stop"])
    shutil.rmtree(root, ignore_errors=True)


class TrackingServer:
    """An ``mlflow server`` on PostgreSQL at ``uri``, started by cluster/mlflow-server.sh."""

    def __init__(self, env: dict, uri: str):
        self.env, self.uri, self.process = env, uri, None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [str(REPO / "cluster" / "mlflow-server.sh")],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_http(f"{self.uri}/health", 120)

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=30)


@pytest.fixture
def tracking_server(postgres, tmp_path):
    port = free_port()
    env = {
        **os.environ,
        **postgres,
        "MLFLOW_PORT": str(port),
        "ARTIFACTS": f"file://{tmp_path}/artifacts",
    }
    server = TrackingServer(env, f"http://127.0.0.1:{port}")
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            server.stop()


# The two test processes take whole files (pyproject.toml: --dist loadfile) in collection order
# (--no-loadscope-reorder: pytest-xdist's default hands out the files with the most tests first,
# which left the one-test chaos and cluster files, 117 s and 60 s, to the end, one process
# running them alone). The longest files go first, so that none starts late and runs on alone
# while the other process idles; seconds of a fresh-clone .ci/run on 2 cores, 2026-11-26: 484,
# 140, 117, 68, 61, 60, 41, 39, 32, 32, 31, 30 (durations summed over the suite: 1,295 s, so
# 648 s is the floor for two processes). The rest keep their order.
LONGEST_FIRST = (
    "test_reliability.py",
    "test_stop.py",
    "test_chaos.py",
    "test_threshold_search_e2e.py",
    "test_tutorial.py",
    "test_wheel.py",
    "test_cluster.py",
    "test_quiet.py",
    "test_score.py",
    "test_names.py",
    "test_plan.py",
    "test_sweep_e2e.py",
    "test_implicit_bias.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole
