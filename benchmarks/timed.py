"""Time a whole command that has no benchmark script of its own, and write its results file: a
sweep end to end, or the test suite.

    python benchmarks/timed.py sweep -- python -m sdyn.sweep +grid=threshold
    python benchmarks/timed.py suite -- python -m pytest -m "not slow"
    python benchmarks/timed.py suite -- .ci/run

The command runs as given, its output passed through, and its wall time is measured
(``time.perf_counter``). For a ``sweep`` the record holds that time and, from the sweep's own
output, its runs and training time (the ``trained N runs in X s`` line). For the ``suite``, from
pytest's last summary line, the tests it ran (every outcome counted) and pytest's own seconds,
and the test processes (pytest-xdist's ``created: N/N workers``; 1 without it); the wall time is
``ci_run_s`` when the command is ``.ci/run``. The file goes to ``benchmarks/results/sweep/`` or
``benchmarks/results/suite/`` (``benchmarks/record.py``); the exit status is the command's.
"""

from __future__ import annotations

import argparse
import re
import shlex
import signal
import subprocess
import sys
import time

import record

TRAINED = re.compile(r"trained (\d+) runs in ([\d.]+) s")
# pytest's last line: "== 395 passed, 2 skipped in 633.30s (0:10:33) ==" (with -q: no "=")
PYTEST_SUMMARY = re.compile(r"^=*\s*(\d+ \w+.*?) in ([\d.]+)s\b", re.MULTILINE)
OUTCOME = re.compile(r"(\d+) (?:passed|failed|skipped|errors?|xfailed|xpassed)")
WORKERS = re.compile(r"created: (\d+)/\d+ workers")


def run(command: list[str]) -> tuple[float, str, int]:
    """(wall seconds, the command's output, its exit status), its output passed through.

    A SIGINT to the process group (Ctrl-C, ``timeout --signal=INT``) is the command's to handle
    (a sweep stops cleanly): this process waits for it and still writes the record.
    """
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    signal.signal(signal.SIGINT, lambda *_: None)
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    status = proc.wait()
    return time.perf_counter() - started, "".join(lines), status


def sweep_figures(command: list[str], wall: float, output: str, status: int) -> dict:
    trained = TRAINED.findall(output)
    runs, training = (int(trained[-1][0]), float(trained[-1][1])) if trained else (None, None)
    return {
        "sweeps": [
            {
                "command": shlex.join(command),
                "runs": runs,
                "training_s": training,
                "end_to_end_s": wall,
                "exit_status": status,
            }
        ]
    }


def suite_figures(command: list[str], wall: float, output: str, status: int) -> dict:
    summaries = PYTEST_SUMMARY.findall(output)
    outcomes, seconds = summaries[-1] if summaries else ("", None)
    workers = WORKERS.findall(output)
    return {
        "tier": "fast" if "not slow" in command else "full",
        "tests": sum(int(n) for n in OUTCOME.findall(outcomes)) or None,
        "outcomes": outcomes or None,
        "processes": int(workers[-1]) if workers else 1,
        "pytest_s": float(seconds) if seconds else None,
        "ci_run_s": wall if command[0].endswith(".ci/run") else None,
        "exit_status": status,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], usage="%(prog)s {sweep,suite} [--out PATH] -- COMMAND"
    )
    parser.add_argument("kind", choices=["sweep", "suite"])
    parser.add_argument("--out", help="the results file (default: a new one under its kind)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:cut]), argv[cut + 1 :]
    if not command:
        parser.error("give the command to time after --")
    wall, output, status = run(command)
    make = sweep_figures if args.kind == "sweep" else suite_figures
    print(f"wrote {record.write(args.kind, make(command, wall, output, status), args.out)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
