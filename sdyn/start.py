"""Starting a sweep: Ray and the tracking store at once, then :func:`sdyn.driver.run_sweep`.

A sweep on a new SQLite store has everything to train. Ray then starts on the main thread (its
processes die with the thread that started them; 3-5 s on 2 cores, much of it spent waiting on
them with a core idle) while one thread imports the driver (MLflow and pandas, about 1 s),
creates the store and imports the report's fitting and drawing stack. With
``cluster.device=cuda`` Ray starts first, so that nothing is written without a GPU. On a store
that exists, the driver first reads what is recorded and starts Ray only if something is left to
train (:func:`start_ray`): a rerun with nothing to train starts none.

Until Ray has started, this module has imported neither MLflow nor the driver.
"""

from __future__ import annotations

import signal
import sys
from concurrent.futures import Future, ThreadPoolExecutor

from sdyn import stops
from sdyn.sweep import BadInput, Plan, _one_line, quiet_libraries
from sdyn.tracking import uri as uris


def run(p: Plan) -> int:
    """Run the plan ``p``: check its store and cluster, start Ray and a new store together (see
    the module docstring), and hand over to :func:`sdyn.driver.run_sweep`.

    Returns :func:`sdyn.driver.run_sweep`'s exit status, or 128 + the signal's number when
    SIGINT or SIGTERM stopped Ray's start (no run recorded).

    Raises:
        BadInput: the store or the cluster's address cannot be used, or ``cluster.device=cuda``
            on a Ray cluster without a GPU; before anything is written.
    """
    cluster, track = p.objects["cluster"], p.objects["tracking"]
    address = getattr(cluster, "address", None)
    try:
        uris.check(track.uri)
        if address is not None:
            dispatch_module().check_address(address)
    except ValueError as exc:
        raise BadInput(_one_line(exc)) from None
    connecting: Future | None = None
    if cluster.device == "cuda" or not uris.exists(track.uri):
        dispatch = dispatch_module()  # Ray imported before the thread starts importing the driver
        if cluster.device != "cuda":
            pool = ThreadPoolExecutor(1, "sdyn-store")
            connecting = pool.submit(_prepare, track)
            pool.shutdown(wait=False)
        try:
            with stops.stoppable():
                start_ray(cluster)
        except stops.Stopped as stop:
            dispatch.stop()
            name = signal.Signals(stop.signum).name
            print(f"sdyn: stopped by {name} while Ray started; no run was recorded",
                  file=sys.stderr)  # fmt: skip
            return 128 + stop.signum
        if cluster.device == "cuda" and dispatch.gpu_count() < 1:
            raise BadInput("cluster.device=cuda and the Ray cluster has no GPU")
    from sdyn import driver

    quiet_libraries()
    return driver.run_sweep(p, connecting)


def start_ray(cluster) -> None:
    """Start or join the Ray cluster ``cluster`` (the config's ``cluster``) configures; nothing
    if this process already did. A SIGTERM while ``ray.init`` starts Ray (its own handler exits)
    is a stop.

    Raises:
        sdyn.stops.Stopped: SIGTERM while Ray started.
    """
    try:
        dispatch_module().start(
            getattr(cluster, "address", None),
            getattr(cluster, "num_cpus", None),
            getattr(cluster, "num_gpus", None),
        )
    except SystemExit:
        raise stops.Stopped(signal.SIGTERM) from None


def _prepare(track) -> tuple:
    """The store's thread: import the driver, connect to the store (creating it), then import the
    report's stack (1-2 s), which a new store's sweep draws at its end. Returns
    :func:`sdyn.driver.connect`'s result."""
    from sdyn import driver

    quiet_libraries()  # again: importing MLflow set its loggers' levels
    connected = driver.connect(track)
    from sdyn.analysis import report  # noqa: F401

    return connected


def dispatch_module():
    """:mod:`sdyn.engine.dispatch`, imported on first use: Ray and torch load only where a sweep
    needs them (a rerun with nothing to train needs neither). Importing Ray sets its loggers'
    levels: they are quieted again."""
    from sdyn.engine import dispatch

    quiet_libraries()
    return dispatch
