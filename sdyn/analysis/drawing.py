"""A report's figures drawn at once, by a pool of processes, one per free core.

Drawing is Python-bound (matplotlib's layout, text and mathtext), so threads would share one
core. The pool's processes come from :mod:`multiprocessing`'s forkserver: one clean process,
started by :func:`start` as soon as a report is due, imports the drawing code (:data:`PRELOAD`)
while the caller reads the run table and fits; each pool process is then forked from it in
milliseconds. None is forked from the caller: a driver holds Ray's and MLflow's threads,
sockets and locks, which a fork would copy mid-use (a driver that forked after Ray's shutdown
exited with Ray's "core worker has already been shutdown" in about half the runs). A job's
arguments are pickled to its process and its result back; a figure drawn there is byte for
byte the one drawn in the caller (no dates, a fixed SVG hash salt:
:data:`sdyn.analysis.figures.STYLE`).

The figures are drawn in the caller where fewer than two cores are free, where the platform
has no forkserver (Windows), or where the caller's ``__main__`` is a script run by path: every
pool process would run that script again (:mod:`multiprocessing`'s rule for ``spawn`` and
``forkserver``), and one without an ``if __name__ == "__main__"`` guard would sweep again.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

# What the forkserver imports once for every pool process: the drawing code (not the report's
# text and tracking: MLflow alone takes a second to import).
PRELOAD = ["sdyn.analysis.claim_plots"]


def free_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _pooled() -> bool:
    main = sys.modules["__main__"]
    by_path = getattr(main, "__spec__", None) is None and hasattr(main, "__file__")
    return (
        free_cores() >= 2
        and "forkserver" in multiprocessing.get_all_start_methods()
        and not by_path
    )


def start() -> None:
    """Start the forkserver, which imports :data:`PRELOAD` while the caller goes on; nothing
    where figures are drawn in the caller, or once it runs. Call it as soon as a report is due.
    """
    if not _pooled():
        return
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
    forkserver.ensure_running()


def draw_all(jobs: list[tuple[Callable, tuple]], processes: int | None = None) -> list[Any]:
    """``[draw(*args) for draw, args in jobs]``, by a pool of up to ``processes`` processes
    (default: one per free core, :func:`free_cores`), each taking the next job as it finishes
    one; in this process where that is fewer than 2 (or see the module's docstring). Each
    ``draw`` must be a module-level function, its ``args`` and result picklable.

    The pool's processes ignore SIGINT and SIGTERM: a Ctrl-C reaches a terminal's whole process
    group, and the driver defers a stop until the report is whole (:data:`sdyn.driver.STOPS`).

    Raises:
        Exception: what a job raised (from its process, with its traceback).
    """
    processes = min(len(jobs), processes or free_cores())
    if processes < 2 or not _pooled():
        return [draw(*args) for draw, args in jobs]
    start()
    forkserver = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(processes, mp_context=forkserver, initializer=_ignore_stops) as pool:
        return list(pool.map(_draw, jobs))


def _draw(job: tuple[Callable, tuple]) -> Any:
    draw, args = job
    return draw(*args)


def _ignore_stops() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
