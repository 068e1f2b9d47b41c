"""Bad input: one line on stderr, exit status 2, and nothing written (no store, no outputs)."""

import http.server
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import harness
import pytest
from mlflow.tracking import MlflowClient

from sdyn import report
from sdyn.config import sqlite_for_path
from sdyn.plan import plan
from sdyn.sweep import main

BAD = [
    (["experiment=nope", "+grid=width"], "unknown experiment"),
    (
        ["experiment=./toy.py", "+grid=ks"],
        "experiment=./toy.py names a file: name its module "
        "(experiment=toy for toy.py in the working directory",
    ),
    (["+grid=nope"], "grid 'nope' does not apply to experiment 'ntk'; its grids: threshold"),
    (["+grid=width", "data=nope"], "data 'nope' does not apply to experiment 'ntk'; its data sets"),
    (["experiment.m=abc", "+grid=width"], "experiment.m"),
    (["+grid=width", "experiment.mm=4"], "mm"),  # a typo is never silently ignored
    (["+grid=width", "+grid.widht=[8,16]"], "unknown key grid.widht; did you mean grid.widths?"),
    (["+grid=width", "grid.widht=[8,16]"], "unknown key grid.widht; did you mean grid.widths?"),
    (["+grid=width", "+experiment.stepz=10"], "did you mean experiment.steps?"),
    (["+grid=width", "sweep.nmae=x"], "did you mean sweep.name?"),
    (["+grid=width", "+foo=1"], "unknown key foo"),
    (["experiment=implicit_bias", "+grid=width", "grid.n=[8]"], "does not apply"),
    (["+grid=width", "grid.widths=[4,7]"], "even"),
    (["+grid=width", "grid.widths=[0,4]"], "even"),
    (["+grid=width", "grid.widths=[]"], "empty"),
    (["+grid=width", "grid.n=[1,8]"], "grid.n"),
    (["+grid=width", "grid.n=[]"], "empty"),
    # A list's item of the wrong type was called an unknown key "grid.n[0] (known: )".
    (["+grid=width", "grid.n=[1e9]"], "'1000000000.0' of type 'float' could not be converted"),
    # A repeated value trained and recorded each of its runs twice, then crashed the report.
    (["+grid=width", "grid.n=[8,16,8]"], "grid width has the point n=8 m=2 twice"),
    (["experiment=implicit_bias", "+grid=iters", "grid.optimizers=[gd,gd]"], "optimizer=gd twice"),
    (["+grid=width", "experiment.eps=0"], "eps"),
    (["+grid=width", "experiment.eps=-1e-3"], "eps"),
    (["+grid=width", "grid.seeds=0"], "seeds"),
    (["+grid=width", "grid.n=[8"], "grid.n"),  # malformed override
    ([], "+grid="),  # no grid chosen
    (["grid.n=[8]"], "grid.n sets a grid, but none is chosen: add +grid=NAME"),
    (["+grid.n=[8]"], "grid.n sets a grid, but none is chosen"),  # was an AttributeError
    (["+grid=width", "data=diabetes", "experiment.d=8"], "diabetes"),
    (["+grid=width", "data=diabetes", "grid.n=[500]"], "442"),
    (["+grid=width", "tracking.uri=http://127.0.0.1:9"], "cannot be reached"),
    (["+grid=width", "tracking.uri=sqlite:////nonexistent/dir/m.db"], "missing"),
    # /proc takes no new file even for root, whose access bits said it could (a traceback).
    (["+grid=width", "tracking.uri=sqlite:////proc/m.db"], "tracking.uri: cannot write /proc/m.db"),
    (["+grid=width", "tracking.uri=postgres-ish://x"], "unsupported"),
    (["+grid=width", "tracking.uri=file:./mlruns"], "unsupported"),  # MLflow 3 refuses it
    (["+grid=width", "tracking.uri=."], "is a directory"),
    (["+grid=width", "sweep.events=mlflow.db"], "sweep.events=mlflow.db is the store's file"),
    # Not a number any setting means: a traceback from naming the sweep, or a message naming
    # no key.
    (["+grid=width", "experiment.sigma=inf"], "experiment.sigma=inf: give a finite number"),
    (["+grid=width", "experiment.theorem_C=1e400"], "experiment.theorem_C=inf: give a finite"),
    (["+grid=width", "grid.width_ratio=inf"], "grid.width_ratio=inf: give a finite number"),
    (
        ["experiment=score", "+grid=samples", "data.weights=[1.0,inf]"],
        "data.weights[1]=inf: give a finite number",
    ),
    # A store that keeps nothing, or one opened read-only: MLflow's traceback, or writes
    # into a store meant to be read.
    (["+grid=width", "tracking.uri=sqlite:///:memory:"], "give the store's file alone"),
    (["+grid=width", "tracking.uri='sqlite:///m.db?mode=ro'"], "give the store's file alone"),
    (["+grid=width", "tracking.uri=/dev/null"], "/dev/null is not a regular file"),
    (["+grid=width", "sweep.events=/proc/sdyn/events.jsonl"], "sweep.events: cannot write"),
    (["+grid=width", "sweep.out_dir=/proc/sdyn"], "sweep.out_dir: cannot write /proc/sdyn/"),
    # The report's folder, when the log goes elsewhere: it failed after training (a traceback).
    (
        ["+grid=width", "sweep.events=events.jsonl", "sweep.out_dir=/proc/sdyn"],
        "sweep.out_dir: cannot write /proc/sdyn/",
    ),
    (["+grid=width", "tracking.lease_s=1"], "tracking.lease_s"),
    # A run larger than any machine: --plan's probe, or the sweep's worker, failed to allocate.
    (["+grid=width", "grid.widths=[1099511627776]"], "needs at least 1048576.0 GiB"),
    (["+grid=width", "grid.n=[1000000000000]"], "the run n=1000000000000 m=4096 needs at least"),
    # An empty folder wrote the report into the working directory.
    (["+grid=width", "sweep.out_dir="], "sweep.out_dir is empty: name a folder (. for this one)"),
    (["+grid=width", "tracking.experiment="], "tracking.experiment must have 1-200 characters"),
    # A folder's name past 255 bytes: "File name too long" once the store was written.
    (["+grid=width", "tracking.experiment=" + "e" * 300], "must have 1-200 characters, got 300"),
    (["+grid=width", "sweep.name='" + "é" * 150 + "'"], "sweep.name has 300 bytes, more than 200"),
    (["+grid=width", "sweep.name=../up"], "sweep.name '../up' must not be a path"),
    (["+grid=width", "tracking.outage_s=-1"], "tracking.outage_s"),
    # NaN passed "< 2": the lease was renewed without pause, and never held off another driver.
    (["+grid=width", "tracking.lease_s=nan"], "tracking.lease_s=nan: give a finite"),
    (["+grid=width", "tracking.lease_s=inf"], "tracking.lease_s=inf: give a finite"),
    (["+grid=width", "tracking.outage_s=nan"], "tracking.outage_s=nan: give a finite"),
    # Unquoted in MLflow's search filter: a traceback once the store was written.
    (["+grid=width", 'sweep.name="it\'s"'], "sweep.name \"it's\" must not hold a '"),
    (["+grid=width", "cluster=address", "cluster.address=127.0.0.1:9"], "cannot be reached"),
    (["+grid=width", "cluster=address"], "cluster.address has no value: set cluster.address="),
    (["experiment=implicit_bias", "+grid=width"], "does not apply"),
    (["+grid=width", "cluster.device=tpu"], "cluster.device must be one of auto|cpu|cuda"),
    (["+grid=width", "cluster.device=cuda", "cluster.num_gpus=0"], "the cluster has no GPU"),
    # No CPU: a Ray task of one CPU never starts, and the sweep waited forever.
    (["+grid=width", "cluster.num_cpus=0"], "cluster.num_cpus must be >= 1, got 0"),
    (["experiment=score", "+grid=samples", "grid.n=[1]"], "grid.n"),
    (["+grid=threshold", "grid.width_min=3"], "grid.width_min"),
    (["+grid=threshold", "grid.width_max=2"], "grid.width_max"),
    (["+grid=threshold", "grid.resolution=1"], "grid.resolution"),
    (["+grid=threshold", "grid.coarse_ratio=1.1"], "grid.coarse_ratio"),
    (["+grid=threshold", "grid.claims=[weight_movement]"], "grid.claims: weight_movement"),
    # An experiment key that the grid's points set: the grid's value would replace it unseen.
    (
        ["experiment=attention_regression", "+grid=iters", "experiment.steps=30"],
        "experiment.steps=30 is replaced by grid iters's steps; set grid.steps=[30]",
    ),
    (
        ["experiment=implicit_bias", "+grid=iters", "experiment.optimizer=gd"],
        "grid.optimizers=[gd]",
    ),
    (
        ["+grid=width", "experiment.n=8"],
        "experiment.n=8 is replaced by grid width's n; set grid.n=[8]",
    ),
    (
        ["+grid=width", "experiment.m=64"],
        "experiment.m=64 is replaced by grid width's points, which set m; set it through the "
        "grid's fields (grid.n, grid.widths, grid.width_min, grid.width_ratio, grid.num_widths)",
    ),
    # A value of the wrong type is not a typo (it read "unknown key grid.n; did you mean grid.n?").
    (["+grid=width", "grid.n=8"], "grid.n=8: Invalid value assigned"),
    (
        ["experiment=attention_regression", "+grid=iters", "grid.n=[30]"],
        "grid.n=[30]: Value '[30]' of type 'list' could not be converted to Integer",
    ),
    # Larger than sweep.max_runs, not on a terminal, no sweep.yes: refused before anything.
    (["+grid=width", "sweep.max_runs=10"], "300 runs, more than sweep.max_runs=10"),
    (["+grid=width", "sweep.max_runs=0"], "sweep.max_runs"),
    # A search's size is what it may probe (300), not its ladder (1,000).
    (["+grid=threshold", "sweep.max_runs=10"], "may train up to 300 runs, more than sweep"),
    # Hydra's advice was for a defaults list: "To override a value use 'override grid: ...'".
    (
        ["+grid=threshold", "--sweep", "ntk_width"],
        "grid is chosen twice (+grid=width +grid=threshold): choose one; to replace a named "
        "sweep's, write grid=threshold without the +",
    ),
    (["+grid=width", "+data=diabetes"], "write data=diabetes without the +"),
    # The second --sweep replaced the first unseen.
    (["--sweep", "ntk_width", "--sweep", "ntk_width_large"], "--sweep is given 2 times"),
]


@pytest.mark.parametrize(("overrides", "needle"), BAD, ids=[" ".join(o) for o, _ in BAD])
def test_bad_input_is_one_line_exit_2_nothing_written(
    overrides, needle, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    status = main([f"sweep.out_dir={tmp_path}/out", *overrides])  # theirs win
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and err.startswith("sdyn: error:"), err
    assert needle in err, err
    assert "use +" not in err  # Hydra's advice to add a mistyped key is never passed on
    assert list(tmp_path.iterdir()) == [], "bad input must write nothing"


def test_cfg_and_plan_are_one_or_the_other_and_a_usage_error_is_one_line(capsys):
    with pytest.raises(SystemExit) as exited:  # --cfg won, and --plan was ignored
        main(["+grid=width", "--cfg", "--plan"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == (  # argparse's printed its usage first
        "sdyn: error: argument --plan: not allowed with argument --cfg "
        "(see python -m sdyn.sweep --help)\n"
    )


def test_the_grid_field_that_a_refusal_names_sets_the_runs():
    p = plan(["experiment=attention_regression", "+grid=iters", "grid.steps=[30]"])
    assert {run.experiment.steps for run in p.runs} == {30}
    assert {run.params["experiment.steps"] for run in p.planned} == {"30"}
    assert p.settings == {"grid.steps": [30]}


def test_exit_status_of_the_real_command(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", "+grid=width", "grid.widths=[3]"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "sdyn: error: grid widths must be positive and even, got 3"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_store_file_that_is_not_mlflows_is_refused_and_left_as_it_was(tmp_path, capsys):
    """A file that is not SQLite, or is damaged, failed with MLflow's traceback; another
    program's SQLite database would have had MLflow's tables added to it."""
    text = tmp_path / "notes.db"
    text.write_text("not a database")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("create table samples (x)")
    before = other.read_bytes()
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    for path, needle in (
        (text, "is not a SQLite database"),
        (other, "is a SQLite database but not an MLflow store"),
        (damaged, "cannot be read: file is not a database"),
    ):
        status = main(["+grid=width", f"tracking.uri={path}", f"sweep.out_dir={tmp_path}/out"])
        err = capsys.readouterr().err
        assert (
            status == 2
            and err == f"sdyn: error: tracking.uri 'sqlite:///{path}': {path} {needle}\n"
        )
    assert text.read_text() == "not a database" and other.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.db", "notes.db", "other.db"]


def test_the_report_of_a_store_that_does_not_exist_writes_none(tmp_path, capsys, monkeypatch):
    """``sdyn.report --sweep NAME`` where no store is: MLflow created an empty one first."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # an earlier test's store
    for argv in (["--sweep", "mine"], ["--list"]):
        assert report.main(argv) == 2
        assert capsys.readouterr().err == "sdyn: error: no store at sqlite:///mlflow.db\n"
    assert list(tmp_path.iterdir()) == []


def test_the_report_of_an_empty_file_or_a_name_with_a_quote_is_one_line(tmp_path, capsys):
    empty = tmp_path / "empty.db"
    empty.touch()  # MLflow made it a store, for --list to find nothing in
    assert report.main(["--list", "--tracking-uri", str(empty)]) == 2
    assert capsys.readouterr().err == f"sdyn: error: no store at sqlite:///{empty}\n"
    assert empty.stat().st_size == 0
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(uri).search_experiments()  # a store without sweeps
    # A ' in the name: a traceback from MLflow's search filter.
    assert report.main(["--sweep", "it's", "--tracking-uri", uri, "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f'sdyn: error: no sweep named "it\'s" in {uri}\n'


def test_a_home_folder_in_a_sqlite_uri_is_the_home_folder():
    # MLflow reads sqlite:///~/x.db as a folder named "~" in the working directory, while
    # sdyn's own checks expanded it: one store split in two places.
    assert sqlite_for_path("sqlite:///~/runs/x.db") == f"sqlite:///{Path.home()}/runs/x.db"
    assert sqlite_for_path("~/x.db") == f"sqlite:///{Path.home()}/x.db"
    assert sqlite_for_path("sqlite:///x.db") == "sqlite:///x.db"


@pytest.mark.slow  # a real sweep through Ray and MLflow
def test_a_plain_path_is_a_sqlite_store(tmp_path):
    """``tracking.uri=mystore.db``: the real command records into that SQLite file (no
    traceback); the report command reads it back by the same plain path."""
    tiny = ["+grid=width", "grid.n=[8]", "grid.widths=[4]", "grid.seeds=1"]
    proc = subprocess.run(
        [sys.executable, "-m", "sdyn.sweep", *tiny, "experiment.steps=10", "sweep.name=plain"]
        + ["tracking.uri=mystore.db", "sweep.progress=false"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert f"MLflow sqlite:///{tmp_path}/mystore.db" in proc.stdout
    with sqlite3.connect(tmp_path / "mystore.db") as db:
        names = [row[0] for row in db.execute("select name from runs")]
    assert "plain" in names
    report = subprocess.run(
        [sys.executable, "-m", "sdyn.report", "--sweep", "plain", "--tracking-uri", "mystore.db"]
        + ["--no-log"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr[-2000:]
    # A sweep named twice (drawn twice, then a traceback from the comparison's table).
    twice = subprocess.run(
        [sys.executable, "-m", "sdyn.report", "--tracking-uri", "mystore.db", "--out", "again"]
        + ["--sweep", "plain", "--sweep", "plain"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert twice.returncode == 2 and not (tmp_path / "again").exists()
    assert twice.stderr == "sdyn: error: --sweep plain is given twice: name each sweep once\n"


def test_an_address_that_answers_but_is_no_ray_cluster_is_one_line(tmp_path, capsys, monkeypatch):
    # An MLflow server's port as cluster.address: ray.init waited 13 minutes, deaf to Ctrl-C.
    quiet = type("Quiet", (http.server.BaseHTTPRequestHandler,), {"log_message": lambda *a: None})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"127.0.0.1:{server.server_address[1]}"
    monkeypatch.chdir(tmp_path)
    try:
        assert main(["+grid=width", "cluster=address", f"cluster.address={address}"]) == 2
    finally:
        server.shutdown()
    assert capsys.readouterr().err == (
        f"sdyn: error: cluster.address '{address}' answers, but not as a Ray cluster (no gRPC "
        "there): give its GCS port (HOST:6379) or its Ray Client port (ray://HOST:10001)\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_cluster_that_answers_but_never_serves_ray_is_one_line_after_the_join_timeout(
    tmp_path,
):
    # ray.init waits on such an address for good (a stale `auto`, a port that speaks HTTP/2):
    # past START_TIMEOUT_S (180 s; 3 s here, set in the driver process) the command gives up.
    args = ["+grid=width", "grid.n=[8]", "grid.widths=[2,4]", "grid.seeds=1", "cluster=address"]
    with harness.never_serving_ray() as address:
        code = (
            "import runpy, sys; from sdyn.engine import startup; startup.START_TIMEOUT_S = 3; "
            f"sys.argv = ['sdyn.sweep', *{[*args, f'cluster.address={address}']!r}]; "
            "runpy.run_module('sdyn.sweep', run_name='__main__', alter_sys=True)"
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr == f"sdyn: error: Ray did not join the cluster at {address} in 3 s\n"
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_ray_that_does_not_start_is_one_line_and_exit_3(tmp_path, capsys, monkeypatch):
    # Ray's own start failed on a loaded machine (its raylet timed out): a traceback before.
    from sdyn.engine import startup

    def timed_out(*args):
        raise Exception("The current node timed out during startup. This could happen because")

    monkeypatch.setattr(startup.dispatch_module(), "start", timed_out)
    args = ["+grid=width", "grid.n=[8]", "grid.widths=[2,4]", "grid.seeds=1"]
    assert main([*args, f"tracking.uri=sqlite:///{tmp_path}/new.db"]) == 3
    err = capsys.readouterr().err
    assert err == (
        "sdyn: error: Ray did not start: The current node timed out during startup. This could "
        "happen because; this command recorded no run\n"
    )


def test_cluster_address_auto_is_checked_as_the_address_ray_address_gives(
    tmp_path, capsys, monkeypatch
):
    # ray.init waited on it without end, deaf to a stop.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    status = main(["+grid=width", "cluster=address", "cluster.address=auto"])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err.splitlines() == [
        "sdyn: error: cluster.address=auto, RAY_ADDRESS: cluster.address '127.0.0.1:9' cannot "
        "be reached: [Errno 111] Connection refused"
    ]
    assert list(tmp_path.iterdir()) == []
    # --plan refuses it as the sweep does (it planned the sweep on this machine's CPUs).
    assert main(["+grid=width", "cluster=address", "cluster.address=auto", "--plan"]) == 2
    assert "cannot be reached" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("extra", [["--out", "elsewhere"], ["--format", "pdf"], ["--no-log"]])
def test_the_list_of_sweeps_refuses_what_only_a_report_reads(tmp_path, capsys, extra):
    """``--list`` writes no report: an option for one was ignored without a word."""
    with pytest.raises(SystemExit) as exited:
        report.main(["--list", "--tracking-uri", str(tmp_path / "mlflow.db"), *extra])
    assert exited.value.code == 2 and capsys.readouterr().err == (
        "sdyn: error: --list writes no report: give it without --out, --format or --no-log "
        "(see python -m sdyn.report --help)\n"
    )
    assert list(tmp_path.iterdir()) == []
