"""SIGINT and SIGTERM while a sweep runs: a stop is raised as :class:`Stopped` where the sweep
can end cleanly, never inside a write or while the report is drawn (:data:`STOPS`)."""

from __future__ import annotations

import contextlib
import os
import signal


class Stopped(BaseException):
    """SIGINT or SIGTERM reached the driver (a BaseException, like KeyboardInterrupt, so no
    ``except Exception`` on the way out takes it for an error)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Stops:
    """SIGINT and SIGTERM while armed: raised as :class:`Stopped` at once, or, inside
    :meth:`deferring`, when its block ends: training (dispatch polls :meth:`requested` and
    returns) and drawing the report."""

    def __init__(self):
        self.signum: int | None = None
        self.deferred = False
        self.notice = ""

    def handler(self, signum, frame) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if not self.deferred:
            raise Stopped(signum)
        if first and self.notice:  # os.write: the handler may interrupt a print to stderr
            os.write(2, f"sdyn: {signal.Signals(signum).name}: {self.notice}\n".encode())

    @contextlib.contextmanager
    def deferring(self, notice: str = ""):
        """A block no signal cuts short: a stop that comes is raised as :class:`Stopped` when
        the block ends; ``notice``, for a block that may take seconds, is said at once."""
        self.deferred, self.notice = True, notice
        try:
            yield
        finally:
            self.deferred, self.notice = False, ""
        if self.requested():
            raise Stopped(self.signum)

    def arm(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self.handler)

    def requested(self) -> bool:
        return self.signum is not None


STOPS = _Stops()


def ignore() -> None:
    """A second Ctrl-C must not cut the clean-up short."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def stoppable():
    """SIGINT and SIGTERM stop the block (:data:`STOPS`); the handlers before it after."""
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    STOPS.arm()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
