"""sdyn: sweeps and scaling-law fits for the training dynamics of softmax models.

Public and stable within a major version: :mod:`sdyn.api` (the experiment contract plugins are
written against), :mod:`sdyn.report` (``python -m sdyn.report``) and the command line
``python -m sdyn.sweep`` (its options, config groups and fields, named sweeps, and what a sweep
writes); :mod:`sdyn.testing` (a plugin's tests) is public too. Every other module is internal
and may change in any release (CHANGELOG.md lists the changes).
"""

import os
from pathlib import Path


def __getattr__(name: str):
    """``sdyn.__version__``, read from the installed metadata when first asked for: importing
    ``importlib.metadata`` takes tens of milliseconds, which ``python -m sdyn.sweep`` spends
    before its first line can set its signal handlers."""
    if name == "__version__":
        from importlib.metadata import version

        return version("sdyn")
    raise AttributeError(f"module 'sdyn' has no attribute {name!r}")


def cache_dir() -> Path:
    """Where sdyn keeps what it builds once per machine (native kernels, an empty tracking
    store): ``$SDYN_CACHE``, else ``~/.cache/sdyn``."""
    return Path(os.environ.get("SDYN_CACHE", Path.home() / ".cache" / "sdyn"))
