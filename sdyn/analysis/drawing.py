"""A report's figures drawn at once, one process per free core.

Drawing is Python-bound (matplotlib's layout and text), so threads would share one core: the
figures go to a :class:`concurrent.futures.ProcessPoolExecutor`. The caller starts it
(``spawn``: a driver holds threads of Ray and MLflow, which a fork would copy mid-lock) before
it loads the runs, so that the processes' imports overlap the loading and the fits, and hands it
to :func:`sdyn.analysis.report.build`. A figure drawn in a pool process is byte-for-byte the one
drawn in the caller (no dates, a fixed SVG hash salt: :data:`sdyn.analysis.figures.STYLE`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor


def free_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pool() -> ProcessPoolExecutor | None:
    """Processes that draw figures at once, one per free core, started now; None (the figures
    are drawn in the caller) where there is one core, or where the program is a script run by
    its path: a spawned process runs such a ``__main__`` again, and one without an ``if __name__
    == "__main__":`` guard would report again (``python -m``, ``-c``, notebooks and the sdyn
    commands are safe).

    The processes ignore SIGINT and SIGTERM: a Ctrl-C reaches a terminal's whole process group,
    and the driver defers a stop until the report is whole (:data:`sdyn.driver.STOPS`).
    """
    main = sys.modules["__main__"]
    script = getattr(main, "__file__", None) is not None and main.__spec__ is None
    workers = free_cores()
    if workers < 2 or script:
        return None
    drawers = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_stops
    )
    for _ in range(workers):  # one task each starts every process now (they start on demand)
        drawers.submit(_import_report)
    return drawers


def submit(drawers: ProcessPoolExecutor | None, draw: Callable, *args) -> Future:
    """``draw(*args)`` on one of ``drawers``, or here and now where ``drawers`` is None; its
    :class:`~concurrent.futures.Future` either way."""
    if drawers is not None:
        return drawers.submit(draw, *args)
    done: Future = Future()
    done.set_result(draw(*args))
    return done


def _ignore_stops() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def _import_report() -> None:
    import sdyn.analysis.report  # noqa: F401  (what every figure task unpickles)
