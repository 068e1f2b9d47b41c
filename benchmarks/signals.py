"""Signals at random moments of a sweep's start-up: every one must be a clean stop, none a hang.

    python benchmarks/signals.py                      # 200 trials of the main job
    python benchmarks/signals.py --trials 10          # the CI version (tests/test_stop.py)
    python benchmarks/signals.py --seed 7 --window 2 6   # replay seed 7, moments 2-6 s in

Each trial runs the main job ``python -m sdyn.sweep +grid=width`` in a fresh directory (a new
SQLite store, so Ray starts while the store is created), sends one signal at a moment drawn
uniformly from the window, SIGTERM (to the driver, as ``kill PID``) and SIGINT (to its whole
process group, as a terminal's Ctrl-C, reaching its Ray processes and drawing helpers) in turn,
and waits ``--timeout`` seconds for it to
exit. The window is, unless given, from the command's start to the moment it starts training,
measured by one run stopped there, first and every 20 signals (the machine's load changes it);
a signal that comes once the sweep trains or has ended counts for nothing and is drawn again.
So does a SIGINT in the first tens of milliseconds, while Python itself starts (``site``,
``runpy``), which Python turns into its own KeyboardInterrupt traceback (exit 1, or killed by
SIGINT) before any code of ``sdyn.sweep`` can set a handler, provided nothing was written and no
process is left; the summary and the results file count them.
A trial is a *clean stop* when:

* the process exited with 128 + the signal's number (130, 143), its last line on stderr
  ``sdyn: stopped by SIG...``, or was ended by the signal itself with no store written (before
  sdyn's handlers were set, nothing has started);
* stderr holds no traceback and no "Exception ignored" (a handler that raised inside a hook);
* no process of its session is left (Ray's, the drawing helpers), within 20 s;
* its store, if one was written, holds no run left RUNNING, at most one parent run and no cell
  run twice.

A *hang* is a process still running ``--timeout`` seconds after the signal: its Python stacks
(``py-spy dump``, where py-spy is installed) are printed, then its session is killed. The seed is
printed first: the same seed draws the same moments and signals. Exit status 0 only when every
trial was a clean stop. The counts, each trial's signal, moment and outcome, and the windows
measured go to a results file (``benchmarks/results/signals/``, or ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record

MAIN_JOB = ["+grid=width", "sweep.progress=false"]
TRAINING = " bundles: "  # the line sdyn prints as it starts training ("300 runs in 71 bundles: ")
SIGNALS = (signal.SIGTERM, signal.SIGINT)
REMEASURE = 20  # signals sent between two measures of the window


def start(workdir: Path, args: list[str]) -> subprocess.Popen:
    """The sweep in ``workdir``, in a session of its own (so that all it started can be found),
    its output in ``workdir``'s out.txt and err.txt."""
    with open(workdir / "out.txt", "w") as out, open(workdir / "err.txt", "w") as err:
        return subprocess.Popen(
            [sys.executable, "-u", "-m", "sdyn.sweep", *args],
            cwd=workdir,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )


def session(sid: int) -> list[str]:
    """``pid command`` of the live processes (zombies aside) of session ``sid``."""
    ps = subprocess.run(["ps", "-eo", "pid=,sid=,stat=,args="], capture_output=True, text=True)
    rows = [line.split(None, 3) for line in ps.stdout.splitlines()]
    return [f"{r[0]} {r[3]}" for r in rows if len(r) == 4 and r[1] == str(sid) and "Z" not in r[2]]


def kill_session(sid: int) -> None:
    for row in session(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(row.split()[0]), signal.SIGKILL)


def measure_window(args: list[str]) -> float:
    """Seconds from the command's start to its training line, in one run stopped there."""
    workdir = Path(tempfile.mkdtemp(prefix="sdyn-signals-"))
    started = time.monotonic()
    proc = start(workdir, args)
    while TRAINING not in (workdir / "out.txt").read_text():
        if proc.poll() is not None:
            raise RuntimeError(f"the sweep exited {proc.returncode}: see {workdir / 'err.txt'}")
        time.sleep(0.05)
    window = time.monotonic() - started
    proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(60)
    kill_session(proc.pid)
    shutil.rmtree(workdir, ignore_errors=True)
    return window


def store_problems(database: Path) -> list[str]:
    """What a clean stop must not leave in a store: runs RUNNING, two parents, a cell twice."""
    if not database.exists():
        return []
    with contextlib.closing(sqlite3.connect(database)) as db:
        if not db.execute("select name from sqlite_master where name = 'runs'").fetchall():
            return []  # stopped while MLflow created its tables: no run yet
        running = db.execute("select count(*) from runs where status = 'RUNNING'").fetchone()[0]
        kinds = dict(
            db.execute(
                "select value, count(*) from tags where key = 'sdyn.kind' group by value"
            ).fetchall()
        )
        twice = db.execute(
            "select count(*) from (select value from tags where key = 'sdyn.cell' "
            "group by value having count(*) > 1)"
        ).fetchone()[0]
    problems = [f"{running} run(s) RUNNING"] if running else []
    problems += [f"{kinds['sweep']} parent runs"] if kinds.get("sweep", 0) > 1 else []
    return problems + ([f"{twice} cell(s) recorded twice"] if twice else [])


def trial(args: list[str], delay: float, signum: int, timeout: float) -> tuple[str, str]:
    """One sweep sent ``signum`` ``delay`` seconds after its start. Returns the outcome
    (``clean``, ``hang``, ``unclean``; ``late``: the sweep had started training or ended before
    the signal; ``python``: a SIGINT Python itself turned into a KeyboardInterrupt before
    ``sdyn.sweep``'s first line, with nothing written and no process left; these two count
    for nothing) and what was seen."""
    workdir = Path(tempfile.mkdtemp(prefix="sdyn-signals-"))
    started = time.monotonic()
    proc = start(workdir, args)
    time.sleep(max(0.0, started + delay - time.monotonic()))
    if proc.poll() is not None or TRAINING in (workdir / "out.txt").read_text():
        proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout)
        kill_session(proc.pid)
        shutil.rmtree(workdir, ignore_errors=True)
        return "late", "its start-up had ended"
    if signum == signal.SIGINT:  # a terminal's Ctrl-C: to the whole process group
        os.killpg(proc.pid, signum)
    else:  # kill PID: to the driver alone
        proc.send_signal(signum)
    sent = time.monotonic()
    try:
        status = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        stacks = "(py-spy not installed)"
        if shutil.which("py-spy"):
            dump = ["py-spy", "dump", "--pid", str(proc.pid)]
            stacks = subprocess.run(dump, capture_output=True, text=True, timeout=60).stdout
        kill_session(proc.pid)
        proc.wait()
        err = (workdir / "err.txt").read_text()
        return "hang", f"still running {timeout:.0f} s after it; stderr:\n{err}\n{stacks}"
    took = time.monotonic() - sent
    err = (workdir / "err.txt").read_text()
    name, problems, outcome = signal.Signals(signum).name, [], "clean"
    if status == 128 + signum:
        last = (err.strip().splitlines() or [""])[-1]
        if not last.startswith(f"sdyn: stopped by {name}"):
            problems.append(f"last line {last!r}")
    elif status in (1, -signum) and signum == signal.SIGINT and _before_sdyn(err):
        outcome = "python"
    elif status != -signum:
        problems.append(f"exit status {status}")
    elif (workdir / "mlflow.db").exists():  # ended by the signal, yet it had begun writing
        problems.append(f"exit status {status} with a store written")
    if outcome == "clean":
        problems += [
            f"{word!r} on stderr" for word in ("Traceback", "Exception ignored") if word in err
        ]
    deadline = time.time() + 20
    while session(proc.pid) and time.time() < deadline:
        time.sleep(0.5)
    left = session(proc.pid)
    if left:
        problems.append(f"{len(left)} process(es) left: {left[:3]}")
        kill_session(proc.pid)
    problems += store_problems(workdir / "mlflow.db")
    seen = f"exit {status} {took:.1f} s after the signal"
    if problems:
        return "unclean", f"{seen}; {'; '.join(problems)}; stderr:\n{err[-3000:]}"
    shutil.rmtree(workdir, ignore_errors=True)
    return outcome, seen


def _before_sdyn(err: str) -> bool:
    """Whether stderr is Python's own KeyboardInterrupt from before ``sdyn.sweep``'s first line
    (the interpreter's start-up, ``site``, or ``import sdyn``): no frame of ``sdyn/sweep.py``,
    so no code of sdyn's could have set a handler yet."""
    lines = err.strip().splitlines()
    return bool(lines) and lines[-1] == "KeyboardInterrupt" and "sdyn/sweep.py" not in err


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=None, help="default: a fresh one, printed")
    parser.add_argument("--timeout", type=float, default=60, help="seconds to exit; else a hang")
    parser.add_argument(
        "--window",
        type=float,
        nargs=2,
        metavar=("FROM", "TO"),
        help="seconds after the start between which the signals come (default: measured)",
    )
    parser.add_argument(
        "--out", help="the results file (default: a new one under benchmarks/results/signals/)"
    )
    parser.add_argument("overrides", nargs="*", default=MAIN_JOB, help=f"default: {MAIN_JOB}")
    opts = parser.parse_args(argv)
    # The sweeps start as from a terminal: not with SIGINT ignored, as a shell's background job
    # (and so this process, run as one) has it, and as a child would inherit it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    seed = secrets.randbelow(10**6) if opts.seed is None else opts.seed
    print(f"signals: seed {seed} (--seed {seed} replays the same moments and signals)", flush=True)
    began = time.monotonic()
    rng = random.Random(seed)
    counts = dict.fromkeys(("clean", "hang", "unclean", "late", "python"), 0)
    figures = {"trials": opts.trials, "seed": seed, "overrides": opts.overrides, "windows_s": []}
    figures["signals"] = []
    k, window = 0, opts.window
    while k < opts.trials:
        if opts.window is None and sum(counts.values()) % REMEASURE == 0:
            window = (0.0, measure_window(opts.overrides))  # the machine's load changes it
            figures["windows_s"].append(round(window[1], 2))
            print(f"signals: moments 0 to {window[1]:.2f} s in (measured)", flush=True)
        signum, delay = SIGNALS[k % 2], rng.uniform(*window)
        outcome, seen = trial(opts.overrides, delay, signum, opts.timeout)
        counts[outcome] += 1
        name = signal.Signals(signum).name
        print(f"trial {k}: {name} {delay:.2f} s in: {outcome}, {seen}", flush=True)
        figures["signals"].append(
            {"signal": name, "moment_s": round(delay, 2), "outcome": outcome,
             "seen": seen.splitlines()[0]}
        )  # fmt: skip
        k += outcome not in ("late", "python")
        if counts["late"] > opts.trials:
            raise SystemExit("signals: most signals came after start-up: give --window")
    wall = time.monotonic() - began
    figures.update(counts, wall_s=round(wall, 1), passed=counts["clean"] == opts.trials)
    print(
        f"signals: {counts['clean']} of {opts.trials} clean stops, {counts['hang']} hangs, "
        f"{counts['unclean']} unclean ({counts['late']} signals came after start-up, "
        f"{counts['python']} before sdyn's first line: drawn again); seed {seed}; {wall:.0f} s"
    )
    print(f"wrote {record.write('signals', figures, opts.out)}")
    return 0 if figures["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
