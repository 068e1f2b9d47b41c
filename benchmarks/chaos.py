"""Chaos at scale: one sweep of thousands of runs through four faults, audited from the store
alone.

    python benchmarks/chaos.py --seed 1                   # 3,600 runs, about 5 minutes on 2 cores
    python benchmarks/chaos.py --seed 0 --runs 520        # the CI version (test_chaos.py)
    python benchmarks/chaos.py --seed 1 --out chaos.json  # its results file elsewhere

It builds the real thing on loopback with the tests' own fixtures (``tests/harness.py``, as
``tests/test_cluster.py`` does): a PostgreSQL server, an ``mlflow server`` on it
(``cluster/mlflow-server.sh``, bound to 127.0.0.1), and a two-node Ray cluster, a head and a
second node, each started with ``ray start`` and one CPU, with Ray's token authentication on.
Credentials pass only through the environment: the PostgreSQL password (a fresh one) in
``PGPASSWORD``, the Ray token (a fresh one) in ``RAY_AUTH_TOKEN``. It follows each driver through
its event log (``sweep.events``, :mod:`sdyn.events`), never through what it prints.

Then, on that cluster:

1. **The uninterrupted run**: the sweep once, without faults, in an MLflow experiment of its own
   (``chaos-reference``), so that the chaos sweep reuses none of its runs. Its training time T
   scales the faults' times.
2. **The chaos sweep**: the same command in experiment ``sdyn``, through four faults at times
   drawn from ``--seed`` (:data:`WINDOWS`):

   * ``node``: kill -9 of the second node's raylet while bundles train there, and with it of
     every other process of that node (its workers, agents): the node leaves, as a machine
     does, and the driver must train its bundles again on the head;
   * ``worker``: kill -9 of a Ray worker process training a bundle;
   * ``driver``: kill -9 of the driver (the sweep process) while it trains, once it has
     submitted the lost bundles again and recorded runs since the node left;
   * ``server``: a restart of the tracking server, down for ``--outage-s`` (20 s) or more,
     while the next driver trains: it holds its results and rides the outage out.

   After the driver kill it runs the same command again until it exits 0 (``--rerun-pause``
   between tries after any other failure).
3. **The audit**, from the store alone, with plain MLflow and SQL reads and no sdyn code: every
   planned config (the parent's ``plan.json``, equal to the uninterrupted run's) is recorded
   exactly once, as finished; no run is duplicated (run table rows, cell runs, parents) and none
   belongs to another sweep; and the report's values and verdicts equal the uninterrupted run's
   to the printed digits (the claims table of ``report.md`` line for line, and each claim's
   value, interval and verdict in ``report.json`` to 4 significant digits), as does every run's
   every recorded scalar (exactly); and every run a driver's event log says it recorded is in
   the store.

It prints progress lines as it goes, then one table: each fault (kind, time since training
began, phase), the runs retried inside the sweep (bundles whose worker or node was lost, as the
drivers logged), the reruns needed, the wall time against the uninterrupted run, and the lost /
duplicated / foreign / mismatched counts. The exit status is 0 only when those are all 0 and
every fault landed while the sweep was training. It writes its results file
(``benchmarks/results/chaos/``, or ``--out PATH``): the table's figures, and under ``details``
the faults, the drivers' attempts and the audit.

Needs the PostgreSQL server binaries (``initdb``, ``pg_ctl``; .ci/run installs them) and Linux
(process ids are found in ``/proc``). Everything it starts is ended by process id (Ray's
processes by the session ``ray start`` opened); ``ray stop`` would stop every Ray on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the services and the event log: shared with the tests
import harness  # noqa: E402
import record  # noqa: E402

CHAOS_EXPERIMENT, REFERENCE_EXPERIMENT = "sdyn", "chaos-reference"
# The sweep: NTK widths 2 .. 1024 (10) x n in {8, 16, 32, 64}: 40 cells, seeds to reach --runs.
# eps = 1e-12 keeps runs training for up to --steps steps (50,000): 3,000 runs train for 65 s
# on the two 1-CPU nodes of a 2-core machine (eps = 1e-9: 51 s), the default 3,600 for 78 s.
CELLS = 40
GRID = ["+grid=width", "grid.n=[8,16,32,64]", "grid.num_widths=10", "experiment.eps=1e-12"]
# When each fault comes, as a fraction of the uninterrupted run's training time T, drawn
# uniformly from these windows with --seed: the node loss and the worker kill after the first
# driver starts training; the driver kill after both (3 s or more, to see their bundles retried)
# and once it has written results after the node left; the tracking-server restart after the
# next driver starts training, so that it rides out the outage. The node loss halves the
# cluster, so each driver trains for longer than its share of T: every fault lands in training.
WINDOWS = {"node": (0.05, 0.2), "worker": (0.1, 0.3), "driver": (0.35, 0.55), "server": (0.0, 0.15)}
KINDS = ("node", "worker", "driver", "server")
FINISHED = ("converged", "budget_exhausted", "diverged")  # a run's recorded statuses but "failed"
START = time.monotonic()


def say(line: str) -> None:
    print(f"[{time.monotonic() - START:7.1f} s] {line}", flush=True)


def listening(port: int) -> list[str]:
    """The addresses a TCP port listens on (IPv4), from /proc/net/tcp."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.append(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


# --- sweeps ----------------------------------------------------------------------------------


class Driver:
    """One run of the sweep command (a driver), followed through its event log (:mod:`sdyn.events`,
    ``sweep.events`` set to a file of its own); its output goes to ``log``, for people. Times are
    Unix times, the log's."""

    ALL: list[Driver] = []  # every driver started, for the teardown

    def __init__(self, cmd: list[str], env: dict, cwd: Path, log: Path):
        self.log = log
        self.started = time.time()
        events = log.with_suffix(".events.jsonl")
        self.events = harness.Events(events)
        with open(log, "w") as out:
            self.process = subprocess.Popen(
                [*cmd, f"sweep.events={events}"],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        Driver.ALL.append(self)

    def poll(self) -> None:
        """Read what the driver logged since the last call."""
        self.events.poll()

    @property
    def to_train(self) -> int | None:
        started = self.events.of("sweep_started")
        return started[0]["to_train"] if started else None

    @property
    def training(self) -> float | None:
        """When it handed its first bundle to Ray."""
        started = self.events.of("bundle_started")
        return started[0]["time"] if started else None

    @property
    def landed(self) -> int:
        """Runs whose results reached it."""
        return len(self.events.runs("bundle_finished"))

    @property
    def trained(self) -> float | None:
        """When the last of its runs' results reached it."""
        finished = self.events.of("bundle_finished")
        done = finished and self.landed >= (self.to_train or 0)
        return finished[-1]["time"] if done else None

    @property
    def retries(self) -> list[str]:
        """The Ray error of each bundle it submitted again after its worker or node was lost."""
        return [e["reason"] for e in self.events.of("bundle_retried")]

    @property
    def retried(self) -> int:
        """Runs of the bundles it submitted again."""
        return len(self.events.runs("bundle_retried"))

    def recorded_since(self, since: float) -> int:
        """Runs it wrote to the store after ``since`` (a Unix time)."""
        return sum(len(e["runs"]) for e in self.events.of("recorded") if e["time"] > since)

    def phase(self) -> str:
        """``start-up``, ``training``, ``report`` or ``exited``."""
        if self.process.poll() is not None:
            return "exited"
        if self.training is None:
            return "start-up"
        return "training" if self.trained is None else "report"

    def wait(self) -> int:
        code = self.process.wait()
        self.poll()
        return code


@dataclass
class Fault:
    kind: str
    planned_s: float  # when it was due, seconds after the first driver started training
    at_s: float | None = None  # when it came
    phase: str = ""  # the driver's phase then
    detail: str = ""
    during_training: bool = False


@dataclass
class Outcome:
    seed: int
    runs: int
    faults: list[Fault]
    attempts: list[dict] = field(default_factory=list)
    retried: int = 0
    outage_s: float = 0.0  # the tracking server's time down, stop to answering again
    node_left: float = 0.0  # Unix time of the node kill
    lost_node: str = ""  # the Ray node id of the node that left
    reference_wall_s: float = 0.0
    reference_train_s: float = 0.0
    chaos_wall_s: float = 0.0
    audit: dict = field(default_factory=dict)
    logged: list[str] = field(default_factory=list)  # runs the drivers' logs say they recorded


def sweep_command(
    args, cluster: harness.RayCluster, server: harness.TrackingServer, experiment: str, out: Path
):
    return [
        sys.executable,
        "-m",
        "sdyn.sweep",
        *GRID,
        f"experiment.steps={args.steps}",
        f"grid.seeds={args.seeds}",
        f"sweep.bundle_size={args.bundle_size}",
        f"sweep.name={args.name}",
        f"sweep.out_dir={out}",
        "sweep.yes=true",
        "sweep.progress=false",
        "cluster=address",
        f"cluster.address={cluster.address}",
        "tracking=server",
        f"tracking.uri={server.uri}",
        f"tracking.experiment={experiment}",
        f"tracking.lease_s={args.lease_s}",
    ]


def driver_env(cluster_env: dict) -> dict:
    env = {k: v for k, v in cluster_env.items() if not k.startswith(("PG", "MLFLOW_TRACKING"))}
    return {**env, "PYTHONUNBUFFERED": "1"}


def run_reference(args, cluster, server, root: Path, env: dict) -> tuple[float, float]:
    """The uninterrupted run. Returns (its wall time, its training time) in seconds."""
    cmd = sweep_command(args, cluster, server, REFERENCE_EXPERIMENT, root / "reference")
    say("the uninterrupted run: " + " ".join(cmd[3:]))
    driver = Driver(cmd, env, root, root / "reference.log")
    code = driver.wait()
    wall = time.time() - driver.started
    if code != 0 or driver.trained is None:
        raise RuntimeError(f"the uninterrupted run exited {code}: see {driver.log}")
    trained = driver.trained - driver.training
    say(f"the uninterrupted run: exit 0 in {wall:.1f} s, training {trained:.1f} s")
    return wall, trained


def schedule(seed: int, train_s: float) -> dict[str, float]:
    """Each fault's delay in seconds, drawn from ``seed`` as fractions (:data:`WINDOWS`) of the
    uninterrupted run's training time ``train_s``."""
    draw = random.Random(seed)
    return {kind: round(draw.uniform(*WINDOWS[kind]) * train_s, 1) for kind in WINDOWS}


class Outage(threading.Thread):
    """The tracking server's restart: stopped now, started again ``seconds`` later (it answers
    a few seconds after that: its start-up); ``back`` is when it answers again (monotonic)."""

    def __init__(self, server: harness.TrackingServer, seconds: float):
        super().__init__(daemon=True)
        self.server, self.seconds = server, seconds
        self.began = time.monotonic()
        self.back: float | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.server.stop()
            time.sleep(max(0.0, self.began + self.seconds - time.monotonic()))
            self.server.start()
            self.back = time.monotonic()
            down, start = self.back - self.began, self.server.start_s
            say(f"tracking server back: down {down:.1f} s (its start took {start:.1f} s)")
        except BaseException as exc:  # said by run_chaos
            self.error = exc


def run_chaos(args, cluster, server, root: Path, env: dict, train_s: float) -> Outcome:
    """The chaos sweep: the first driver with the node, worker and driver faults, the same
    command again until it exits 0, the tracking-server restart while the rerun trains."""
    cmd = sweep_command(args, cluster, server, CHAOS_EXPERIMENT, root / "chaos")
    delays = schedule(args.seed, train_s)
    say("the chaos sweep: " + " ".join(cmd[3:]))
    say(
        f"  faults due: node {delays['node']:.1f} s and worker {delays['worker']:.1f} s into the "
        f"first driver's training, the driver at {delays['driver']:.1f} s (3 s or more after "
        f"them, once it wrote results after the node left), the tracking server "
        f"{delays['server']:.1f} s into the next driver's training"
    )
    faults = {kind: Fault(kind, delays[kind]) for kind in args.faults}
    draw = random.Random(args.seed + 1)  # which training worker the worker fault kills
    outcome = Outcome(args.seed, args.seeds * CELLS, list(faults.values()))
    started = time.time()
    drivers = [Driver(cmd, env, root, root / "chaos-0.log")]
    pending = dict(faults)
    outage: Outage | None = None
    node_left = time.time()  # Unix time of the node kill (till then: of the start)
    next_try: float | None = None

    def mark(fault: Fault, driver: Driver, detail: str, training: bool = False) -> None:
        """Say that ``fault`` came (``training``: while ``driver`` and bundles trained)."""
        k, began = drivers.index(driver), drivers[0].training
        fault.at_s = None if began is None else round(time.time() - began, 1)
        fault.phase = f"{'training' if training else driver.phase()}, driver {k}"
        fault.during_training = training
        fault.detail = f"{detail}; {driver.landed}/{driver.to_train or '?'} runs landed"
        say(f"fault {fault.kind} at {fault.at_s} s ({fault.phase}): {fault.detail}")
        del pending[fault.kind]

    while True:
        now = time.time()
        for driver in drivers:
            driver.poll()
        first, last = drivers[0], drivers[-1]
        if first.training is not None:
            into = now - first.training  # seconds into the first driver's training
            node, worker = faults.get("node"), faults.get("worker")
            if "node" in pending and into >= node.planned_s and first.phase() == "training":
                busy, raylet = cluster.training("node2"), cluster.raylet("node2")
                if busy and raylet:  # "while its bundles train"
                    node_left = outcome.node_left = time.time()
                    outcome.lost_node = re.search(r"--node_id=(\w+)", raylet.cmd).group(1)
                    harness.kill9(raylet.pid)
                    # The node leaves: the rest of its processes die with it, as with the
                    # machine (its workers would otherwise finish their bundles first).
                    rest = [
                        harness.kill9(p.pid) for p in cluster.of("node2") if p.pid != raylet.pid
                    ]
                    there = f"{len(busy)} bundle(s) training there"
                    what = f"raylet pid {raylet.pid} killed with {there}, and {len(rest)} more"
                    mark(node, first, f"{what} processes of the node", True)
            busy = cluster.training()
            if (
                "worker" in pending
                and into >= worker.planned_s
                and first.phase() == "training"
                and busy
            ):
                victim = draw.choice(busy)
                harness.kill9(victim.pid)
                what = f"worker pid {victim.pid} killed ({victim.cmd.split()[0]})"
                mark(worker, first, what, True)
            killer = faults.get("driver")
            before = [f.at_s for f in (node, worker) if f is not None and f.at_s is not None]
            if (
                "driver" in pending
                and "node" not in pending
                and "worker" not in pending
                and into >= max([killer.planned_s] + [t + 3.0 for t in before])
                # it has seen the lost bundles submitted again (Ray notices a node's death
                # within seconds), or waited 30 s for it
                and (len(first.retries) >= len(before) or into >= max(before, default=0) + 30)
                and first.recorded_since(node_left) > 0  # and recorded runs since
                and first.phase() == "training"
                and busy
            ):
                harness.kill9(first.process.pid)
                mark(killer, first, f"driver pid {first.process.pid} killed", True)
        # The restart comes while the driver after the driver kill trains (without that kill:
        # the first driver).
        rerun = next((d for d in drivers[1:] if d.training is not None), None)
        rerun = drivers[0] if "driver" not in faults else rerun
        if (
            "server" in pending
            and rerun is not None
            and rerun.phase() == "training"
            and now - rerun.training >= faults["server"].planned_s
            and cluster.training()
        ):
            outage = Outage(server, args.outage_s)
            outage.start()
            mark(faults["server"], rerun, "stopped", True)
        if outage is not None and outage.error is not None:
            raise RuntimeError(f"the tracking server did not come back: {outage.error}")
        code = last.process.poll()
        if code is not None and next_try is None:
            last.wait()
            wall = time.time() - last.started
            attempt = {"exit": code, "wall_s": round(wall, 1), "to_train": last.to_train}
            outcome.attempts.append({**attempt, "retried": last.retried})
            say(
                f"driver {len(drivers) - 1} exited {code} after {wall:.1f} s ({last.to_train} runs "
                f"to train, {last.retried} retried)"
            )
            for kind in list(pending):  # the first driver's faults, or any once it is over
                if code == 0 or kind != "server":
                    mark(faults[kind], last, "not injected: the driver had exited")
            if code == 0:
                break
            if len(drivers) > args.max_reruns:
                raise RuntimeError(f"no exit 0 after {args.max_reruns} reruns")
            next_try = now + (args.rerun_pause if code != -signal.SIGKILL else 0.0)
        if next_try is not None and now >= next_try:
            next_try = None
            drivers.append(Driver(cmd, env, root, root / f"chaos-{len(drivers)}.log"))
            say(f"rerun {len(drivers) - 1}: the same command again")
        time.sleep(0.1)
    if outage is not None:
        outage.join()
        outcome.outage_s = round(outage.back - outage.began, 1) if outage.back else None
        server_fault = faults["server"]
        server_fault.detail = server_fault.detail.replace(
            "stopped", f"stopped, answering again {outcome.outage_s} s later", 1
        )
    outcome.chaos_wall_s = round(time.time() - started, 1)
    outcome.retried = sum(d.retried for d in drivers)
    outcome.logged = sorted({run for d in drivers for run in d.events.runs("recorded")})
    return outcome


# --- the audit: the store alone --------------------------------------------------------------


def audit(uri: str, name: str, planned: int, outcome: Outcome) -> dict:
    """What the store holds of the chaos sweep against the uninterrupted one: plain MLflow
    reads (runs, tags, artifacts) and SQL on the tracking server's PostgreSQL, no sdyn code.

    Returns counts (``lost``, ``duplicated``, ``foreign``, ``mismatched`` must all be 0) and
    the details that explain any that is not."""
    import pandas as pd
    import psycopg
    from mlflow.tracking import MlflowClient

    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    client = MlflowClient(uri)
    found: dict = {"problems": []}
    problem = found["problems"].append

    def parent_of(experiment: str):
        exp = client.get_experiment_by_name(experiment)
        runs = client.search_runs(
            [exp.experiment_id],
            f"tags.`sdyn.kind` = 'sweep' and tags.`sdyn.sweep` = '{name}'",
            max_results=1000,
        )
        live = [r for r in runs if "sdyn.superseded_by" not in r.data.tags]
        if len(live) != 1:
            problem(f"{experiment}: {len(live)} parent runs of sweep {name}")
        return exp, live, runs

    chaos_exp, chaos_parents, all_parents = parent_of(CHAOS_EXPERIMENT)
    ref_exp, ref_parents, _ = parent_of(REFERENCE_EXPERIMENT)
    parent, reference = chaos_parents[0], ref_parents[0]

    with tempfile.TemporaryDirectory() as tmp:

        def artifact(run, path: str) -> Path:
            folder = Path(tmp, run.info.run_id)
            folder.mkdir(exist_ok=True)
            return Path(client.download_artifacts(run.info.run_id, path, str(folder)))

        # The plan: the parent's plan.json, the same as the uninterrupted run's, whose digest
        # is the parent's sdyn.plan tag.
        plan = json.loads(artifact(parent, "plan.json").read_text())["hashes"]
        ref_plan = json.loads(artifact(reference, "plan.json").read_text())["hashes"]
        digest = hashlib.sha256("\n".join(sorted(set(plan))).encode()).hexdigest()[:16]
        if sorted(plan) != sorted(ref_plan) or len(set(plan)) != planned:
            problem(f"plan: {len(set(plan))} configs, the uninterrupted run's {len(ref_plan)}")
        if parent.data.tags.get("sdyn.plan") != digest:
            problem("the parent's sdyn.plan tag is not the digest of its plan.json")

        def run_table(run) -> pd.DataFrame:
            files = sorted(artifact(run, "runs").glob("*.parquet"))
            return pd.concat([pd.read_parquet(f).assign(file=f.name) for f in files])

        table, ref_table = run_table(parent), run_table(reference)

        # Cell runs: SQL on the server's database, every run tagged with the sweep's name or
        # the chaos parent as its parent.
        with psycopg.connect() as db:  # PG* from the environment
            rows = db.execute(
                """
                select r.run_uuid, r.experiment_id, r.status, r.lifecycle_stage,
                       max(case when t.key = 'sdyn.kind' then t.value end),
                       max(case when t.key = 'sdyn.cell' then t.value end),
                       max(case when t.key = 'mlflow.parentRunId' then t.value end),
                       max(case when t.key = 'sdyn.table_digest' then t.value end),
                       max(case when t.key = 'sdyn.sweep' then t.value end),
                       string_agg(case when t.key like 'sdyn.config_hashes%%' then t.value end,
                                  ' ')
                from runs r join tags t on t.run_uuid = r.run_uuid
                where r.lifecycle_stage = 'active' and r.run_uuid in
                    (select run_uuid from tags where key = 'sdyn.sweep' and value = %s
                     or key = 'mlflow.parentRunId' and value = %s)
                group by r.run_uuid, r.experiment_id, r.status, r.lifecycle_stage
                """,
                (name, parent.info.run_id),
            ).fetchall()
    columns = ["run_id", "experiment", "status", "stage", "kind", "cell", "parent", "digest"]
    runs = pd.DataFrame(rows, columns=[*columns, "sweep", "hashes"])
    runs = runs[
        (runs["kind"] == "cell") & (runs["experiment"].astype(str) == chaos_exp.experiment_id)
    ]
    pid = parent.info.run_id
    cells = runs[runs["parent"] == pid]  # the sweep's cell runs

    planned_set = set(plan)
    done = table[table["status"].isin(FINISHED)]
    lost = planned_set - set(done["config_hash"])
    # The drivers' event logs: every run they said they recorded is in the store.
    unstored = set(outcome.logged) - set(table["config_hash"])
    if unstored:
        problem(f"{len(unstored)} runs the drivers logged as recorded are not in the run table")
    # Duplicated: a config in the run table more than once, a cell with more than one cell run,
    # a config summarised by more than one cell run, more than one parent.
    dup_rows = len(table) - table["config_hash"].nunique()
    dup_cells = len(cells) - cells["cell"].nunique()
    summarised = " ".join(cells["hashes"].fillna("")).split()
    dup_summarised = len(summarised) - len(set(summarised))
    dup_parents = len(all_parents) - 1
    # Foreign: a row of the run table written for another parent or of a config not planned; a
    # cell run of this sweep's name under another parent, or under this parent with another
    # name, or summarising a config not planned.
    foreign_rows = int((table["parent_run_id"] != pid).sum())
    foreign_rows += len(set(table["config_hash"]) - planned_set)
    foreign_cells = int(((runs["sweep"] == name) & (runs["parent"] != pid)).sum())
    foreign_cells += int((cells["sweep"] != name).sum()) + len(set(summarised) - planned_set)
    if set(summarised) != planned_set:
        problem(f"cell runs summarise {len(set(summarised))} of {planned} configs")
    unfinished = cells[(cells["status"] != "FINISHED") | cells["digest"].isna()]
    if len(unfinished) or len(cells) != table["cell"].nunique():
        problem(
            f"{len(unfinished)} cell runs not FINISHED with their digest; "
            f"{len(cells)} cell runs for {table['cell'].nunique()} cells"
        )
    final = client.get_run(pid)
    if final.info.status != "FINISHED":
        problem(f"the parent is {final.info.status}")

    # Mismatched: the report's claims table line for line, each claim's value, interval and
    # verdict to the printed 4 significant digits, and every run's every recorded scalar.
    with tempfile.TemporaryDirectory() as tmp:

        def report(run):
            folder = Path(tmp, run.info.run_id)
            folder.mkdir()
            folder = Path(client.download_artifacts(run.info.run_id, "report", str(folder)))
            md = (folder / "report.md").read_text().splitlines()
            rows = [line for line in md if line.startswith("| ") and "|:" not in line]
            return rows, json.loads((folder / "report.json").read_text())["claims"]

        (rows_c, claims_c), (rows_r, claims_r) = report(final), report(reference)

    def printed(claim: dict) -> tuple:
        def g(v):
            return "None" if v is None else f"{v:.4g}"

        return (
            claim["claim"],
            g(claim["value"]),
            g(claim["ci_low"]),
            g(claim["ci_high"]),
            claim["verdict"],
        )

    mismatched_claims = sum(
        printed(a) != printed(b) for a, b in zip(claims_c, claims_r, strict=False)
    ) + abs(len(claims_c) - len(claims_r))
    mismatched_rows = sum(a != b for a, b in zip(rows_c, rows_r, strict=False)) + abs(
        len(rows_c) - len(rows_r)
    )
    verdict_tags = {k: v for k, v in final.data.tags.items() if k.startswith("sdyn.verdict.")}
    ref_tags = {
        k: v
        for k, v in client.get_run(reference.info.run_id).data.tags.items()
        if k.startswith("sdyn.verdict.")
    }
    mismatched_verdict_tags = sum(verdict_tags.get(k) != v for k, v in ref_tags.items())
    scalars = [
        c
        for c in ref_table.columns
        if c not in ("config_hash", "file", "recorded_at", "driver", "node", "parent_run_id")
        and not c.startswith(("curves", "traceback", "table."))
    ]
    a = done.drop_duplicates("config_hash").set_index("config_hash").reindex(sorted(plan))
    b = ref_table.drop_duplicates("config_hash").set_index("config_hash").reindex(sorted(plan))
    differs = pd.Series(False, index=a.index)
    for column in scalars:
        x, y = a.get(column), b[column]
        if x is None:
            differs |= True
            continue
        same = (x == y) | (x.isna() & y.isna())
        differs |= ~same
    mismatched_runs = int(differs[~differs.index.isin(lost)].sum())

    drivers = table.groupby("driver")["config_hash"].count().to_dict()
    by_node = table.groupby("node")["config_hash"].count().to_dict()
    # The node loss inside the first driver's sweep: the runs it recorded after the node left
    # (results that reached it, all but any that landed just before, trained on the head).
    first = table.sort_values("recorded_at")["driver"].iloc[0]
    after = table[(table["driver"] == first) & (table["recorded_at"] > outcome.node_left * 1000)]
    found.update(
        planned=planned,
        recorded=int(done["config_hash"].nunique()),
        lost=len(lost),
        duplicated=dup_rows + dup_cells + dup_summarised + dup_parents,
        foreign=foreign_rows + foreign_cells,
        mismatched=mismatched_claims + mismatched_rows + mismatched_verdict_tags + mismatched_runs,
        mismatched_claims=mismatched_claims,
        mismatched_table_rows=mismatched_rows,
        mismatched_runs=mismatched_runs,
        claims=len(claims_c),
        rows_per_driver=drivers,
        rows_per_node=by_node,
        on_lost_node=int((table["node"] == outcome.lost_node).sum()),
        first_driver_after_node_loss=len(after),
        first_driver_after_node_loss_elsewhere=int((after["node"] != outcome.lost_node).sum()),
        cell_runs=len(cells),
        logged=len(outcome.logged),
    )
    return found


# --- the table -------------------------------------------------------------------------------


def table(outcome: Outcome) -> str:
    a = outcome.audit
    lines = [
        "| fault | due | came (s) | phase | what |",
        "|---|---|---:|---|---|",
    ]
    for f in outcome.faults:
        came = "-" if f.at_s is None else f"{f.at_s:.1f}"
        due = f"{f.planned_s:.1f} s into training"
        lines.append(f"| {f.kind} | {due} | {came} | {f.phase} | {f.detail} |")
    reruns = len(outcome.attempts) - 1
    exits = ", ".join(str(t["exit"]) for t in outcome.attempts)
    ratio = outcome.chaos_wall_s / outcome.reference_wall_s
    lines += [
        "",
        "| seed | runs | retried | reruns (exits) | wall, chaos / uninterrupted | lost | "
        "duplicated | foreign | mismatched |",
        "|---:|---:|---:|---|---|---:|---:|---:|---:|",
        f"| {outcome.seed} | {outcome.runs} | {outcome.retried} | {reruns} ({exits}) | "
        f"{outcome.chaos_wall_s:.0f} s / {outcome.reference_wall_s:.0f} s ({ratio:.2f}x) | "
        f"{a.get('lost', '?')} | {a.get('duplicated', '?')} | {a.get('foreign', '?')} | "
        f"{a.get('mismatched', '?')} |",
    ]
    return "\n".join(lines)


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, IndexError, ValueError):
        kib = int(Path("/proc/meminfo").read_text().split()[1])
        memory = f", {kib / 2**20:.0f} GiB"
    return f"{os.cpu_count()} x {model}{memory}, {platform.system()} {platform.release()}"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="One sweep through a node loss, a worker kill, a tracking-server restart and "
        "a driver kill -9, on a real two-node Ray cluster and an MLflow server on PostgreSQL; "
        "then an audit from the store alone against an uninterrupted run of the same sweep.",
    )
    p.add_argument("--seed", type=int, default=0, help="draws the faults' times (default 0)")
    p.add_argument(
        "--runs",
        type=int,
        default=3600,
        help=f"runs of the sweep, rounded up to a multiple of {CELLS} (default 3600)",
    )
    p.add_argument("--bundle-size", type=int, default=10, help="runs per bundle (default 10)")
    p.add_argument(
        "--steps",
        type=int,
        default=50000,
        help="experiment.steps, each run's budget: what makes training last (default 50000)",
    )
    p.add_argument(
        "--lease-s",
        type=float,
        default=10.0,
        help="tracking.lease_s: how long a rerun waits after the driver kill (10)",
    )
    p.add_argument(
        "--outage-s",
        type=float,
        default=20.0,
        help="seconds the tracking server is down (default 20)",
    )
    p.add_argument(
        "--rerun-pause",
        type=float,
        default=5.0,
        help="seconds between a failed try and the next (default 5)",
    )
    p.add_argument("--max-reruns", type=int, default=12, help="give up after so many (12)")
    p.add_argument(
        "--faults",
        default=",".join(KINDS),
        help=f"the faults to inject, of {','.join(KINDS)} (default: all four); without the "
        "driver kill, the sweep must finish with no rerun",
    )
    p.add_argument("--name", default="chaos", help="the sweep's name (default chaos)")
    p.add_argument("--out", help="the results file (default: under benchmarks/results/chaos/)")
    p.add_argument(
        "--workdir",
        type=Path,
        help="keep everything here (default: a temporary directory, removed at the end)",
    )
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be >= 1")
    args.seeds = math.ceil(args.runs / CELLS)
    asked = [k for k in args.faults.split(",") if k]
    if not asked or set(asked) - set(KINDS):
        p.error(f"--faults: choose from {','.join(KINDS)}")
    args.faults = [k for k in KINDS if k in asked]
    return args


def figures(outcome: Outcome, ok: bool) -> dict:
    """The results file's figures (``benchmarks/results/README.md``, ``chaos``): the table's,
    and under ``details`` the outcome itself (faults, attempts, audit)."""
    a = outcome.audit
    details = asdict(outcome)
    del details["logged"]  # the audit counts them
    return {
        "seed": outcome.seed,
        "runs": outcome.runs,
        "faults": [f.kind for f in outcome.faults],
        "fault_times_s": {f.kind: f.at_s for f in outcome.faults},
        "server_down_s": outcome.outage_s,
        "retried": outcome.retried,
        "reruns": len(outcome.attempts) - 1,
        "uninterrupted_training_s": round(outcome.reference_train_s, 1),
        "wall_s": {"chaos": outcome.chaos_wall_s, "uninterrupted": outcome.reference_wall_s},
        "wall_ratio": round(outcome.chaos_wall_s / outcome.reference_wall_s, 2),
        **{k: a[k] for k in ("lost", "duplicated", "foreign", "mismatched", "logged")},
        "total_wall_s": round(time.monotonic() - START, 1),
        "passed": ok,
        "details": details,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # tear down on a SIGTERM too
    root = args.workdir or Path(tempfile.mkdtemp(prefix="sdyn-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    say(f"chaos benchmark, seed {args.seed}: {args.seeds * CELLS} runs, work in {root}")
    say(f"machine: {machine()}")
    if harness.postgres_bin() is None:
        raise SystemExit("chaos: PostgreSQL server binaries not found (.ci/run installs them)")
    pg = harness.Postgres()
    server = cluster = None
    try:
        pg.start()
        say(f"PostgreSQL on 127.0.0.1:{pg.env['PGPORT']}")
        # One server process (the script already leaves MLflow's job runner off): MLflow's four
        # take longer to start on 2 cores, and the restart is part of the outage.
        server = harness.TrackingServer(pg.env, root, MLFLOW_WORKERS="1")
        server.start(wait=False)  # starts while Ray does
        os.environ.update(pg.env)  # the audit's SQL reads them (libpq), as the server does
        cluster = harness.RayCluster(root)  # token authentication, a fresh token
        cluster.start()
        say(f"Ray cluster at {cluster.address}: head and node2, 1 CPU each, token auth on")
        server.wait()
        bound = listening(server.port)
        if bound != ["127.0.0.1"]:
            raise RuntimeError(f"the tracking server listens on {bound}, not 127.0.0.1 only")
        say(f"mlflow server at {server.uri}, on 127.0.0.1 only ({server.start_s:.1f} s to start)")
        env = driver_env(cluster.env)

        ref_wall, ref_train = run_reference(args, cluster, server, root, env)
        outcome = run_chaos(args, cluster, server, root, env, ref_train)
        outcome.reference_wall_s, outcome.reference_train_s = round(ref_wall, 1), ref_train
        say("audit: the store alone (MLflow and SQL)")
        outcome.audit = audit(server.uri, args.name, args.seeds * CELLS, outcome)
    finally:
        say("tearing down")
        for driver in Driver.ALL:  # a driver left running by an error above
            if driver.process.poll() is None:
                harness.kill9(driver.process.pid)
        if cluster is not None:
            cluster.stop()
        if server is not None:
            server.stop()
        pg.stop()
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)

    a = outcome.audit
    missed = [f.kind for f in outcome.faults if not f.during_training]
    print()
    print(f"chaos benchmark, seed {args.seed}, {time.strftime('%Y-%m-%d')}, {machine()}")
    print(table(outcome))
    print(
        "came: seconds since driver 0 began training. Runs recorded per driver: "
        f"{', '.join(map(str, a['rows_per_driver'].values()))}; per node: "
        f"{', '.join(map(str, a['rows_per_node'].values()))}."
    )
    if "node" in args.faults:
        print(
            f"{a['on_lost_node']} runs trained on the node that left, before it did. After it "
            f"left, driver 0 recorded {a['first_driver_after_node_loss']} runs "
            f"({a['first_driver_after_node_loss_elsewhere']} trained on the head)."
        )
    for line in a["problems"]:
        print(f"problem: {line}")
    ok = (
        not missed
        and not a["problems"]
        and all(a[k] == 0 for k in ("lost", "duplicated", "foreign", "mismatched"))
    )
    if missed:
        print(f"faults not injected during training: {', '.join(missed)}")
    if "driver" not in args.faults and len(outcome.attempts) > 1:  # the driver lived
        print("the sweep needed a rerun though its driver was not killed")
        ok = False
    path = record.write("chaos", figures(outcome, ok), args.out)
    print(f"wrote {path}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
