"""What a sweep's command ends with: its exit statuses, and the error that is the user's."""

from __future__ import annotations

EXIT_RUNS_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_RECORDED = 3  # the store stayed unreachable, or another driver took the sweep over


class BadInput(Exception):
    """A user error: reported on one line, exit status 2, nothing written."""


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line, with its cause's (``raise ... from``) where that adds
    something: the text of a :class:`BadInput` made from a library's error."""
    text = " ".join(str(exc).split())
    cause = exc.__cause__
    if cause is not None and str(cause) and str(cause) not in text:
        text += ": " + " ".join(str(cause).split())
    return text
