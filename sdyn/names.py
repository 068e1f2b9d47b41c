"""A sweep's default name, spelled from what sets it apart from its experiment's defaults.

    default_name(cfg)  # "ntk-width-sphere-relu-eps1e-2", "ntk-width-sphere-0b4102"

The name is ``<experiment>-<grid>-<data>``, then each experiment, data or grid value that differs
from the defaults of that choice of experiment, grid and data, in the config's order: a word as
itself (``relu``), a number after its key (``eps1e-2``, ``steps2000``), a flag as its key or
``no<key>``. What cannot be spelled short (lists such as ``grid.n=[8,16]``, long values) goes
into one 6-hex digest at the end. The same overrides give the same name (resume).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sdyn import compose

SECTIONS = ("experiment", "data", "grid")
WORD = re.compile(r"^[A-Za-z0-9_.+-]{1,16}$")
MAX_LENGTH = 80  # characters: past this, the rest of the settings go into the digest


def settings(cfg: DictConfig) -> dict[str, Any]:
    """``section.key -> value`` for each resolved experiment, data and grid value of ``cfg``
    that differs from the defaults of the same experiment, grid and data choice (in the config's
    order; the values as plain Python)."""
    chosen = [f"experiment={cfg.experiment.name}", f"data={cfg.data.name}"]
    defaults = compose.load([*chosen, f"+grid={cfg.grid.name}"])
    mine, base = (OmegaConf.to_container(c, resolve=True) for c in (cfg, defaults))
    return {
        f"{section}.{key}": value
        for section in SECTIONS
        for key, value in mine[section].items()
        if key != "name" and base[section].get(key) != value
    }


def _number(value: float) -> str:
    """A float as the shorter of ``%g`` and a bare exponent form (the exponent form for a tie
    below 1): ``0.01 -> 1e-2``, ``3e4 -> 3e4``, ``0.5 -> 0.5``, ``100.0 -> 100``."""
    plain = f"{value:g}"
    mantissa, _, exponent = f"{value:.6e}".partition("e")
    short = f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    tie = len(short) == len(plain) and abs(value) < 1
    return short if len(short) < len(plain) or tie else plain


def _spelled(key: str, value: Any) -> str | None:
    """One setting as a name part, or None when it cannot be spelled short."""
    name = key.rpartition(".")[2]
    if isinstance(value, bool):
        return name if value else f"no{name}"
    if isinstance(value, int):
        return f"{name}{value}"
    if isinstance(value, float):
        return f"{name}{_number(value)}"
    if isinstance(value, str) and WORD.match(value):
        return value
    return None


def default_name(cfg: DictConfig) -> str:
    """The sweep's default name (see the module docstring)."""
    parts, rest = [cfg.experiment.name, cfg.grid.name, cfg.data.name], {}
    for key, value in settings(cfg).items():
        part = _spelled(key, value)
        if part is None or len("-".join([*parts, part])) > MAX_LENGTH:
            rest[key] = value
        else:
            parts.append(part)
    if rest:
        text = json.dumps(rest, sort_keys=True, default=str)
        parts.append(hashlib.sha256(text.encode()).hexdigest()[:6])
    return "-".join(parts)


def run_name(name: str, cfg: DictConfig) -> str:
    """The parent run's name in MLflow's runs table, which shows its first ~20 characters: a
    default name with what sets it apart first, ``"relu-eps1e-2 (ntk-width-sphere)"``; any
    other name as it is. The sweep's name proper stays in its ``sdyn.sweep`` tag."""
    base = "-".join([cfg.experiment.name, cfg.grid.name, cfg.data.name])
    rest = name.removeprefix(f"{base}-")
    return name if rest == name else f"{rest} ({base})"


def describe(values: dict[str, Any]) -> str:
    """``key=value, ...`` (keys without their section) for a report or an MLflow tag."""
    return ", ".join(f"{k.rpartition('.')[2]}={v}" for k, v in values.items())
