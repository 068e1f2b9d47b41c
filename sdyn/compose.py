"""Hydra composition: a config from command-line overrides, its schemas instantiated, and the
fields ``--help`` lists.

``sdyn/conf/`` (package data) holds the primary config and the groups cluster/ and tracking/
(schemas: :mod:`sdyn.config`); the groups experiment/, data/ and grid/ come from the chosen
experiment (:mod:`sdyn.plugins`), as ConfigStore nodes built from its dataclasses, plus any YAML
in its ``conf_dir`` (added to Hydra's search path). Hydra's errors for a typo, a group chosen
twice or a grid the experiment lacks become one-line ValueErrors that name the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import io
import math
import re
import tokenize
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import (
    ConfigCompositionException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from sdyn import plugins
from sdyn.api import Experiment
from sdyn.config import (
    AddressCluster,
    Config,
    LocalCluster,
    ReportOptions,
    SweepOptions,
    Tracking,
)

# Package data: a real directory, as Hydra's initialize_config_dir needs (sdyn is installed as
# files, never zipped).
CONF_DIR = Path(str(resources.files("sdyn") / "conf"))
# The groups an experiment brings (the rest are conf/'s own).
EXPERIMENT_GROUPS = ("experiment", "data", "grid")


def _parsed(overrides: list[str]) -> list:
    """Hydra's parse of ``overrides``.

    Raises:
        ValueError: a malformed override (the message quotes it).
    """
    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            parsed += parser.parse_overrides([text])
        except OverrideParseException as exc:
            message = " ".join(str(exc).split()).split(" See https")[0]
            raise ValueError(f"malformed override {text!r}: {message}") from None
    return parsed


def _choice(parsed: list, group: str) -> str | None:
    """The option ``GROUP=OPTION`` chooses in ``parsed`` (the last one wins), or None."""
    choice = None
    for override in parsed:
        if override.key_or_group == group and not override.is_delete():
            choice = str(override.value())
    return choice


def default_experiment() -> str:
    """The experiment of ``conf/config.yaml``'s defaults list."""
    for entry in OmegaConf.load(CONF_DIR / "config.yaml").defaults:
        if isinstance(entry, DictConfig) and "experiment" in entry:
            return str(entry.experiment)
    raise ValueError(f"{CONF_DIR / 'config.yaml'} names no default experiment")


def experiment_choice(overrides: list[str]) -> Experiment:
    """The experiment an override list selects (``experiment=NAME``; default: conf/config.yaml's).

    Parsed with Hydra's own override parser, so quoting and syntax are Hydra's.

    Raises:
        ValueError: a malformed override (the message quotes it).
        sdyn.api.PluginError: no such experiment, or a broken one.
    """
    return plugins.get(_choice(_parsed(overrides), "experiment") or default_experiment())


def register(experiment: Experiment) -> None:
    """Register every schema in Hydra's ConfigStore: sdyn's own, and the experiment, data sets
    and grids of ``experiment`` (each group holds the chosen experiment's options only)."""
    cs = ConfigStore.instance()
    for group in EXPERIMENT_GROUPS:  # another experiment's options, from an earlier load
        cs.repo.pop(group, None)
    cs.store(name="sweep_schema", node=Config)
    cs.store(group="cluster", name="local_schema", node=LocalCluster)
    cs.store(group="cluster", name="address_schema", node=AddressCluster)
    cs.store(group="tracking", name="tracking_schema", node=Tracking)
    node = OmegaConf.structured(experiment.config)
    node.name = experiment.name  # a module path's experiment records that path
    cs.store(group="experiment", name=experiment.name, node=node)
    for data_name, schema in experiment.data.items():
        cs.store(group="data", name=data_name, node=schema)
    for grid_name, schema in experiment.grids.items():
        cs.store(group="grid", name=grid_name, node=schema)


def load(overrides: list[str]) -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra command-line ``overrides`` (Hydra's own syntax).

    The chosen experiment's data set defaults to its first (``Experiment.default_data``).

    Raises:
        ValueError: unknown or broken experiment (:class:`sdyn.api.PluginError`), a data set
            or grid that it does not define, or an unknown key (with or without Hydra's
            ``+``), with the closest known key as a suggestion.
        hydra.errors.HydraException / omegaconf.errors.OmegaConfBaseException: malformed override,
        unknown group option, wrong type.
    """
    experiment = experiment_choice(overrides)
    register(experiment)
    parsed = _parsed(overrides)
    if _choice(parsed, "data") is None:
        overrides = [*overrides, f"data={experiment.default_data}"]
    if experiment.conf_dir is not None:
        # Quoted: a path holds what Hydra's override grammar would split (a comma, a space).
        path = str(Path(experiment.conf_dir).resolve()).replace("\\", "\\\\").replace("'", "\\'")
        overrides = [*overrides, f"hydra.searchpath=['file://{path}']"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="sdyn"):
        try:
            cfg = compose(config_name="config", overrides=overrides)
        except MissingConfigException:
            for group, options in (("grid", experiment.grids), ("data", experiment.data)):
                if _choice(parsed, group) not in (None, *options):
                    raise ValueError(
                        _not_defined(group, _choice(parsed, group), experiment)
                    ) from None
            raise
        except ConfigCompositionException as exc:
            if twice := CHOSEN_TWICE.match(str(exc)):  # Hydra's advice is for a defaults list
                raise ValueError(_chosen_twice(twice.group("group"), parsed)) from None
            # Hydra's advice for an unknown key is to add it with "+": for a typo, wrong.
            found = UNKNOWN_KEY.search(f"{exc} {exc.__cause__}")
            if found is None:
                raise
            if found.group("key").startswith("grid.") and found.group("type") == "dict":
                raise ValueError(_no_grid(found.group("key"), experiment)) from None
            fields = _fields(found.group("type"), experiment)
            wrong_item = found.group("type") == "list"  # grid.n=[1e9]: grid.n[0] not an int
            if wrong_item or found.group("key").rpartition(".")[2] in fields:  # a wrong type
                raise
            raise ValueError(_unknown_key(found.group("key"), fields)) from None
    if isinstance(cfg.grid, DictConfig) and OmegaConf.get_type(cfg.grid) is dict:
        raise ValueError(_no_grid(f"grid.{next(iter(cfg.grid))}", experiment))  # +grid.KEY=...
    _reject_unknown_keys(cfg)
    return cfg


# Hydra's message when two overrides add the same group.
CHOSEN_TWICE = re.compile(r"Multiple values for (?P<group>\S+)\.")


def _chosen_twice(group: str, parsed: list) -> str:
    """``grid is chosen twice (+grid=width +grid=threshold): ...``, the first maybe a named
    sweep's; or ``+data=diabetes`` where ``data`` has a default. ``GROUP=OPTION`` (no ``+``)
    replaces either."""
    added = [o for o in parsed if o.key_or_group == group and o.is_add()]
    replace = f"write {group}={added[-1].value()} without the +"
    if len(added) == 1:
        return f"{group} has a default, which {added[0].input_line} cannot add to: {replace}"
    said = " ".join(o.input_line for o in added)
    return f"{group} is chosen twice ({said}): choose one; to replace a named sweep's, {replace}"


# Hydra's message when an override names a key its structured schema does not have.
UNKNOWN_KEY = re.compile(r"full_key: (?P<key>\S+).*?object_type=(?P<type>\w+)", re.DOTALL)


def _fields(type_name: str, experiment: Experiment) -> list[str]:
    """The field names of the schema class called ``type_name`` ([] if none): sdyn's, or the
    experiment's config, data sets and grids."""
    classes = [Config, SweepOptions, LocalCluster, AddressCluster, Tracking, ReportOptions]
    classes += [experiment.config, *experiment.data.values(), *experiment.grids.values()]
    for schema in classes:
        if schema.__name__ == type_name:
            return [f.name for f in dataclasses.fields(schema)]
    return []


def _unknown_key(key: str, fields: list[str]) -> str:
    """``unknown key KEY; did you mean GROUP.CLOSEST?`` (or the group's keys)."""
    group, _, name = key.rpartition(".")
    prefix = f"{group}." if group else ""
    close = difflib.get_close_matches(name, fields, n=1)
    if close:
        return f"unknown key {key}; did you mean {prefix}{close[0]}?"
    return f"unknown key {key} (known: {', '.join(prefix + f for f in fields)})"


def _reject_unknown_keys(cfg: DictConfig) -> None:
    """Raise ValueError for any key no schema defines (a ``+group.typo=...`` reaches here:
    Hydra lets ``+`` add keys, and ``OmegaConf.to_object`` would drop them silently)."""
    nodes = [("", cfg)] + [(k, v) for k, v in cfg.items() if isinstance(v, DictConfig)]
    for name, node in nodes:
        schema = OmegaConf.get_type(node)
        if schema is None or not dataclasses.is_dataclass(schema):
            continue
        fields = [f.name for f in dataclasses.fields(schema)]
        for key in node:
            if key not in fields:
                raise ValueError(_unknown_key(f"{name}.{key}" if name else key, fields))


def to_objects(cfg: DictConfig) -> dict[str, Any]:
    """Instantiate every schema of a composed config, running its range checks.

    Returns a dict with keys ``sweep, experiment, data, cluster, tracking, grid`` holding the
    dataclass instances (``grid`` is None when no grid was chosen).

    Raises:
        ValueError: an out-of-range value (NaN or infinite anywhere: no setting means either),
            or a required one left unset (``cluster=address`` without ``cluster.address``);
            the message names the key.
    """
    for key, value in _leaves(OmegaConf.to_container(cfg, resolve=False, throw_on_missing=False)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key}={value}: give a finite number")
    try:
        return {key: OmegaConf.to_object(cfg[key]) if cfg[key] is not None else None for key in cfg}
    except MissingMandatoryValue as exc:
        raise ValueError(f"{exc.full_key} has no value: set {exc.full_key}=...") from None


def _leaves(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every value of a nested config, with its dotted key (``grid.widths[2]``)."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(tree, list):
        for k, value in enumerate(tree):
            yield from _leaves(value, f"{prefix}[{k}]")
    else:
        yield prefix, tree


def reject_replaced(overrides: list[str], grid: Any) -> None:
    """Refuse an override ``experiment.KEY=...`` of a key that the points of ``grid`` (a grid
    object of :func:`to_objects`) set: the grid's values would replace it unseen.

    Raises:
        ValueError: naming the grid's field to set instead, the one called KEY or KEYs
            (``experiment.steps=30 is replaced by grid iters's steps; set grid.steps=[30]``),
            else the grid's fields.
    """
    axes = {key for point in grid.points() for key in point}
    fields = [f for f in dataclasses.fields(grid) if f.name not in ("name", "seeds")]
    for override in _parsed(overrides):
        section, _, key = override.key_or_group.partition(".")
        if section != "experiment" or key not in axes or override.is_delete():
            continue
        text = f"{override.key_or_group}={_override_value(override.value())}"
        same = [f for f in fields if f.name in (key, f"{key}s")]
        if not same:
            names = ", ".join(f"grid.{f.name}" for f in fields)
            raise ValueError(
                f"{text} is replaced by grid {grid.name}'s points, which set {key}; set it "
                f"through the grid's fields ({names})"
            )
        value = override.value()
        listed = "list[" in str(same[0].type) or isinstance(getattr(grid, same[0].name), list)
        if listed and not isinstance(value, list):
            value = [value]
        raise ValueError(
            f"{text} is replaced by grid {grid.name}'s {same[0].name}; set "
            f"grid.{same[0].name}={_override_value(value)}"
        )


def _no_grid(key: str, experiment: Experiment) -> str:
    grids = ", ".join(sorted(experiment.grids))
    return (
        f"{key} sets a grid, but none is chosen: add +grid=NAME "
        f"({experiment.name}'s grids: {grids})"
    )


def _not_defined(group: str, chosen: str, experiment: Experiment) -> str:
    """The error for a grid or data set ``chosen`` that the experiment does not define."""
    options = experiment.grids if group == "grid" else experiment.data
    noun = {"grid": "grids", "data": "data sets"}[group]
    return (
        f"{group} {chosen!r} does not apply to experiment {experiment.name!r}; its {noun}: "
        f"{', '.join(sorted(options))}"
    )


def field_help(overrides: list[str]) -> str:
    """The second part of ``--help``: every field of the experiment, the data and each grid that
    ``overrides`` select, as ``key = value  # note``, with the value after the overrides (a
    grid not chosen shows its defaults) and the note its schema's source gives the field.

    Raises:
        ValueError / Hydra errors: as :func:`load`.
    """
    cfg = load(overrides)
    experiment = plugins.get(cfg.experiment.name)
    blocks = [
        (f"experiment={cfg.experiment.name}", "experiment", cfg.experiment),
        (f"data={cfg.data.name}", "data", cfg.data),
    ]
    parser = OverridesParser.create()
    others = [o for o in overrides if parser.parse_override(o).key_or_group.split(".")[0] != "grid"]
    for grid_name in sorted(experiment.grids):
        chosen = cfg.grid is not None and cfg.grid.name == grid_name
        node = cfg.grid if chosen else load([*others, f"+grid={grid_name}"]).grid
        blocks.append((f"+grid={grid_name}", "grid", node))
    lines = []
    for title, key, node in blocks:
        notes = _field_notes(OmegaConf.get_type(node))
        lines.append(f"fields of {title}:")
        rows = {k: f"  {key}.{k} = {_override_value(v)}" for k, v in node.items() if k != "name"}
        width = max((len(row) for row in rows.values()), default=0)
        for name, row in rows.items():
            lines.append(f"{row.ljust(width + 2)}  # {notes[name]}" if name in notes else row)
    lines.append("sweep, cluster and tracking fields: the same overrides with --cfg")
    return "\n".join(lines)


def _override_value(value) -> str:
    """``value`` as an override writes it (``null``, ``true``, ``[8,16]``)."""
    if isinstance(value, list) or OmegaConf.is_list(value):
        return "[" + ",".join(_override_value(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _field_notes(schema: type) -> dict[str, str]:
    """Field name -> the comment on its line in the source of ``schema`` and its bases."""
    notes: dict[str, str] = {}
    for cls in reversed([c for c in schema.__mro__ if dataclasses.is_dataclass(c)]):
        try:
            source = inspect.getsource(cls)
        except (OSError, TypeError):  # a class defined where no source file is kept
            continue
        names = {
            row: found.group(1)
            for row, line in enumerate(source.splitlines(), start=1)
            if (found := re.match(r"\s+(\w+):", line))
        }
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and token.start[0] in names:
                notes[names[token.start[0]]] = token.string.lstrip("#").strip()
    return notes
