"""Rows of a run table by condition: the ``where`` of claims, figures and assumptions.

A condition is ``(column, value)`` (equal, or a member when ``value`` is a tuple) or ``(column,
op, value)`` with ``op`` in :data:`sdyn.api.OPS`. Nothing here imports the contract, so the
contract's own methods can use it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def matches(frame: pd.DataFrame, column: str, op: str, value) -> pd.Series:
    """Rows of ``frame`` where ``column op value`` holds; all False when the column is
    missing. ``"null"`` accepts NaN, None and the strings "None"/"null"."""
    if column not in frame:
        return pd.Series(False, index=frame.index)
    series = frame[column]
    if op == "null":
        return series.isna() | series.astype(str).isin(("None", "null", "nan", ""))
    if op == "in":
        return series.isin(value)
    compare = {
        "==": series.__eq__,
        "!=": series.__ne__,
        "<": series.__lt__,
        "<=": series.__le__,
        ">": series.__gt__,
        ">=": series.__ge__,
    }[op]
    return compare(value).fillna(False).astype(bool)


def conditions(where: tuple[tuple, ...]) -> list[tuple[str, str, object]]:
    """A ``where`` as ``(column, op, value)`` triples."""
    out = []
    for condition in where:
        if len(condition) == 3:
            out.append(condition)
        else:
            column, value = condition
            out.append((column, "in" if isinstance(value, tuple) else "==", value))
    return out


def conditions_text(where: tuple[tuple, ...]) -> str:
    """A ``where`` in words: ``optimizer in ('gd', 'ngd'), svm_feasible == 1``."""
    return ", ".join(f"{c} {op} {short(v)}" for c, op, v in conditions(where))


def where(rows: pd.DataFrame, conditions_: tuple[tuple, ...]) -> pd.DataFrame:
    """The rows that meet every condition."""
    keep = pd.Series(True, index=rows.index)
    for column, op, value in conditions(conditions_):
        keep &= matches(rows, column, op, value)
    return rows[keep]


def at_middle(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows at the middle of ``column``'s sorted distinct values (the upper middle of an
    even count)."""
    values = sorted(rows[column].unique())
    return rows[rows[column] == values[len(values) // 2]]


def select(runs: pd.DataFrame, conditions_: tuple[tuple, ...], middle: str | None) -> pd.DataFrame:
    """The runs meeting every condition, at the middle value of ``middle`` if given."""
    rows = where(runs, conditions_)
    if middle and not rows.empty:
        rows = at_middle(rows, middle)
    return rows


def reference_values(references: tuple[tuple, ...], rows: pd.DataFrame) -> list[tuple[str, float]]:
    """``(label, value)`` of each ``(column or constant, label)`` reference: a column's median
    over ``rows``, or the constant; columns ``rows`` lacks are left out."""
    return [
        (label, float(ref) if isinstance(ref, int | float) else float(rows[ref].median()))
        for ref, label in references
        if isinstance(ref, int | float) or ref in rows
    ]


def short(value) -> str:
    """A value in a message: floats to 3 significant digits, anything else as is."""
    return f"{value:.3g}" if isinstance(value, float | np.floating) else str(value)
