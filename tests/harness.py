"""What the tests and the chaos benchmark build and watch, in one place: a PostgreSQL server, an
MLflow tracking server on it (``cluster/mlflow-server.sh``, the recipe users run), a Ray cluster
of ``ray start`` nodes with token authentication, a cluster address that never serves Ray, a
driver's event log as it grows (:mod:`sdyn.events`), and the environment of a sweep whose
experiment fails on cue (``tests/faults.py``).

It is test infrastructure, not part of sdyn: it lives beside the tests and is not installed. The
tests import it as ``harness`` (pytest puts ``tests/`` on ``sys.path`` for ``conftest.py``, which
holds the pytest fixtures made of it), and ``benchmarks/chaos.py`` puts ``tests/`` on its own
``sys.path``. It needs only the standard library (and sdyn, in :func:`first_cell`), so the
benchmark runs without pytest.

Everything started here is ended by process id or session id, never by name: ``ray stop`` or
``pkill ray`` would end every Ray on a shared machine. Needs Linux (``/proc``) and, for
PostgreSQL, the distribution's server binaries (``.ci/run`` installs them).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from glob import glob
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
KILL_AT = TESTS / "kill_at.py"  # runs a sweep and kills it at a named write (its docstring)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def never_serving_ray():
    """An address (``host:port``) that speaks HTTP/2, so it passes sdyn's address check, but
    never serves Ray: ``ray.init`` waits on it for good."""
    server = socket.create_server(("127.0.0.1", 0))
    held = []  # connections kept open: a closed one would end ray.init's wait

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed
                return
            conn.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))  # an empty SETTINGS frame
            held.append(conn)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


def wait_http(url: str, seconds: float) -> None:
    """Return once ``url`` answers; TimeoutError after ``seconds``."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(url, timeout=2).read()
            return
        time.sleep(0.25)
    raise TimeoutError(url)


def python_path(*first: Path) -> str:
    """``PYTHONPATH`` with ``first`` and this repository ahead of what it holds: Ray's workers
    import this tree's sdyn, not another install of it."""
    parts = [str(p) for p in (*first, REPO)] + [os.environ.get("PYTHONPATH", "")]
    return os.pathsep.join(p for p in parts if p)


# --- processes ---------------------------------------------------------------------------------


@dataclass
class Proc:
    pid: int
    ppid: int
    sid: int
    cmd: str


def processes() -> list[Proc]:
    """Every live process of this machine, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z":  # a zombie: already dead
            continue
        found.append(Proc(int(entry), int(fields[1]), int(fields[3]), cmd.decode(errors="replace")))
    return found


def kill9(pid: int) -> bool:
    """kill -9 ``pid``; False if it was gone."""
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


# --- PostgreSQL, the tracking server ------------------------------------------------------------


def postgres_bin() -> str | None:
    """The directory of PostgreSQL's server binaries (the distribution's, else on PATH)."""
    found = sorted(glob("/usr/lib/postgresql/*/bin"))
    if found:
        return found[-1]
    initdb = shutil.which("initdb")
    return str(Path(initdb).parent) if initdb else None


class Postgres:
    """A PostgreSQL server of its own on 127.0.0.1 with a fresh password and a database
    ``mlflow`` owned by user ``mlflow``; ``env`` holds the PG* variables a client needs (the
    password only there). Its data lives in a temporary directory, removed by :meth:`stop`."""

    def __init__(self):
        self.bin = postgres_bin()
        if self.bin is None:
            raise RuntimeError("PostgreSQL server binaries not found (.ci/run installs them)")
        self.root = Path(tempfile.mkdtemp(prefix="sdyn-pg-"))
        self.data = self.root / "data"
        self.env: dict[str, str] = {}

    def _as_postgres(self, cmd: list[str]) -> None:
        # PostgreSQL refuses to run as root: drop to its own system user when we are root.
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        done = subprocess.run(prefix + cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{Path(cmd[0]).name} failed: {done.stderr.strip()[-2000:]}")

    def start(self) -> None:
        self.root.chmod(0o755)
        password, pwfile = secrets.token_hex(16), self.root / "pw"
        pwfile.write_text(password)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(pwfile, "postgres")
        try:
            self._as_postgres(
                [f"{self.bin}/initdb", "-D", str(self.data), "-U", "mlflow"]
                + ["--auth=scram-sha-256", f"--pwfile={pwfile}"]
            )
        finally:
            pwfile.unlink()  # initdb has stored its hash; the password lives on in env only
        port = free_port()
        opts = f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1"
        log = str(self.root / "log")
        self._as_postgres(
            [f"{self.bin}/pg_ctl", "-D", str(self.data), "-o", opts, "-w", "-l", log, "start"]
        )
        self.env = {
            "PGHOST": "127.0.0.1",
            "PGPORT": str(port),
            "PGUSER": "mlflow",
            "PGPASSWORD": password,
            "PGDATABASE": "mlflow",
        }
        subprocess.run(
            [f"{self.bin}/createdb", "mlflow"],
            check=True,
            env={**os.environ, **self.env, "PGDATABASE": "postgres"},
        )

    def stop(self) -> None:
        if self.data.exists():
            with contextlib.suppress(RuntimeError):
                self._as_postgres(
                    [f"{self.bin}/pg_ctl", "-D", str(self.data), "-m", "immediate", "stop"]
                )
        shutil.rmtree(self.root, ignore_errors=True)


class TrackingServer:
    """``cluster/mlflow-server.sh`` on a PostgreSQL server (``pg_env``: its PG* variables): an
    MLflow server on 127.0.0.1 at ``uri``, its artifacts and log (``mlflow-server.log``) in
    ``root``. ``env``: more of the script's variables (``MLFLOW_WORKERS``, ...)."""

    def __init__(self, pg_env: dict[str, str], root: Path, **env: str):
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            **pg_env,
            "MLFLOW_PORT": str(self.port),
            "ARTIFACTS": f"file://{root / 'artifacts'}",
            **env,
        }
        self.process: subprocess.Popen | None = None
        self.log = root / "mlflow-server.log"
        self.start_s = 10.0  # seconds its last start took to answer
        self._up: threading.Thread | None = None

    def start(self, wait: bool = True) -> None:
        """Launch it; with ``wait``, return once it answers (else call :meth:`wait`)."""
        launched = time.monotonic()
        with open(self.log, "a") as log:
            self.process = subprocess.Popen(
                [str(REPO / "cluster" / "mlflow-server.sh")],
                env=self.env,
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def answered() -> None:
            wait_http(f"{self.uri}/health", 120)
            self.start_s = time.monotonic() - launched

        self._up = threading.Thread(target=answered, daemon=True)
        self._up.start()
        if wait:
            self.wait()

    def wait(self) -> None:
        self._up.join()
        wait_http(f"{self.uri}/health", 1)  # TimeoutError if it never answered

    def stop(self) -> None:
        """SIGTERM to the server's processes, as a service manager stops it (requests in flight
        are answered or refused, none half-written)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None


# --- the Ray cluster ---------------------------------------------------------------------------


class RayCluster:
    """A head and ``nodes - 1`` more nodes, each ``ray start`` with one CPU and a resource
    named as the node (``head``, ``node2``, ...), Ray's token authentication on with a fresh
    token. ``env`` is what a driver of it needs (the token only there; this tree's sdyn on
    ``PYTHONPATH``), ``address`` where it listens.

    Each ``ray start`` runs in a session of its own: every process of that node (GCS, raylet,
    agents, workers) carries the session id, which is how they are found and ended."""

    def __init__(self, root: Path, nodes: int = 2):
        self.root, self.nodes = root, nodes
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("PG")},
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "PYTHONPATH": python_path(),
        }
        self.sessions: dict[str, int] = {}  # node name -> session id (its ray start's pid)

    def _start(self, name: str, args: list[str]) -> None:
        ray = str(Path(sys.executable).parent / "ray")
        common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        with open(self.root / f"ray-{name}.log", "w") as log:
            proc = subprocess.Popen(
                [ray, "start", *args, *common, f'--resources={{"{name}": 1}}'],
                env=self.env,
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.sessions[name] = proc.pid
            if proc.wait(timeout=180) != 0:
                raise RuntimeError(f"ray start of the {name} failed: see {log.name}")

    def start(self) -> None:
        self._start("head", ["--head", f"--port={self.port}", "--include-dashboard=false"])
        for k in range(2, self.nodes + 1):
            self._start(f"node{k}", [f"--address={self.address}"])

    def of(self, name: str) -> list[Proc]:
        """The live processes of node ``name``."""
        return [p for p in processes() if p.sid == self.sessions.get(name)]

    def raylet(self, name: str) -> Proc | None:
        return next((p for p in self.of(name) if "/raylet/raylet " in p.cmd), None)

    def training(self, name: str | None = None) -> list[Proc]:
        """Worker processes training a bundle now (on node ``name``, or on any node)."""
        names = [name] if name else list(self.sessions)
        return [
            p
            for n in names
            for p in self.of(n)
            if p.cmd.startswith(("ray::_train_bundle", "ray::_GPUWorker.train"))
        ]

    def stop(self) -> None:
        for _ in range(20):
            left = [p for n in self.sessions for p in self.of(n)]
            if not left:
                return
            for p in left:
                kill9(p.pid)
            time.sleep(0.25)


# --- following a sweep -------------------------------------------------------------------------


class Events:
    """A driver's event log (:mod:`sdyn.events`) read as it grows: ``seen`` holds every event
    read so far, oldest first."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.seen: list[dict] = []
        self._offset = 0

    def poll(self) -> list[dict]:
        """Read the events written since the last call (whole lines only); return them."""
        with contextlib.suppress(FileNotFoundError), open(self.path, "rb") as log:
            log.seek(self._offset)
            data = log.read()
            whole = data[: data.rfind(b"\n") + 1]
            self._offset += len(whole)
            new = [json.loads(line) for line in whole.splitlines()]
            self.seen += new
            return new
        return []

    def of(self, event: str) -> list[dict]:
        """The events of kind ``event`` seen so far."""
        return [e for e in self.seen if e["event"] == event]

    def runs(self, event: str) -> list[str]:
        """The runs (config hashes) of every ``event`` seen so far, in order."""
        return [run for e in self.of(event) for run in e["runs"]]

    def wait(self, until: Callable[[Events], bool], process: subprocess.Popen | None = None):
        """Read the log until ``until(self)`` holds (:func:`wait_until`; ``process``: the
        driver)."""

        def read() -> bool:
            self.poll()
            return until(self)

        wait_until(read, [process] if process else [])


def wait_until(
    condition: Callable[[], bool], processes: Sequence[subprocess.Popen] = (), seconds: float = 600
) -> None:
    """Return once ``condition()`` holds, looking every 50 ms. ``seconds`` only bounds a test
    that went wrong; it is no synchronisation.

    Raises:
        AssertionError: one of ``processes`` (drivers) exited first, or ``seconds`` passed.
    """
    deadline = time.monotonic() + seconds
    while not condition():
        for process in processes:
            if process.poll() is not None and not condition():
                out = process.stderr.read()[-3000:] if process.stderr else ""
                raise AssertionError(f"a driver exited {process.returncode} first: {out}")
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {seconds:.0f} s")
        time.sleep(0.05)


def first_cell(args: list[str]) -> tuple[list[str], list[str]]:
    """What a sweep of ``args`` on a new store trains first: the runs (config hashes) of its
    bundles in dispatch order up to the first that completes a grid cell, and that cell's runs.

    A test holds back every other run (``faulty(hold=...)``): Ray starts the tasks of one kind
    in the order they were submitted, so these train first, even on one CPU, and the driver
    records that cell (a ``recorded`` event) while the rest waits.
    """
    from sdyn.driver import bundle_plan
    from sdyn.plan import plan

    p = plan(args)
    size = {cell: sum(r.cell == cell for r in p.planned) for cell in {r.cell for r in p.planned}}
    ahead: list[int] = []
    for ks in bundle_plan(p, list(range(len(p.runs))), 0)[0]:
        ahead += ks
        for cell in {p.planned[k].cell for k in ks}:
            if sum(p.planned[k].cell == cell for k in ahead) == size[cell]:
                return [p.hashes[k] for k in ahead], [r.hash for r in p.planned if r.cell == cell]
    raise ValueError("no bundle completes a cell")


def faulty(root: Path, **faults) -> dict[str, str]:
    """The environment of a sweep run with ``experiment=faults`` (``tests/faults.py``): its
    module on ``PYTHONPATH`` for the driver and its Ray's workers, and ``faults`` (``raise``,
    ``exit``, ``kill``, ``hold``) in ``$SDYN_FAULTS``, counted in the folder ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    spec = {"dir": str(root), **faults}
    return {"PYTHONPATH": python_path(TESTS), "SDYN_FAULTS": json.dumps(spec)}
