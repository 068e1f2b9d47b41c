"""The tree is as ``ruff`` leaves it: ``ruff check`` finds nothing and ``ruff format`` would
change nothing (pyproject.toml's ``[tool.ruff]`` settings). A line over the length limit once
landed because nothing ran ruff before a commit."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "."], cwd=ROOT, capture_output=True, text=True
    )


def test_ruff_check_finds_nothing():
    result = _ruff("check")
    assert result.returncode == 0, result.stdout[-3000:]


def test_ruff_format_would_change_nothing():
    result = _ruff("format", "--check")
    assert result.returncode == 0, result.stdout[-3000:]
