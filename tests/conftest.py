"""Shared fixtures: one embedded Ray instance per test session, shut down at the end; a
PostgreSQL server, an MLflow tracking server on it and a two-node Ray cluster, each built by
``harness`` (tests/harness.py), which benchmarks/chaos.py shares.

PostgreSQL comes from the distribution's packages (.ci/run installs them); the tests that need it
are skipped only where they are missing.
"""

import os

import pytest

# Sweeps, Ray workers and the statistical tests share two cores: OpenBLAS threads that spin while
# they wait took them from the others (two fit tests: 12 s alone, 86 s beside a sweep). Set
# before NumPy loads, and inherited by every process a test starts.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import harness  # noqa: E402
import ray  # noqa: E402
import torch  # noqa: E402

# Without a GPU, the fused NTK step's Triton kernels run under Triton's interpreter
# (test_fused_step.py). Set before anything imports Triton: its own jit'd helpers (tl.sum's
# combine) are decorated as interpreted or compiled when it is imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session", autouse=True)
def _ray_shutdown():
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def postgres():
    """A PostgreSQL server of the test's own (:class:`harness.Postgres`): its PG* variables."""
    if harness.postgres_bin() is None:
        pytest.skip("PostgreSQL server binaries not installed (.ci/run installs them)")
    server = harness.Postgres()
    try:
        server.start()
        yield server.env
    finally:
        server.stop()


@pytest.fixture
def tracking_server(postgres, tmp_path):
    """An MLflow server on ``postgres`` (:class:`harness.TrackingServer`), which a test may stop
    and start again on the same port and store."""
    server = harness.TrackingServer(postgres, tmp_path / "mlflow-server")
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def ray_cluster(tmp_path):
    """A two-node Ray cluster with token authentication (:class:`harness.RayCluster`); this
    process's embedded Ray from earlier tests is shut down first."""
    if ray.is_initialized():
        ray.shutdown()
    (tmp_path / "ray").mkdir()
    cluster = harness.RayCluster(tmp_path / "ray")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


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
    "test_auth.py",  # added since: 4.5 min on 2 cores shared with a chaos benchmark
    "test_threshold_search_e2e.py",
    "test_docs_tables.py",  # added since: 4.5 min on its own
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


def pytest_terminal_summary(terminalreporter):
    """Print the seed each chaos test drew (test_chaos.py), pass or fail, so that any run can
    be replayed."""
    for reports in terminalreporter.stats.values():
        for report in reports:
            seeds = [v for k, v in getattr(report, "user_properties", ()) if k == "chaos_seed"]
            if seeds and report.when == "call":
                terminalreporter.write_line(
                    f"{report.nodeid}: chaos seed {seeds[0]} (replay: SDYN_CHAOS_SEED={seeds[0]})"
                )
