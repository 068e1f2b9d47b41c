"""Counts in the words sdyn's lines and reports print: ``count(1, "seed")`` is ``1 seed``."""

from __future__ import annotations


def count(number: int | str, noun: str) -> str:
    """``1 run``, ``5 runs``: ``number`` and ``noun`` (its singular, plural by an ``s``);
    ``number`` may be a config value's string."""
    return f"{number} {noun}{'s' * (str(number) != '1')}"
