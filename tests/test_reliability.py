"""Reliability: kill -9 and resume, failure isolation, retries, store versions, reuse of a name,
two drivers of one sweep, kills at every write, and a tracking-server outage.

Every sweep here is the real command in its own process (its own embedded Ray), as a user runs
it. What was recorded is read back from the store with plain MLflow calls and Parquet, not
through sdyn: the run table's rows (``_table``) and the cell runs (``_cells``). Faults come from
``experiment=faults`` (tests/faults.py: ntk, failing on cue), and a test that faults a sweep
mid-way holds the rest of it back and waits for an event of the driver's log (``harness.Events``),
never for a time.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harness
import mlflow
import pandas as pd
import pytest

import sdyn
from sdyn.analysis.load import load_sweep
from sdyn.plan import plan
from sdyn.sweep import main
from sdyn.tracking import STORE_VERSION, store, sweeps

pytestmark = pytest.mark.slow

GRID = ["+grid=width", "grid.n=[8,16,32]", "grid.widths=[4,16,64,256]", "grid.seeds=3"]
LEASE = "tracking.lease_s=4"


def _args(where, name, *extra, uri=None):
    return [
        *GRID,
        f"tracking.uri={uri or f'sqlite:///{where}/mlflow.db'}",
        f"sweep.out_dir={where}/out",
        f"sweep.name={name}",
        "sweep.progress=false",
        LEASE,
        *extra,
    ]


@pytest.fixture(autouse=True)
def _reap():
    """Kill every sweep a test started (and its embedded Ray), whatever the test's outcome."""
    yield
    for proc in STARTED:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    STARTED.clear()


STARTED: list[subprocess.Popen] = []


def _sweep(cwd, args, env=None, kill_at=None, **kw):
    """``python -m sdyn.sweep args``, or ``tests/kill_at.py`` killing it at ``kill_at``."""
    launch = ["-m", "sdyn.sweep"] if kill_at is None else [str(harness.KILL_AT), kill_at]
    proc = subprocess.Popen(
        [sys.executable, *launch, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,
    )
    STARTED.append(proc)
    return proc


def _kill(proc):
    """kill -9 a sweep and the embedded Ray it started."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _uri(where):
    return f"sqlite:///{where}/mlflow.db"


def _parents(uri, name):
    mlflow.set_tracking_uri(uri)
    with store.store_lock(uri):  # not while a driver creates the SQLite store (MLflow migrates it)
        return mlflow.search_runs(
            search_all_experiments=True,
            filter_string=f"tags.`sdyn.kind` = 'sweep' and tags.`sdyn.sweep` = '{name}'",
        )


def _candidates(uri, name):
    """The sweep's parent runs that lost no race to create it (sweeps._elect tags the losers)."""
    parents = _parents(uri, name)
    if "tags.sdyn.superseded_by" in parents:
        parents = parents[parents["tags.sdyn.superseded_by"].isna()]
    return parents


def _parent(uri, name):
    parents = _candidates(uri, name)
    assert len(parents) == 1, f"sweep {name}: {len(parents)} parent runs"
    return parents.iloc[0]


def _table(uri, name):
    """Every row of the sweep's run table, as written: all its readable runs/*.parquet files."""
    if _parents(uri, name).empty:
        return pd.DataFrame(columns=["config_hash", "driver"])
    return _rows(uri, _parent(uri, name)["run_id"])


def _rows(uri, run_id):
    """The rows of parent run ``run_id``'s run table (see _table)."""
    client = mlflow.tracking.MlflowClient(uri)
    if not client.list_artifacts(run_id, "runs"):
        return pd.DataFrame(columns=["config_hash", "driver"])
    frames = []
    with tempfile.TemporaryDirectory() as tmp:
        for file in Path(client.download_artifacts(run_id, "runs", tmp)).glob("*.parquet"):
            with contextlib.suppress(Exception):  # a file a kill cut short
                frames.append(pd.read_parquet(file).assign(file=file.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["config_hash"])


def _cells(uri, name):
    mlflow.set_tracking_uri(uri)
    return mlflow.search_runs(
        search_all_experiments=True,
        filter_string=f"tags.`sdyn.kind` = 'cell' and tags.`sdyn.sweep` = '{name}'",
    )


def _recorded_exactly_once(uri, name, hashes):
    """0 runs lost and 0 recorded twice: the run table holds each planned run once, and the
    sweep has one finished cell run per grid cell, summarising all its runs."""
    table = _table(uri, name)
    assert sorted(table["config_hash"]) == sorted(hashes)
    cells = _cells(uri, name)
    assert cells["tags.sdyn.cell"].is_unique and set(cells["status"]) <= {"FINISHED", "FAILED"}
    assert len(cells) == table["cell"].nunique()
    summarised = " ".join(cells["tags.sdyn.config_hashes"]).split()
    assert sorted(summarised) == sorted(hashes)
    assert cells["tags.sdyn.table_digest"].notna().all()
    return table


def _claims(where, name):
    report = json.loads((Path(where) / "out" / name / "report.json").read_text())
    return {
        c["claim"]: (c["value"], c["ci_low"], c["ci_high"], c["verdict"]) for c in report["claims"]
    }


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The reference: GRID trained uninterrupted, its report in ``<dir>/out/reference``; as
    ``experiment=faults`` without a fault, so that its runs and their order (by config hash) are
    those of the sweeps compared with it."""
    where = tmp_path_factory.mktemp("clean")
    proc = _sweep(where, _args(where, "reference", "experiment=faults"), harness.faulty(where))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return where


def test_kill_9_then_resume_equals_an_uninterrupted_sweep(tmp_path, clean):
    args = _args(tmp_path, "resume", "experiment=faults", "sweep.bundle_size=1")
    # The first bundles train until a cell is recorded; the rest waits until the kill landed.
    ahead, cell = harness.first_cell(args)
    hold = {"except": ahead, "until": str(tmp_path / "release")}
    driver = _sweep(tmp_path, args, harness.faulty(tmp_path / "faults", hold=hold))
    log = harness.Events(tmp_path / "out" / "resume" / "events.jsonl")
    log.wait(lambda log: set(cell) <= set(log.runs("recorded")), driver)
    _kill(driver)
    before = _table(_uri(tmp_path), "resume")
    assert set(log.runs("recorded")) <= set(before["config_hash"]) <= set(ahead)
    assert len(before) < 36, "the kill must land mid-sweep"

    (tmp_path / "release").touch()
    again = _sweep(tmp_path, args, harness.faulty(tmp_path / "faults", hold=hold))
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err
    assert f"{36 - len(before)} to train" in out
    after = _recorded_exactly_once(_uri(tmp_path), "resume", plan(args).hashes)
    kept = after.merge(before, on=["config_hash", "file", "recorded_at"])
    assert len(kept) == len(before)  # every row written before the kill is still there
    assert _claims(tmp_path, "resume") == _claims(clean, "reference")


def test_kills_at_each_write_leave_a_sweep_that_a_rerun_completes(tmp_path, clean):
    # SIGKILL at each named point of the driver's writes, one driver after the other on one
    # sweep: right after its parent run is created (before its plan), after rows are written
    # (before their cell run), and after a cell run is created (before its contents).
    args = _args(tmp_path, "killed", "experiment=faults")  # as the reference
    for point in ("parent_created", "table_written", "cell_created"):
        proc = _sweep(tmp_path, args, harness.faulty(tmp_path), kill_at=point)
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == -signal.SIGKILL, point + err
        assert len(_parents(_uri(tmp_path), "killed")) == 1
    assert len(_table(_uri(tmp_path), "killed")) > 0
    assert "RUNNING" in set(_cells(_uri(tmp_path), "killed")["status"])  # a half-written cell

    proc = _sweep(tmp_path, args, harness.faulty(tmp_path))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    _recorded_exactly_once(_uri(tmp_path), "killed", plan(args).hashes)
    assert _parent(_uri(tmp_path), "killed")["status"] == "FINISHED"
    assert _claims(tmp_path, "killed") == _claims(clean, "reference")


def test_the_kill_points_come_from_outside_the_package():
    # tests/kill_at.py wraps the calls; no fault hook is left in sdyn's own code.
    for path in Path(sdyn.__file__).parent.rglob("*.py"):
        text = path.read_text()
        assert "signal.SIGKILL" not in text or "os.getpid()" not in text, path
        assert "SDYN_KILL" not in text and "SDYN_FAULT" not in text, path


def test_a_name_reused_for_another_plan_is_refused_untouched(tmp_path, capsys, monkeypatch):
    assert main(_args(tmp_path, "reuse", "grid.n=[8,16]", "grid.seeds=1")) == 0
    capsys.readouterr()

    def snapshot():
        files = {
            str(p): p.stat().st_mtime_ns
            for p in tmp_path.rglob("*")
            if p.is_file() and not p.name.startswith("mlflow.db-")  # SQLite's WAL index
        }
        return files, mlflow.search_runs(search_all_experiments=True)

    files, runs = snapshot()
    assert main(_args(tmp_path, "reuse")) == 2  # the same name, a larger grid
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sweep 'reuse' exists" in err and "another plan" in err
    # --plan says so too, where it had said the sweep would run.
    assert main([*_args(tmp_path, "reuse"), "--plan"]) == 2
    assert capsys.readouterr().err.strip() == err
    after, runs_after = snapshot()
    assert after == files  # the database, the artifacts and the reports untouched
    pd.testing.assert_frame_equal(runs_after, runs)
    assert load_sweep("reuse", _uri(tmp_path)).attrs["planned"] == 8


def test_raising_runs_fail_alone_and_retry_failed_trains_only_them(tmp_path):
    args = [*_args(tmp_path, "faults"), "experiment=faults"]
    planned = plan(args).planned
    # Every seed of one cell (its seed statistics had nothing to reduce: a traceback), and one
    # seed of another.
    bad = [r.hash for r in planned if r.cell == planned[5].cell] + [planned[0].hash]
    proc = _sweep(tmp_path, args, harness.faulty(tmp_path / "faults", **{"raise": bad}))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err  # a failed run fails the sweep unless allowed
    assert "(4 failed)" in out
    # The first failure's cause, once, where the researcher watches.
    assert out.count("sdyn: a run failed: RuntimeError: fault injected by SDYN_FAULTS") == 1
    table = _recorded_exactly_once(_uri(tmp_path), "faults", plan(args).hashes)
    assert sorted(table[table["status"] == "failed"]["config_hash"]) == sorted(bad)
    cells = _cells(_uri(tmp_path), "faults")
    failed = cells[cells["status"] == "FAILED"].set_index("tags.mlflow.runName")
    assert sorted(failed["tags.sdyn.status.failed"]) == ["1", "3"]
    seed = int(table.set_index("config_hash").loc[bad[0], "seed"])
    run_id = failed.loc[planned[5].cell_name, "run_id"]
    trace = mlflow.artifacts.load_text(f"runs:/{run_id}/tracebacks/seed-{seed}.txt")
    assert "fault injected" in trace

    plain = harness.faulty(tmp_path / "faults")  # experiment=faults, no fault
    proc = _sweep(tmp_path, [*args, "sweep.allow_failures=true"], plain)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "0 to train" in out, err

    proc = _sweep(tmp_path, [*args, "sweep.retry_failed=true"], plain)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "4 to train" in out, err
    table = _table(_uri(tmp_path), "faults")
    assert len(table) == 40  # the failures' rows are kept; the retry's results supersede them
    runs = load_sweep("faults", _uri(tmp_path))
    assert len(runs) == 36 and "failed" not in set(runs["status"])
    cells = _cells(_uri(tmp_path), "faults")
    assert len(cells) == 12 and set(cells["status"]) == {"FINISHED"}


def test_a_worker_that_dies_every_time_fails_only_its_run(tmp_path):
    args = _args(tmp_path, "exits", "experiment=faults", "sweep.allow_failures=true")
    bad = plan(args).hashes[0]
    proc = _sweep(tmp_path, args, harness.faulty(tmp_path / "faults", exit=[bad]))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    runs = load_sweep("exits", _uri(tmp_path))
    assert len(runs) == 36
    assert list(runs[runs["status"] == "failed"]["config_hash"]) == [bad]


_FAILED_TASKS_THEN_REPORT = """
import gc, time
import ray
from sdyn import driver
from sdyn.engine import dispatch

@ray.remote(max_retries=0)
def fails():
    raise ValueError("fails")

@ray.remote
def succeeds(k):
    return k

dispatch.start(num_cpus=1)
gc.disable()  # the garbage stays until the collection below
for _ in range(3):
    refs = [fails.remote(), *(succeeds.remote(k) for k in range(20))]
    ray.wait(refs, num_returns=len(refs), timeout=60)
    try:
        ray.get(refs[0])
    except ray.exceptions.RayError as exc:
        exc.cycle = (exc, refs)  # a failed task's exception in a reference cycle, with refs
stopping = driver.stop_ray_meanwhile()
time.sleep(0.1)
gc.collect()  # as the report's allocations would trigger it while Ray shuts down
stopping.join()
print("reported")
"""


def test_garbage_of_failed_tasks_does_not_end_the_driver_while_ray_shuts_down():
    # Collected in the report's thread 0.05-0.2 s into Ray's shutdown, such garbage ended the
    # process with Ray's "The core worker has already been shutdown" (4 of 4 runs); the
    # drawing helpers of 3f75538 made that collection likely enough to fail a CI run.
    proc = subprocess.run(
        [sys.executable, "-c", _FAILED_TASKS_THEN_REPORT], capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "reported", proc.stderr[-2000:]


def test_a_worker_killed_once_is_retried(tmp_path):
    # kill -9 of the worker while it holds the bundle (the worker kills itself on cue): the
    # driver submits the bundle again, and the run is recorded once, trained.
    args = _args(tmp_path, "killed", "experiment=faults", "grid.n=[16]", "grid.widths=[64]")
    victim = plan(args).hashes[1]
    proc = _sweep(tmp_path, args, harness.faulty(tmp_path / "faults", kill={victim: 1}))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    log = harness.Events(tmp_path / "out" / "killed" / "events.jsonl")
    log.poll()
    (retried,) = log.of("bundle_retried")
    assert victim in retried["runs"] and retried["reason"] == "WorkerCrashedError", retried
    assert "lost its worker or node (WorkerCrashedError); submitted again (1 of 3)" in err
    runs = _recorded_exactly_once(_uri(tmp_path), "killed", plan(args).hashes)
    assert "failed" not in set(runs["status"])


def test_a_store_of_another_layout_version_is_refused_untouched(tmp_path, capsys):
    uri = _uri(tmp_path)
    client = mlflow.tracking.MlflowClient(uri)
    client.create_experiment("sdyn", tags={"sdyn.store_version": "999"})
    capsys.readouterr()  # MLflow's own messages while it created the store
    status = main(_args(tmp_path, "old"))
    err = capsys.readouterr().err.strip()
    assert status == 2 and "store layout 999" in err and len(err.splitlines()) == 1
    assert client.search_runs([client.get_experiment_by_name("sdyn").experiment_id]) == []
    assert not (tmp_path / "out").exists()


_CONNECT_AT = """
import sys, time
from sdyn.tracking import store
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
print(store.connect(sys.argv[1], "sdyn")[1])
"""


def test_sweeps_creating_one_new_store_at_once_all_connect(tmp_path):
    # MLflow's schema migrations of a new SQLite file, run by three processes at the same moment;
    # unserialised, two of three failed ("table _alembic_tmp_latest_metrics already exists").
    # With an empty cache, each also races to make the empty store that new stores copy.
    uri, start = _uri(tmp_path), str(time.time() + 8)
    env = {**os.environ, "SDYN_CACHE": str(tmp_path / "cache")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONNECT_AT, uri, start],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    ids = {proc.communicate(timeout=300)[0].strip() for proc in procs}
    assert [proc.returncode for proc in procs] == [0, 0, 0]
    assert len(ids) == 1  # one experiment, found by the two that did not create it
    found = mlflow.tracking.MlflowClient(uri).get_experiment_by_name("sdyn")
    assert found.experiment_id in ids and found.tags["sdyn.store_version"] == str(STORE_VERSION)


def _candidate(client, experiment_id, start_time):
    tags = {"sdyn.kind": "sweep", "sdyn.sweep": "race", "sdyn.plan": sweeps.plan_digest(["h"])}
    return client.create_run(experiment_id, start_time=start_time, tags=tags).info.run_id


def test_drivers_that_create_one_sweep_at_once_settle_on_one_parent(tmp_path):
    # The race a server store allows (no file lock): driver A creates its parent and reads
    # before driver B's create lands, though B's start time is older. Ordering by start time
    # made each keep its own parent; the write-once election must not.
    client = mlflow.tracking.MlflowClient(_uri(tmp_path))
    experiment_id = client.create_experiment("race")
    a = _candidate(client, experiment_id, start_time=2_000)
    assert sweeps._elect(client, experiment_id, "race", sweeps.plan_digest(["h"])) == a
    b = _candidate(client, experiment_id, start_time=1_000)  # older, committed later
    assert sweeps._elect(client, experiment_id, "race", sweeps.plan_digest(["h"])) == a
    assert client.get_run(b).data.tags["sdyn.superseded_by"] == a
    assert [r.info.run_id for r in sweeps.parents(client, [experiment_id], "race")] == [a]

    # Many drivers at once, each creating a parent then electing: one answer for all of them.
    other = client.create_experiment("race-threads")
    digest = sweeps.plan_digest(["h"])

    def driver(start_time):
        _candidate(client, other, start_time)
        return sweeps._elect(client, other, "race", digest)

    with ThreadPoolExecutor(6) as pool:
        chosen = set(pool.map(driver, [6_000 - 1_000 * i for i in range(6)]))
    assert len(chosen) == 1
    assert [r.info.run_id for r in sweeps.parents(client, [other], "race")] == list(chosen)


@pytest.mark.parametrize("store", ["sqlite", "server"])
def test_two_drivers_of_one_sweep_and_a_third_sweep_lose_nothing(tmp_path, request, store):
    # Two drivers of one sweep start together, a different sweep sharing its runs beside them.
    # One driver holds the sweep, the other waits; the holder is killed -9 once it has recorded
    # a cell (the rest of the sweep held back until then), and the waiting one takes over once
    # its lease lapsed. Nothing is lost, nothing recorded twice, no row written before the kill
    # is gone.
    uri = request.getfixturevalue("tracking_server").uri if store == "server" else None
    where = {name: tmp_path / name for name in ("a", "b", "other")}
    for path in where.values():
        path.mkdir()
    uri = uri or _uri(tmp_path)
    # A lease long enough that a driver slowed down by the three sweeps and the server on two
    # cores still renews it in time.
    lease = "tracking.lease_s=10"
    grid = ["experiment=faults", "+grid=width", "grid.n=[8,16]", "grid.widths=[4,16,64]"]
    one = [*grid, "grid.seeds=2", "sweep.bundle_size=1", "sweep.name=shared", lease]
    other = [*grid, "grid.seeds=3", "sweep.name=other", lease]
    ahead, cell = harness.first_cell(one)
    hold = {"except": ahead, "until": str(tmp_path / "release")}
    env = harness.faulty(tmp_path / "faults", hold=hold)
    procs, logs = {}, {}
    for name, sweep, args in (
        ("a", "shared", one),
        ("b", "shared", one),
        ("other", "other", other),
    ):
        out = f"sweep.out_dir={where[name]}"
        procs[name] = _sweep(where[name], [*args, f"tracking.uri={uri}", out], env)
        logs[name] = harness.Events(where[name] / sweep / "events.jsonl")

    def settled() -> bool:  # one driver recorded the first cell, the other waits for it
        for log in logs.values():
            log.poll()
        waits = [name for name in "ab" if logs[name].of("sweep_waiting")]
        done = [name for name in "ab" if set(cell) <= set(logs[name].runs("recorded"))]
        return len(waits) == 1 and len(done) == 1 and waits != done

    harness.wait_until(settled, list(procs.values()))
    holder = next(name for name in "ab" if logs[name].of("recorded"))
    killed = procs[holder]
    _kill(killed)
    planned = plan(one).hashes
    before = _table(uri, "shared")
    assert set(logs[holder].runs("recorded")) <= set(before["config_hash"]) <= set(ahead)
    assert len(before) < len(planned), "the kill must land mid-sweep"
    (tmp_path / "release").touch()

    survivor = procs["b" if holder == "a" else "a"]
    outs = {}
    for name, proc in (("survivor", survivor), ("other", procs["other"])):
        outs[name], err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err
    assert "the sweep is being run by driver" in outs["survivor"]
    table = _recorded_exactly_once(uri, "shared", planned)
    assert len(table.merge(before, on=["config_hash", "file", "recorded_at"])) == len(before)
    drivers = _parent(uri, "shared").filter(like="params.sdyn.driver.").dropna()
    assert len(drivers) == 2  # the killed driver, then the survivor
    assert set(before["driver"]) == {drivers["params.sdyn.driver.0"].split()[0]}
    assert (
        drivers["params.sdyn.driver.0"].split()[0] == logs[holder].of("sweep_started")[0]["driver"]
    )
    _recorded_exactly_once(uri, "other", plan(other).hashes)
    for name, hashes in (("shared", planned), ("other", plan(other).hashes)):
        assert set(load_sweep(name, uri)["config_hash"]) == set(hashes)


def _wait_for_line(stream, text, seconds=300):
    deadline, seen = time.time() + seconds, []
    while time.time() < deadline:
        line = stream.readline()
        seen.append(line)
        if text in line:
            return seen
        if not line:
            break
    raise AssertionError(f"no line with {text!r} in:\n{''.join(seen)}")


def test_a_tracking_server_outage_is_ridden_out_or_given_up_honestly(
    tmp_path, tracking_server, clean
):
    uri = tracking_server.uri
    args = _args(tmp_path, "outage", "experiment=faults", "sweep.bundle_size=1", uri=uri)

    # An outage longer than tracking.outage_s: one line, exit 3, the parent left RUNNING with
    # its lease lapsing, so that the next driver takes it over.
    events = f"sweep.events={tmp_path}/events-1.jsonl"
    proc = _sweep(tmp_path, [*args, "tracking.outage_s=8", events], harness.faulty(tmp_path))
    harness.Events(tmp_path / "events-1.jsonl").wait(lambda log: log.of("sweep_started"), proc)
    tracking_server.stop()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, err
    assert "tracking store unreachable (" in err  # the progress line, when it went away
    last = err.strip().splitlines()[-1]
    assert last.startswith("sdyn: error: tracking store unreachable for"), err
    tracking_server.start()
    parent = _parent(uri, "outage")
    assert parent["status"] == "RUNNING"
    assert float(parent["tags.sdyn.lease"].split()[1]) < time.time()

    # An outage of 30 s mid-sweep, once a cell is recorded (the rest held back until then):
    # results are held, written once the server is back, and the report equals the
    # uninterrupted sweep's.
    ahead, cell = harness.first_cell(args)
    hold = {"except": ahead, "until": str(tmp_path / "release")}
    events = f"sweep.events={tmp_path}/events-2.jsonl"
    proc = _sweep(tmp_path, [*args, events], harness.faulty(tmp_path, hold=hold))
    log = harness.Events(tmp_path / "events-2.jsonl")
    log.wait(lambda log: set(cell) <= set(log.runs("recorded")), proc)
    tracking_server.stop()
    (tmp_path / "release").touch()
    _wait_for_line(proc.stderr, "tracking store unreachable (")
    time.sleep(30)  # the outage
    tracking_server.start()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "tracking store back after" in err
    log.poll()
    assert sorted(log.runs("recorded")) == sorted(plan(args).hashes)  # the rest, after it
    _recorded_exactly_once(uri, "outage", plan(args).hashes)
    assert _parent(uri, "outage")["status"] == "FINISHED"
    assert _claims(tmp_path, "outage") == _claims(clean, "reference")
