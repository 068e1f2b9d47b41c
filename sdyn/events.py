"""The driver's event log: what a sweep did, one JSON object per line, for programs that follow
a sweep (a scheduler, a dashboard, the reliability tests, the chaos benchmark); people read the
lines it prints.

    log = EventLog("outputs/ntk-width-sphere/events.jsonl", "ntk-width-sphere")
    log.driver = lease.driver
    log("bundle_started", bundle=3, runs=["9f2c61d0a4b7e815", ...], device="cpu", attempt=0)

Every line holds ``time`` (Unix seconds), ``event``, ``sweep`` (its name) and ``driver`` (the id
that the run table's ``driver`` column and the cell runs' ``sdyn.driver`` tag carry), then the
event's own fields (``runs``: config hashes; ``bundle``: the bundle's index among those the
driver trains, in a threshold search among its round's):

- ``sweep_waiting``: another driver holds the sweep; this one waits for its lease to end;
- ``sweep_started``: the driver holds the sweep: ``store`` (its tracking URI: two stores'
  sweeps of one name share ``<out_dir>/<name>/``), ``parent`` (MLflow run id), ``generation``
  (its claim), ``runs`` (planned), ``to_train`` (null for a threshold search, which decides
  round by round);
- ``bundle_started``: handed to Ray: ``bundle``, ``runs``, ``device``, ``attempt`` (0, then one
  more after each ``bundle_retried``);
- ``bundle_retried``: its worker or node was lost: ``bundle``, ``runs``, ``reason`` (Ray's
  error), ``attempt``;
- ``bundle_finished``: its result reached the driver: ``bundle``, ``runs``, ``node`` (Ray node
  id), ``worker`` (process id), ``failed`` (no result: the training code raised, or the run
  was lost more often than the engine retries);
- ``recorded``: a write reached the store: ``runs`` (rows of the run table), ``cells`` (cell runs
  written);
- ``sweep_finished``: the driver is done with the sweep: ``exit`` (its exit status).

The file is appended to, one ``write`` call per line, so the drivers of one sweep (a rerun, a
second driver waiting for the first) share it without tearing a line.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

FILE = "events.jsonl"


def log_path(events: str | None, out_dir: str, sweep: str) -> Path:
    """Where sweep ``sweep``'s log goes: ``sweep.events`` (``events``), else beside the report,
    ``<out_dir>/<sweep>/``."""
    return Path(events) if events else Path(out_dir) / sweep / FILE


class EventLog:
    """Appends events to ``path``, created with its folders at the first event; ``driver`` is
    set once the driver has its id (:class:`sdyn.tracking.sweeps.Lease`).

    A sweep checks ``path`` (:func:`sdyn.errors.check_writable`) before it writes anything.
    """

    def __init__(self, path: str | Path, sweep: str):
        self.path, self.sweep = Path(path), sweep
        self.driver: str | None = None

    def __call__(self, event: str, **fields: Any) -> None:
        """Append one event with its ``fields`` (JSON values)."""
        line = {"time": round(time.time(), 3), "event": event, "sweep": self.sweep}
        line = {**line, "driver": self.driver, **fields}
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def finished(self, status: int) -> int:
        """Log ``sweep_finished`` with the exit status ``status``, and return it."""
        self("sweep_finished", exit=status)
        return status
