"""A report's figures drawn at once: by this process and by helper processes, one per core that
was idle when the sweep began.

Drawing is Python-bound (matplotlib's layout and text), so threads would share one core. The main
job on a quiet 2-core machine draws its report on one core: a helper draws beside it. On a busy
machine (the test suite's two processes on two cores) there is no helper and the figures are
drawn in the caller: a helper's start (Python, matplotlib, pandas: about 2 s of CPU) would slow
the machine's other work more than the drawing gains.

:func:`start` decides once, when a sweep is about to run (``python -m sdyn.sweep``, before Ray
starts): the cores idle since the command began, while it planned on one core. With one or more
it starts :mod:`multiprocessing`'s forkserver, which imports the drawing code (:data:`PRELOAD`)
on the idle core. The helpers are forked from that clean process in milliseconds when the
figures are due, never from the driver, whose Ray and MLflow threads, sockets and locks a fork
would copy mid-use. A job's arguments are pickled to its process and its result back; a figure
drawn there is byte for byte the one drawn in the caller (no dates, a fixed SVG hash salt:
:data:`sdyn.analysis.figures.STYLE`).

No helper where :func:`start` was not called, where the platform has no forkserver or no
``/proc/stat`` (Linux's, where the idle cores are read), or where ``__main__`` is a script run by
path: every helper would run that script again (:mod:`multiprocessing`'s rule for ``spawn`` and
``forkserver``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from sdyn import stops

# What the forkserver imports once for every helper: the drawing code (not MLflow, a second).
PRELOAD = ["sdyn.analysis.claim_plots"]

_helpers = 0  # helper processes draw_all() may use, as start() decided


def cpu_times() -> tuple[int, int] | None:
    """All cores' (total, idle + iowait) times since boot, in jiffies, from ``/proc/stat``; None
    where there is none (not Linux)."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return None
    return sum(fields), fields[3] + fields[4]


def idle_cores(since: tuple[int, int] | None) -> float:
    """Cores (of this process's CPU affinity) that no process used, on average, since
    :func:`cpu_times` returned ``since``; 0.0 where that is None or no time has passed."""
    now = cpu_times()
    if since is None or now is None or now[0] <= since[0]:
        return 0.0
    cores = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return min(usable, cores * (now[1] - since[1]) / (now[0] - since[0]))


def start(since: tuple[int, int] | None) -> None:
    """Decide how many helpers :func:`draw_all` may use, one per core idle since ``since`` (a
    :func:`cpu_times` taken while the caller itself kept one core busy, a few tenths of a second
    before), and start the forkserver, which imports :data:`PRELOAD` for them while the caller
    goes on. Call it as soon as a report will be due, before anything else loads the machine."""
    global _helpers
    main = sys.modules["__main__"]
    by_path = getattr(main, "__spec__", None) is None and hasattr(main, "__file__")
    if by_path or "forkserver" not in multiprocessing.get_all_start_methods():
        return
    _helpers = int(idle_cores(since) + 0.5)
    if _helpers:
        multiprocessing.get_context("forkserver").set_forkserver_preload(PRELOAD)
        from multiprocessing import forkserver

        # The forkserver and its helpers start with the stop signals ignored: a Ctrl-C, or a
        # SIGTERM or SIGHUP to the whole process group, is the driver's to handle (it defers a
        # stop until the report is whole); the forkserver ignored only Ctrl-C, once it had
        # imported PRELOAD (seconds). A signal here stays pending (blocked) for the handler.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set(stops.SIGNALS))
        handlers = {signum: signal.signal(signum, signal.SIG_IGN) for signum in stops.SIGNALS}
        try:
            forkserver.ensure_running()
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def draw_all(jobs: list[tuple[Callable, tuple]]) -> list[Any]:
    """``[draw(*args) for draw, args in jobs]``: the helpers :func:`start` started take jobs
    from the front, this process from the back, each the next one as it finishes one; all here
    where there is no helper. Each ``draw`` must be a module-level function, its ``args`` and
    result picklable.

    The helpers ignore the stop signals (:data:`sdyn.stops.SIGNALS`): a Ctrl-C reaches a
    terminal's whole process group, and the driver defers a stop until the report is whole
    (:data:`sdyn.stops.STOPS`).

    Raises:
        Exception: what a job raised (in its process, with its traceback).
    """
    helpers = min(_helpers, len(jobs) - 1)
    if helpers < 1:
        return [draw(*args) for draw, args in jobs]
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []
    todo = deque(range(len(jobs)))  # the helpers take from the left, this process from the right

    def take(front: bool) -> int | None:
        try:
            return None if errors else todo.popleft() if front else todo.pop()
        except IndexError:
            return None

    def feed(pool: ProcessPoolExecutor) -> None:  # a thread per helper, handing it one job a time
        while (k := take(front=True)) is not None:
            try:
                results[k] = pool.submit(jobs[k][0], *jobs[k][1]).result()
            except BrokenProcessPool:  # no helper (the forkserver was killed): drawn here
                todo.appendleft(k)
                return
            except BaseException as exc:
                errors.append(exc)

    forkserver = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(helpers, mp_context=forkserver, initializer=stops.ignore) as pool:
        feeders = [threading.Thread(target=feed, args=(pool,)) for _ in range(helpers)]
        for feeder in feeders:
            feeder.start()
        try:
            while (k := take(front=False)) is not None:
                results[k] = jobs[k][0](*jobs[k][1])
        except BaseException as exc:
            errors.append(exc)
        for feeder in feeders:
            feeder.join()
    while (k := take(front=False)) is not None:  # what a broken pool handed back
        results[k] = jobs[k][0](*jobs[k][1])
    if errors:
        raise errors[0]
    return results
