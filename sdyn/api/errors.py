"""A plugin's errors, one line each: :class:`PluginError`, and :func:`blamed`, which turns what a
plugin's code raises into one.

Re-exported by :mod:`sdyn.api`; import them from there.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import traceback
from collections.abc import Iterator
from typing import Any


class PluginError(ValueError):
    """A broken experiment plugin: the one-line message names the plugin and what is wrong."""


@contextlib.contextmanager
def blamed(owner: str, code: Any, passed: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Run a plugin's ``code`` (a claim kind's class, an experiment's function): an exception
    it raises becomes one line, a :class:`PluginError` that starts with ``owner`` (e.g.
    ``claim 'id' (kind)``) and names the exception and the line of ``code``'s module that
    raised it (also in another process, from the traceback's text that comes back as the
    exception's cause), not a traceback. sdyn's own code is not blamed: its exception is sdyn's bug,
    traced in full.

    Raises:
        PluginError: from any exception but a PluginError or one of ``passed`` (those the
            code raises by contract, e.g. ``validate``'s ValueError for a run that cannot
            train), when ``code`` is defined outside sdyn.
    """
    try:
        yield
    except Exception as exc:
        module = getattr(code, "__module__", None) or ""  # a partial has none
        if isinstance(exc, (PluginError, *passed)) or module.startswith("sdyn."):
            raise
        try:
            source = inspect.getsourcefile(code)
        except TypeError:  # a callable object, a builtin: no line to name
            source = None
        frames = [
            (f.filename, f.lineno, f.name)
            for f in traceback.extract_tb(exc.__traceback__)
            if f.filename == source
        ]
        if not frames and exc.__cause__ is not None:  # raised in another process (the probe's):
            # its traceback comes back as the text of the cause, as concurrent.futures sends it.
            frames = [
                frame for frame in _TRACEBACK_LINE.findall(str(exc.__cause__)) if frame[0] == source
            ]
        at = f" at {frames[-1][0]}:{frames[-1][1]}, in {frames[-1][2]}" if frames else ""
        raise PluginError(f"{owner}: {type(exc).__name__}: {exc}{at}") from exc


# A frame in a traceback's text: 'File "path", line 12, in train'.
_TRACEBACK_LINE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
