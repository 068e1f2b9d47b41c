"""What a sweep's command ends with: its exit statuses, and the error that is the user's."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import NoReturn

EXIT_RUNS_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_RECORDED = 3  # the store stayed unreachable, another driver took the sweep, Ray failed


class BadInput(Exception):
    """A user error: reported on one line, exit status 2, nothing written."""


class CommandLine(argparse.ArgumentParser):
    """sdyn's command lines: a usage error (an unknown flag, two that exclude each other) is
    one line, ``sdyn: error: ...`` saying where the help is, and exit status 2, like any other
    bad input (argparse's own prints the usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"sdyn: error: {message} (see {self.prog} --help)\n")


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, with its cause's (``raise ... from``) where that adds
    something: the text of a :class:`BadInput` made from a library's error."""
    text = " ".join(str(exc).split())
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += ": " + " ".join(str(cause).split())
    return text


def check_writable(path: Path, setting: str) -> None:
    """Fail, writing nothing, if the file ``path`` (a sweep's log or report, a rebuilt report)
    cannot be written: the file opened to append, else a file made and removed in its nearest
    existing folder (access bits lie for root and on ``/proc``).

    Raises:
        ValueError: one line naming ``setting`` (the option that put the file there) and
            ``path``.
    """
    existing = next(p for p in (path, *path.parents) if p.exists())
    try:
        if existing == path:
            open(path, "ab").close()
        else:
            tempfile.TemporaryFile(dir=existing).close()
    except OSError:
        raise ValueError(f"{setting}: cannot write {path} (at {existing})") from None
