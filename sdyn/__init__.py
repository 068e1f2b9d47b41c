"""sdyn: sweeps and scaling-law fits for the training dynamics of softmax models."""

import os
from importlib.metadata import version
from pathlib import Path

__version__ = version("sdyn")


def cache_dir() -> Path:
    """Where sdyn keeps what it builds once per machine (native kernels, an empty tracking
    store): ``$SDYN_CACHE``, else ``~/.cache/sdyn``."""
    return Path(os.environ.get("SDYN_CACHE", Path.home() / ".cache" / "sdyn"))
