"""Starting a sweep: Ray and the tracking store at once, then :func:`sdyn.driver.run_sweep`.

A sweep on a new SQLite store has everything to train. Ray then starts (on its own thread,
:func:`sdyn.engine.startup.start_ray`: 3-5 s on 2 cores, much of it spent waiting on its
processes with a core idle) while one thread imports the driver (MLflow and pandas, about 1 s),
creates the store and imports the report's fitting and drawing stack. A cluster given by
``cluster.address``, or any with ``cluster.device=cuda``, is joined first, so that nothing is
written where it refuses this driver or has no GPU. Otherwise, on a store that exists, the
driver first reads what is recorded and starts Ray only if something is left to train: a rerun
with nothing to train starts none.

Until Ray has started, this module has imported neither MLflow nor the driver.
"""

from __future__ import annotations

import signal
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from sdyn import events, stops
from sdyn.engine import startup
from sdyn.errors import EXIT_NOT_RECORDED, BadInput, check_writable, one_line
from sdyn.plan import Plan
from sdyn.quiet import quiet_libraries
from sdyn.tracking import uri as uris


def run(p: Plan) -> int:
    """Run the plan ``p``: check its store and cluster, start Ray and a new store together (see
    the module docstring), and hand over to :func:`sdyn.driver.run_sweep`. Call it with SIGINT
    and SIGTERM armed (:func:`sdyn.stops.stoppable`).

    Returns :func:`sdyn.driver.run_sweep`'s exit status, or 128 + the signal's number when
    SIGINT or SIGTERM stopped the sweep before it recorded anything, or 3 when Ray's own start
    failed (:class:`sdyn.engine.startup.RayDidNotStart`; one line on stderr each).

    Raises:
        BadInput: the store, the output folder, the event log or the cluster's address cannot
            be used, the cluster refuses this driver, or ``cluster.device=cuda`` on a Ray
            cluster without a GPU; before anything is written.
    """
    cluster, track = p.objects["cluster"], p.objects["tracking"]
    address = getattr(cluster, "address", None)
    when = "before the sweep started"
    try:
        try:
            uris.check(track.uri)
            opts = p.objects["sweep"]  # a free name may replace p.name, in the same folder
            check_writable(events.log_path(None, opts.out_dir, p.name), "sweep.out_dir")
            if opts.events:
                store_file = uris.sqlite_file(track.uri)
                if store_file and Path(opts.events).resolve() == store_file.resolve():
                    raise ValueError(
                        f"sweep.events={opts.events} is the store's file: name another file"
                    )
                check_writable(Path(opts.events), "sweep.events")
            if address is not None:
                startup.dispatch_module().check_address(address)
        except ValueError as exc:
            raise BadInput(one_line(exc)) from None
        connecting: Future | None = None
        # A cluster (an address, or one whose GPU must be there) is joined before the store is
        # touched: one that refuses this driver then leaves nothing written.
        if cluster.device == "cuda" or address is not None or not uris.exists(track.uri):
            # Ray imported before the thread starts importing the driver
            dispatch = startup.dispatch_module()
            stops.STOPS.check()  # a stop before anything starts (see sdyn.stops)
            if cluster.device != "cuda" and address is None:
                pool = ThreadPoolExecutor(1, "sdyn-store")
                connecting = pool.submit(_prepare, track)
                pool.shutdown(wait=False)
            when = "while Ray started"
            try:
                startup.start_ray(cluster)
            except ValueError as exc:
                raise BadInput(one_line(exc)) from None
            except startup.RayDidNotStart as exc:
                print(f"sdyn: error: {exc}; this command recorded no run", file=sys.stderr)
                return EXIT_NOT_RECORDED
            if cluster.device == "cuda" and dispatch.gpu_count() < 1:
                raise BadInput("cluster.device=cuda and the Ray cluster has no GPU")
        from sdyn import driver

        quiet_libraries()
        return driver.run_sweep(p, connecting)  # once the sweep is opened, it ends a stop
    except stops.Stopped as stop:
        stops.ignore()
        startup.stop_ray()
        name = signal.Signals(stop.signum).name
        print(f"sdyn: stopped by {name} {when}; this command recorded no run", file=sys.stderr)
        return 128 + stop.signum


def _prepare(track) -> tuple:
    """The store's thread: import the driver, connect to the store (creating it), then import the
    report's stack (1-2 s), which a new store's sweep draws at its end. Returns
    :func:`sdyn.driver.connect`'s result."""
    from sdyn import driver

    quiet_libraries()  # again: importing MLflow set its loggers' levels
    connected = driver.connect(track)
    from sdyn.analysis import report  # noqa: F401

    return connected
