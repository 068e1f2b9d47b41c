"""Interactive latency: whole commands, this working tree against a baseline git ref, side by side.

    python benchmarks/latency.py --baseline 5a88413            # medians of 5, A/B alternating
    python benchmarks/latency.py --baseline 5a88413 --repeats 3 --only help,typo

Like asv's ``continuous`` mode, the baseline's code is checked out (``git worktree``) and timed
in the same run, on the same machine, alternating with the working tree's, so a noisy shared
machine slows both alike; the figures that matter are the ratios. Each command runs as a whole
process (``python -m ...``) in a scratch directory of its own side:

* ``main``: the main job ``python -m sdyn.sweep +grid=width`` on a fresh store;
* ``rerun``: the same command again (every run recorded, nothing to train);
* ``help``: ``python -m sdyn.sweep --help``;
* ``typo``: ``python -m sdyn.sweep +grid=width grid.widht=[8]`` (its one-line error);
* ``plan``: ``--plan`` on the store that holds the sweep;
* ``report``: ``python -m sdyn.report --sweep ntk-width-sphere --no-log`` of the finished sweep;
* ``fast-tests`` (only when named with ``--only``): ``pytest -m "not slow"``, once per side,
  each side's own tests with its own pytest settings; a side whose tests fail is still timed
  (5a88413's ``test_batched_training_equals_one_run_at_a_time`` of the score experiment fails
  on the Intel Xeon development machine), and pytest's summary line is printed.

The baseline runs with ``PYTHONPATH`` set to its worktree, so ``import sdyn`` finds its code
(and its config tree); the working tree runs as installed (``pip install -e .``). Prints the
machine, the load average before and after, and per command the median seconds of each side,
their ratio (new / baseline) and the target ratio (issue 31), and writes them with every time to
a results file (``benchmarks/results/latency/``, or ``--out``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import record

REPO = Path(__file__).resolve().parent.parent
SWEEP = [sys.executable, "-m", "sdyn.sweep"]
MAIN_JOB = [*SWEEP, "+grid=width", "sweep.progress=false"]
# name -> (command, target ratio new / baseline, whether it needs the recorded sweep)
COMMANDS = {
    "main": (MAIN_JOB, 0.6, False),
    "rerun": (MAIN_JOB, 0.25, True),
    "help": ([*SWEEP, "--help"], 0.25, False),
    "typo": ([*SWEEP, "+grid=width", "grid.widht=[8]"], 0.25, False),
    "plan": ([*SWEEP, "+grid=width", "--plan"], None, True),
    "report": (
        [sys.executable, "-m", "sdyn.report", "--sweep", "ntk-width-sphere", "--no-log"],
        None,
        True,
    ),
    "fast-tests": ([sys.executable, "-m", "pytest", "-q", "-m", "not slow"], 0.9, False),
}
DEFAULT = ("main", "rerun", "help", "typo", "plan", "report")


def timed(command: list[str], cwd: Path, env: dict) -> float:
    """Wall seconds of ``command`` run to completion in ``cwd``.

    Raises:
        RuntimeError: the command failed where it should not (the typo must exit 2).
    """
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if "pytest" in command:  # timed whether or not its tests pass: say which
        print(proc.stdout.strip().splitlines()[-1], flush=True)
    expected = {2} if "grid.widht=[8]" in command else {0, 1} if "pytest" in command else {0}
    if proc.returncode not in expected:
        output = (proc.stdout + proc.stderr)[-1500:]
        raise RuntimeError(f"{' '.join(command)} in {cwd} exited {proc.returncode}: {output}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="git ref of the baseline, e.g. 5a88413")
    parser.add_argument("--repeats", type=int, default=5, help="runs per command and side")
    parser.add_argument("--only", default=",".join(DEFAULT), help="commands, comma-separated")
    parser.add_argument(
        "--out", help="the results file (default: a new one under benchmarks/results/latency/)"
    )
    args = parser.parse_args(argv)
    chosen = args.only.split(",")
    unknown = sorted(set(chosen) - set(COMMANDS))
    if unknown or args.repeats < 1:
        parser.error(f"unknown commands {unknown} (known: {', '.join(COMMANDS)})")
    baseline = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", args.baseline],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    scratch = Path(tempfile.mkdtemp(prefix="sdyn-latency-"))
    worktree = scratch / "baseline"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(worktree), args.baseline],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    sides = {
        "baseline": {**env, "PYTHONPATH": str(worktree)},
        "new": {k: v for k, v in env.items() if k != "PYTHONPATH"},
    }
    load_before = os.getloadavg()
    times: dict[str, dict[str, list[float]]] = {c: {s: [] for s in sides} for c in chosen}
    try:
        for repeat in range(args.repeats):
            for side, side_env in sides.items():
                for name in chosen:
                    command, _, needs_sweep = COMMANDS[name]
                    if name == "fast-tests" and repeat:
                        continue  # minutes each: once per side
                    home = scratch / f"{side}-{name}-{repeat}"
                    recorded = scratch / f"{side}-recorded"
                    if needs_sweep:
                        if not recorded.exists():  # once per side: a store holding the sweep
                            recorded.mkdir()
                            timed(MAIN_JOB, recorded, side_env)
                        shutil.copytree(recorded, home)
                    else:
                        home.mkdir()
                    tree = worktree if side == "baseline" else REPO
                    cwd = tree if name == "fast-tests" else home
                    times[name][side].append(timed(command, cwd, side_env))
                    print(f"{name:10s} {side:8s} {times[name][side][-1]:7.2f} s", flush=True)
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(worktree)],
            capture_output=True,
        )
        shutil.rmtree(scratch, ignore_errors=True)
    load_after = os.getloadavg()
    host = record.machine()
    print(f"\nmachine: {host['cpu']}, {host['cores']} CPUs; {time.strftime('%Y-%m-%d')}; "
          f"load average before "
          f"{load_before[0]:.2f}, after {load_after[0]:.2f}; baseline {args.baseline}")  # fmt: skip
    print(f"{'command':12s} {'baseline s':>11s} {'new s':>8s} {'ratio':>7s} {'target':>7s}")
    rows = []
    for name in chosen:
        base, new = (statistics.median(times[name][s]) for s in ("baseline", "new"))
        target = COMMANDS[name][1]
        print(f"{name:12s} {base:11.2f} {new:8.2f} {new / base:7.2f} "
              f"{'<= ' + format(target, 'g') if target else '':>7s}")  # fmt: skip
        rows.append(
            {
                "command": name,
                "baseline_s": base,
                "new_s": new,
                "ratio": new / base,
                "target": target,
                "baseline_times_s": times[name]["baseline"],
                "new_times_s": times[name]["new"],
            }
        )
    figures = {
        "baseline": baseline,
        "repeats": args.repeats,
        "load_average": {"before": load_before[0], "after": load_after[0]},
        "commands": rows,
    }
    print(f"wrote {record.write('latency', figures, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
