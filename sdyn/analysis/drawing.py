"""A report's figures drawn at once, one process per free core.

Drawing is Python-bound (matplotlib's layout and text), so threads would share one core. The
processes are forked once the report's data are fitted: each starts with the caller's imports
and data, in milliseconds (a spawned one spends 2-4 s importing matplotlib and pandas again,
which on 2 cores cost what it saved), and draws what :data:`_JOBS` lists, so nothing is pickled
but each job's result. A forked child holds only the forking thread: the caller's other threads
(MLflow's lease renewal, tqdm's monitor) are not in it, and it touches none of their locks; it
draws, writes its files and exits. A figure drawn in a child is byte-for-byte the one drawn in
the caller (no dates, a fixed SVG hash salt: :data:`sdyn.analysis.figures.STYLE`). Where
there is one free core, or no ``fork`` (Windows), the figures are drawn in the caller.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

_JOBS: list[tuple[Callable, tuple]] = []  # what the forked processes draw, by index


def free_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def draw_all(jobs: list[tuple[Callable, tuple]], processes: int | None = None) -> list[Any]:
    """``[draw(*args) for draw, args in jobs]``, drawn by up to ``processes`` forked processes
    (default: one per free core, :func:`free_cores`), each taking the next job as it finishes
    one; in this process where that is fewer than 2 or the OS cannot fork.

    The processes ignore SIGINT and SIGTERM: a Ctrl-C reaches a terminal's whole process group,
    and the driver defers a stop until the report is whole (:data:`sdyn.driver.STOPS`).

    Raises:
        Exception: what a job raised (from its process, with its traceback).
    """
    global _JOBS
    processes = min(len(jobs), processes or free_cores())
    if processes < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return [draw(*args) for draw, args in jobs]
    for stream in (sys.stdout, sys.stderr):  # a child must not write the caller's buffer again
        stream.flush()
    _JOBS = jobs
    try:
        fork = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(processes, mp_context=fork, initializer=_ignore_stops) as pool:
            return list(pool.map(_draw, range(len(jobs))))
    finally:
        _JOBS = []


def _draw(k: int) -> Any:
    draw, args = _JOBS[k]
    return draw(*args)


def _ignore_stops() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
