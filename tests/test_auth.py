"""Credentials, for real on loopback: a Ray cluster with token authentication refuses a client
without its token, and an MLflow server with MLflow's basic-auth app (users and passwords)
refuses a client without a password and takes sdyn's writes with the credentials from the
environment, the password never on a command line, in an output, a log or the store.

PostgreSQL comes from the distribution's packages (.ci/run installs them); the server test is
skipped only where they are missing.
"""

import base64
import json
import os
import secrets
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import harness
import mlflow
import pytest

from sdyn.analysis.load import load_sweep

pytestmark = pytest.mark.slow
SMALL = ["+grid=width", "grid.n=[8,16]", "grid.widths=[4,16]", "grid.seeds=2"]
SMALL += ["sweep.progress=false", "sweep.name=auth"]


def _client(address: str, env: dict) -> subprocess.CompletedProcess:
    """A plain Ray client (``ray.init``) of the cluster at ``address``."""
    code = f"import ray; ray.init(address={address!r}, log_to_driver=False); print('joined')"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )


def test_a_ray_client_without_the_cluster_s_token_is_refused(tmp_path):
    cluster = harness.RayCluster(tmp_path, nodes=1)  # token authentication, a fresh token
    # No token file to fall back on (~/.ray/auth_token): only what each client is given.
    home = {"HOME": str(tmp_path)}
    try:
        cluster.start()
        assert _client(cluster.address, {**cluster.env, **home}).stdout.strip() == "joined"

        none = {k: v for k, v in cluster.env.items() if not k.startswith("RAY_AUTH")}
        refused = _client(cluster.address, {**none, **home})
        assert refused.returncode != 0 and "joined" not in refused.stdout, refused.stderr

        # sdyn's driver with another token: exit 2, no store written, sdyn's one line last
        # (after the warnings Ray's C++ client prints at each of its retries, ~20 s).
        other = {**cluster.env, **home, "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        sweep = subprocess.run(
            [sys.executable, "-m", "sdyn.sweep", *SMALL, "cluster=address"]
            + [f"cluster.address={cluster.address}", f"tracking.uri=sqlite:///{tmp_path}/s.db"],
            cwd=tmp_path,
            env=other,
            capture_output=True,
            text=True,
            timeout=300,
        )
        lines = sweep.stderr.strip().splitlines()
        assert sweep.returncode == 2 and "Traceback" not in sweep.stderr, sweep.stderr[-3000:]
        refused = f"sdyn: error: cannot join the Ray cluster at {cluster.address}: "
        assert lines[-1].startswith(refused), sweep.stderr[-3000:]
        assert "is RAY_AUTH_TOKEN its token" in lines[-1]  # a cause Ray does not name
        assert not (tmp_path / "s.db").exists()
    finally:
        cluster.stop()


def _request(url: str, auth: tuple[str, str] | None = None, body: dict | None = None) -> int:
    """The HTTP status of a GET (or, with ``body``, a JSON POST) to ``url``."""
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    data = None if body is None else json.dumps(body).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_basic_auth_tracking_server_refuses_strangers_and_takes_sdyn_s_credentials(
    postgres, tmp_path, monkeypatch
):
    root = tmp_path / "server"
    root.mkdir()
    config = root / "basic_auth.ini"
    config.write_text(
        "[mlflow]\n"
        "default_permission = NO_PERMISSIONS\n"
        f"database_uri = sqlite:///{root / 'users.db'}\n"
        "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        # A password checked once a minute, not at each request (PBKDF2 takes milliseconds).
        "auth_cache_ttl_seconds = 60\n"
    )
    admin = ("admin", secrets.token_hex(16))
    server = harness.TrackingServer(
        postgres,
        root,
        MLFLOW_WORKERS="1",
        MLFLOW_APP_NAME="basic-auth",
        MLFLOW_AUTH_CONFIG_PATH=str(config),
        MLFLOW_AUTH_ADMIN_USERNAME=admin[0],
        MLFLOW_AUTH_ADMIN_PASSWORD=admin[1],
        MLFLOW_FLASK_SERVER_SECRET_KEY=secrets.token_hex(16),
    )
    user, password = "sdyn", secrets.token_hex(16)
    try:
        server.start()
        api = f"{server.uri}/api/2.0/mlflow"
        created = _request(f"{api}/users/create", admin, {"username": user, "password": password})
        assert created == 200

        # Refused: no credentials, a wrong password.
        search = f"{api}/experiments/search?max_results=10"
        assert _request(search) == 401
        assert _request(search, (user, secrets.token_hex(16))) == 401
        assert _request(search, (user, password)) == 200

        # sdyn, its credentials only in the environment.
        env = {**os.environ, "MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}
        args = [
            *SMALL,
            "tracking=server",
            f"tracking.uri={server.uri}",
            f"sweep.out_dir={tmp_path}",
        ]
        sweep = subprocess.Popen(
            [sys.executable, "-m", "sdyn.sweep", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        log = harness.Events(tmp_path / "auth" / "events.jsonl")
        log.wait(lambda log: log.of("bundle_started"), sweep)  # the driver and Ray's workers
        command_lines = [p.cmd for p in harness.processes()]
        out, err = sweep.communicate(timeout=600)
        assert sweep.returncode == 0, err[-3000:]

        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
        assert len(load_sweep("auth", server.uri)) == 8
        client = mlflow.tracking.MlflowClient(server.uri)
        runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    finally:
        server.stop()

    assert len(runs) == 1 + 4  # the parent and its cells
    assert not any(password in line for line in command_lines)
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db"]
    ray_logs = [p for p in Path("/tmp/ray").glob(f"session_*_{sweep.pid}/logs/**/*") if p.is_file()]
    assert ray_logs and any(p.name == "mlflow-server.log" for p in files)  # the logs are read
    leaks = [str(p) for p in files + ray_logs if password.encode() in p.read_bytes()]
    assert leaks == [] and password not in out + err
    recorded = [(r.data.params, r.data.tags, r.data.metrics) for r in runs]
    assert password not in json.dumps(recorded)
