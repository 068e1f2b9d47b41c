"""A benchmark run as a results file: ``benchmarks/results/<benchmark>/<UTC time>-<commit>.json``.

Every benchmark here writes its figures through :func:`write`, which adds what makes a figure
comparable later, as asv keeps its history: the date and time, the machine (CPU model, cores,
GPUs, memory), the commit it started on and whether the working tree had changes, and the
command line. The schema is in ``benchmarks/results/README.md``; ``docs/make_performance.py``
shows the latest figures on the Performance page.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
SCHEMA = 1
# When the benchmark started (this module is imported at its start), and the load then.
STARTED = datetime.now(UTC)
LOAD_AT_START = os.getloadavg()[0]


def _cpuinfo(key: str) -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine() -> dict:
    """The machine this process runs on: ``cpu`` (model name, from /proc/cpuinfo on Linux),
    ``cores`` (``os.cpu_count()``), ``gpu`` (the GPUs' names as ``nvidia-smi`` lists them, joined
    by ", "; None without one), ``memory_gib`` (MemTotal of /proc/meminfo; None elsewhere) and
    ``os``."""
    try:
        listed = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        gpus = [g.strip() for g in listed.stdout.splitlines() if g.strip()]
    except (OSError, subprocess.SubprocessError):
        gpus = []
    try:
        kib = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
        memory = round(kib / 2**20, 1)
    except (OSError, StopIteration):
        memory = None
    return {
        "cpu": _cpuinfo("model name") or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "gpu": ", ".join(gpus) or None,
        "memory_gib": memory,
        "os": platform.platform(),
    }


def commit() -> tuple[str | None, bool | None]:
    """The commit named by ``$SDYN_COMMIT`` (``benchmarks/gpu_e2e.sh --commit``: a GPU machine
    gets the working tree, and any ``.git`` beside it need not be that tree's) and None; else the
    checked-out commit's hash and whether tracked files differ from it; else None, None."""
    if os.environ.get("SDYN_COMMIT"):
        return os.environ["SDYN_COMMIT"], None
    try:
        head = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:
        head = None
    if head is None or head.returncode:
        return None, None
    changed = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    )
    return head.stdout.strip(), bool(changed.stdout.strip())


# The code the benchmark runs is the commit it started on: a long one (an hour's sweep) may
# outlive it, while commits land beside it.
COMMIT_AT_START = commit()


def script() -> str:
    """The running script's path, relative to the repository when it lies inside it."""
    path = Path(sys.argv[0]).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else sys.argv[0]


def write(benchmark: str, figures: dict, out: str | None = None) -> Path:
    """Write this run's results file (again, if the benchmark writes as it goes) and return its
    path.

    Args:
        benchmark: the benchmark's name (its script's stem): the folder under
            ``benchmarks/results/``.
        figures: what the benchmark measured, in its own schema (``benchmarks/results/README.md``).
        out: the file to write instead of ``benchmarks/results/<benchmark>/<start>-<commit>.json``
            (``<start>`` the UTC time the benchmark started, ``YYYY-MM-DDTHHMMSSZ``).
    """
    sha, dirty = COMMIT_AT_START
    record = {
        "schema": SCHEMA,
        "benchmark": benchmark,
        "date": STARTED.strftime("%Y-%m-%d"),
        "time": STARTED.strftime("%H:%M:%S UTC"),
        "machine": machine(),
        "commit": sha,
        "dirty": dirty,
        "command": shlex.join(["python", script(), *sys.argv[1:]]),
        "conditions": f"load average {LOAD_AT_START:.2f} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end",
        "figures": figures,
    }
    stamp = STARTED.strftime("%Y-%m-%dT%H%M%SZ")
    path = Path(out) if out else RESULTS / benchmark / f"{stamp}-{(sha or 'nogit')[:7]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path
