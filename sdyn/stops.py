"""SIGINT, SIGTERM and SIGHUP (a closed terminal, a dropped ssh session) while a sweep runs: a
stop is recorded when it comes and raised as :class:`Stopped` where the sweep can end cleanly
(:data:`STOPS`): between the steps of its start-up (planning, Ray's start, the store, taking
the sweep on), when training returns (it polls), once the report is drawn; never inside a
write.

Never where it comes: a handler that raises may raise anywhere on the main thread, also where
Python ignores the exception or leaves a lock held: in an ``os.register_at_fork`` hook
(``logging``'s, run around every ``subprocess.Popen`` with a ``preexec_fn``), in a weakref
callback (the import system's), between a lock's acquisition and the ``try`` that releases it.
Another thread then waits on that lock forever, or the stop is lost. Only a wait in which
nothing is held, the prompt before a large sweep, is cut short at once (:meth:`_Stops.at_once`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

# The signals that stop a sweep cleanly.
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A signal of :data:`SIGNALS` reached the driver (a BaseException, like KeyboardInterrupt,
    so no ``except Exception`` on the way out takes it for an error)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _Stops:
    """The signals of :data:`SIGNALS` while armed: recorded, and raised as :class:`Stopped` by
    :meth:`check`, at the ends of a :meth:`deferring` block, or at once inside :meth:`at_once`.
    Training polls :meth:`requested`."""

    def __init__(self):
        self.signum: int | None = None
        self.interrupting = False
        self.notice = ""

    def handler(self, signum, frame) -> None:
        first = self.signum is None
        self.signum = self.signum or signum
        if self.interrupting:
            raise Stopped(signum)
        if first and self.notice:  # os.write: the handler may interrupt a print to stderr
            os.write(2, f"sdyn: {signal.Signals(signum).name}: {self.notice}\n".encode())

    @contextlib.contextmanager
    def deferring(self, notice: str = ""):
        """A step of the sweep: a stop that came before it is raised as :class:`Stopped` at
        once, one that comes during it when it ends; ``notice``, for a step that may take
        seconds, is said when a stop comes."""
        self.check()
        outer, self.notice = self.notice, notice
        try:
            yield
        finally:
            self.notice = outer
        self.check()

    @contextlib.contextmanager
    def at_once(self):
        """A wait that a stop cuts short, raised inside it: only for a wait in which nothing is
        held (a prompt)."""
        self.check()
        self.interrupting = True
        try:
            yield
        finally:
            self.interrupting = False

    def check(self) -> None:
        """Raise a stop that came as :class:`Stopped`: a point where the sweep can end."""
        if self.requested():
            raise Stopped(self.signum)

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, then :meth:`check`: a wait that a stop ends."""
        time.sleep(seconds)
        self.check()

    def arm(self) -> None:
        for signum in SIGNALS:
            signal.signal(signum, self.handler)

    def requested(self) -> bool:
        return self.signum is not None


STOPS = _Stops()


def ignore() -> None:
    """A second Ctrl-C must not cut the clean-up short."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def stoppable():
    """The signals of :data:`SIGNALS` stop the block where it can end (:data:`STOPS`); the
    handlers before it after."""
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    STOPS.arm()
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
