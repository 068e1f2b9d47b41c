"""Ray's start for a sweep, where no signal can cut it short, and its stop.

:func:`start_ray` runs ``ray.init`` on a thread of its own, ``sdyn-ray``, which lives until
:func:`stop_ray`:

- Python runs signal handlers on the main thread only: none runs inside the
  ``os.register_at_fork`` hooks around the forks of Ray's processes (the GCS, the raylet, ...;
  ``subprocess.Popen(preexec_fn=...)``), where a handler that raised left ``logging``'s lock
  held and hung the driver (:mod:`sdyn.stops`).
- ``ray.init`` installs its SIGTERM handler (``sys.exit``) only on the main thread: sdyn's stay.
  (Its core worker's C++ handler for SIGTERM is replaced by Python's once Ray has started.)
- The processes a new local instance starts die with the thread that started them (Ray's fate
  sharing, ``PR_SET_PDEATHSIG``), so that a driver killed by ``kill -9`` leaves none: the
  thread ends only once :func:`stop_ray` has shut Ray down.

Meanwhile the main thread waits with stops deferred (:data:`sdyn.stops.STOPS`): a stop then is
raised once Ray has started (3-5 s on 2 cores), and the caller stops it; or, joining a cluster
that has not answered :data:`STOP_GRACE_S` after the stop, with Ray left joining (the process
then ends).

Ray and torch are imported on first use (:func:`dispatch_module`): a rerun with nothing to train
needs neither.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from concurrent.futures import Future

from sdyn import stops
from sdyn.quiet import quiet_libraries

_release: threading.Event | None = None  # set by stop_ray: the thread holding Ray may end


class RayDidNotStart(RuntimeError):
    """Ray's own start failed (a local instance whose raylet or GCS did not come up in Ray's
    time, on a loaded machine): not the user's input; the same command tried again may
    succeed."""


def dispatch_module():
    """:mod:`sdyn.engine.dispatch`, imported on first use: Ray and torch load only where a sweep
    needs them. Importing Ray sets its loggers' levels: they are quieted again."""
    from sdyn.engine import dispatch

    quiet_libraries()
    return dispatch


def start_ray(cluster) -> None:
    """Start or join the Ray cluster ``cluster`` (the config's ``cluster``) configures, on the
    thread ``sdyn-ray`` (see the module docstring); nothing if this process already did. Call it
    on the main thread with SIGINT and SIGTERM armed (:func:`sdyn.stops.stoppable`).

    Raises:
        sdyn.stops.Stopped: a stop came before Ray started (none is started) or while it
            started (it has started, and :func:`stop_ray` stops it; or, joining a cluster, it
            is still joining :data:`STOP_GRACE_S` later, and the caller must end the process).
        ValueError: ``cluster.address`` does not answer, or Ray had not joined it after
            :data:`START_TIMEOUT_S`.
        RayDidNotStart: ``ray.init`` raised anything else (one line: its message).
    """
    global _release
    dispatch = dispatch_module()
    import ray

    if ray.is_initialized():
        return
    started: Future = Future()
    _release = threading.Event()
    args = (getattr(cluster, k, None) for k in ("address", "num_cpus", "num_gpus"))
    holder = threading.Thread(
        target=_hold, args=(dispatch, started, _release, *args), name="sdyn-ray", daemon=True
    )
    logging.getLogger("ray._private.worker").addFilter(_not_the_main_thread)
    address = getattr(cluster, "address", None)
    bound = f"at most {STOP_GRACE_S:.0f} s" if address is not None else "seconds"
    with stops.STOPS.deferring(f"stopping once Ray has started ({bound})"):
        holder.start()
        failure = _wait(started, address)
        _python_handlers_again()
    if isinstance(failure, Exception) and not isinstance(failure, ValueError):
        message = " ".join(str(failure).split()) or type(failure).__name__
        raise RayDidNotStart(f"Ray did not start: {message}") from failure
    if failure is not None:
        raise failure


# Joining a cluster cannot be cut short (``ray.init`` waits on its GCS in C++) and may never
# end (an address that answers but never serves, ``auto`` naming a stale cluster): past these
# the caller stops waiting, with Ray left joining on its daemon thread (a join starts no
# process here). A stop waits a little for a join about to end, so that Ray is shut down
# cleanly. An embedded start is waited for: Ray's own timeouts bound it, and one given up on
# would leave its agents running.
STOP_GRACE_S = 10.0
START_TIMEOUT_S = 180.0


def _wait(started: Future, address: str | None) -> BaseException | None:
    """Wait for Ray's start on ``sdyn-ray``; returns what it raised (None: it started).

    Raises:
        sdyn.stops.Stopped: joining the cluster at ``address``, a stop came and Ray had not
            joined :data:`STOP_GRACE_S` later.
        ValueError: Ray had not joined the cluster at ``address`` after
            :data:`START_TIMEOUT_S`.
    """
    if address is None:
        return started.exception()
    begun, stopped = time.monotonic(), None
    while True:
        try:
            return started.exception(timeout=0.25)
        except TimeoutError:
            pass
        now = time.monotonic()
        if stops.STOPS.requested():
            stopped = stopped or now
            if now - stopped > STOP_GRACE_S:
                raise stops.Stopped(stops.STOPS.signum)
        if now - begun > START_TIMEOUT_S:
            hint = " (auto: RAY_ADDRESS's, or the latest `ray start` here)" * (address == "auto")
            late = f"{START_TIMEOUT_S:.0f} s"
            raise ValueError(f"Ray did not join the cluster at {address} in {late}{hint}")


def stop_ray() -> None:
    """Shut down the Ray this process started or joined, if it did (its processes end; on a
    cluster the driver disconnects and its tasks are cancelled), and let ``sdyn-ray`` end."""
    if "sdyn.engine.dispatch" in sys.modules:  # imported only where Ray was needed
        dispatch_module().stop()
    if _release is not None:
        _release.set()


def _hold(dispatch, started: Future, release: threading.Event, *args) -> None:
    """The thread ``sdyn-ray``: start Ray (:func:`sdyn.engine.dispatch.start` with ``args``),
    hand the outcome to ``started``, then hold Ray's processes until ``release``."""
    try:
        dispatch.start(*args)
    except BaseException as exc:  # any: the main thread waits for an outcome
        started.set_exception(exc)
        return
    started.set_result(None)
    release.wait()


def _python_handlers_again() -> None:
    """Python's SIGINT and SIGTERM handlers set again, and an abort that a SIGTERM armed while
    Ray started called off. ``ray.init`` installs abseil's failure-signal handler for SIGTERM
    (with the driver's core worker): it prints a stack, arms an abort 3 s away, then hands the
    signal to the handler before it; a driver still stopping 3 s later ended in SIGABRT
    (ray-project/ray#64830)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if handler is not None:
            signal.signal(signum, handler)
    if stops.STOPS.requested():
        signal.alarm(0)


def _not_the_main_thread(record: logging.LogRecord) -> bool:
    """Ray's warning that ``ray.init`` off the main thread set no SIGTERM handler: by design."""
    return not record.getMessage().startswith("SIGTERM handler is not set")
