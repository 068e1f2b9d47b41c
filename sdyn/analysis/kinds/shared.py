"""What several claim kinds share: a summary quantity's points, the evidence a plan holds, and
the local exponent at the largest values of the axis."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def summary_points(rows: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Per run, ``x`` and ``y`` from its summary columns, with its ``seed`` and ``run``
    (config hash): the points of a kind fitted on summary metrics."""
    import pandas as pd

    table = pd.DataFrame({"x": rows[x], "y": rows[y], "seed": rows["seed"]}).astype(float)
    return table.assign(run=rows.get("config_hash", rows.index))


# How many of the largest values of the axis a local exponent is fitted over.
LOCAL_LEVELS = 3


def local_exponent(points: pd.DataFrame, axis: str, fit) -> str | None:
    """The note on an exponent over the largest :data:`LOCAL_LEVELS` values of ``axis`` alone,
    where a law stated for large ``axis`` is read: a local slope that differs from the whole
    range's says the range has not reached the law's regime. ``points`` has a column ``x``;
    ``fit(part)`` fits the rows of ``points`` at those values. None with too few values (or no
    finite local fit)."""
    from sdyn.analysis import verdict

    levels = sorted(points["x"].unique())
    if len(levels) <= LOCAL_LEVELS:
        return None
    local = fit(points[points["x"] >= levels[-LOCAL_LEVELS]])
    if not math.isfinite(local.value):
        return None
    return (
        f"local exponent over the largest {LOCAL_LEVELS} values of {axis} "
        f"({levels[-LOCAL_LEVELS]:g}-{levels[-1]:g}): {verdict.shown(local)}"
    )


def shortfall(have: int, need: int, what: str) -> str | None:
    """``"too little evidence: 3 distinct x values ... (need 4)"``, or None when ``have`` is
    enough."""
    return f"too little evidence: {have} {what} (need {need})" if have < need else None


def planned_levels(planned: pd.DataFrame, axis: str, by: str | None, need: int) -> str | None:
    """Why a law along ``axis`` cannot be fitted on the planned runs: fewer than ``need``
    values of ``axis`` with at least 2 seeds each (per value of ``by``, where set); None when
    the plan has them."""
    if axis not in planned:
        return None
    groups = planned.groupby(by) if by in planned else [(None, planned)]
    for value, part in groups:
        seeds = part.groupby(axis)["seed"].nunique()
        have = int((seeds >= 2).sum())
        if have < need:
            where = f" at {by.split('.')[-1]} = {value}" if value is not None else ""
            return (
                f"{axis.split('.')[-1]} takes {have} values with at least 2 seeds each{where}; "
                f"a law along it needs {need}"
            )
    return None


def synthetic_frame(rows: list[dict]) -> pd.DataFrame:
    """A synthetic run table (the referee's): ``rows`` with a ``config_hash`` per row and the
    status ``converged``."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame.insert(0, "config_hash", [f"run{k:05d}" for k in range(len(frame))])
    return frame.assign(status="converged")


def synthetic_curves(runs: pd.DataFrame, steps, values: dict) -> pd.DataFrame:
    """Synthetic curves: for each run (by ``config_hash``), ``values[config_hash]`` (an array
    over ``steps``) as the column ``values["column"]``."""
    import numpy as np
    import pandas as pd

    column = values.pop("column")
    hashes = list(values)
    return pd.DataFrame(
        {
            "config_hash": np.repeat(hashes, len(steps)),
            "step": np.tile(np.asarray(steps, dtype=float), len(hashes)),
            column: np.concatenate([values[h] for h in hashes]),
        }
    )
