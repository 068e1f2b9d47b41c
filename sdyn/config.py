"""Hydra configuration: the schemas that validate every value, and composition from overrides.

``sdyn/conf/`` (package data) holds the primary config and the groups cluster/ and tracking/;
the groups experiment/, data/ and grid/ come from the chosen experiment (:mod:`sdyn.plugins`),
as ConfigStore nodes built from its dataclasses, plus any YAML in its ``conf_dir`` (added to
Hydra's search path). The structured schemas make Hydra reject unknown keys and wrong types at
composition, and each schema's ``__post_init__`` rejects out-of-range values when the config
is resolved.
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
from dataclasses import dataclass, field
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
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from sdyn import plugins
from sdyn.api import Experiment

# Package data: a real directory, as Hydra's initialize_config_dir needs (sdyn is installed as
# files, never zipped).
CONF_DIR = Path(str(resources.files("sdyn") / "conf"))
# The groups an experiment brings (the rest are conf/'s own).
EXPERIMENT_GROUPS = ("experiment", "data", "grid")


# The longest sweep.name or tracking.experiment: each names a folder (255 bytes at most on
# Linux), which a digest may lengthen.
NAME_BYTES = 200


@dataclass
class SweepOptions:
    name: str | None = None
    out_dir: str = "outputs"
    allow_failures: bool = False
    retry_failed: bool = False
    retrain: bool = False
    bundle_size: int = 0
    progress: bool = True
    quiet: bool = False
    max_runs: int = 5000
    yes: bool = False
    events: str | None = None

    def __post_init__(self) -> None:
        if self.name and "'" in self.name:  # MLflow's search filters quote it so
            raise ValueError(f"sweep.name {self.name!r} must not hold a '")
        if self.name and ("/" in self.name or "\\" in self.name or self.name in (".", "..")):
            # The name is the report's folder under out_dir: a path would nest or escape it.
            raise ValueError(f"sweep.name {self.name!r} must not be a path (no / or \\)")
        if self.name and len(self.name.encode()) > NAME_BYTES:
            raise ValueError(
                f"sweep.name has {len(self.name.encode())} bytes, more than {NAME_BYTES}: it "
                "names the report's folder"
            )
        if not self.out_dir.strip():
            raise ValueError("sweep.out_dir is empty: name a folder (. for this one)")
        if self.bundle_size < 0:
            raise ValueError(f"sweep.bundle_size must be >= 0, got {self.bundle_size}")
        if self.max_runs < 1:
            raise ValueError(f"sweep.max_runs must be >= 1, got {self.max_runs}")


FIGURE_FORMATS = ("png", "svg", "pdf")


@dataclass
class ReportOptions:
    """``report.*``: ``formats``, the files each figure is written as. PNG (report.md) and SVG
    (index.html) always; add ``pdf`` for LaTeX: ``report.formats=[png,svg,pdf]``."""

    formats: list[str] = field(default_factory=lambda: ["png", "svg"])

    def __post_init__(self) -> None:
        unknown = [kind for kind in self.formats if kind not in FIGURE_FORMATS]
        if unknown:
            raise ValueError(f"report.formats: unknown {unknown}; choose from png, svg, pdf")
        if not {"png", "svg"} <= set(self.formats):
            raise ValueError("report.formats must hold png and svg (report.md and index.html)")


DEVICES = ("auto", "cpu", "cuda")


def _check_device(device: str) -> None:
    if device not in DEVICES:
        raise ValueError(f"cluster.device must be one of {'|'.join(DEVICES)}, got {device!r}")


@dataclass
class LocalCluster:
    """``cluster=local``: an embedded Ray instance started by ``ray.init()``.

    ``device``: where runs train (see ``sdyn.engine.bundles.choose_device``): ``auto`` sends
    the shapes an experiment marks as large to GPU workers when the cluster has GPUs, ``cpu``
    and ``cuda`` send every run there.
    """

    num_cpus: int | None = None
    num_gpus: int | None = None
    device: str = "auto"

    def __post_init__(self) -> None:
        _check_device(self.device)
        if self.device == "cuda" and self.num_gpus == 0:
            raise ValueError("cluster.device=cuda and cluster.num_gpus=0: the cluster has no GPU")
        # Every bundle takes a CPU (a GPU bundle's actor too): with none, nothing would train.
        for key, least in (("num_cpus", 1), ("num_gpus", 0)):
            value = getattr(self, key)
            if value is not None and value < least:
                raise ValueError(f"cluster.{key} must be >= {least}, got {value}")


@dataclass
class AddressCluster:
    """``cluster=address``: connect to a running Ray cluster with ``ray.init(address=...)``;
    ``device`` as for :class:`LocalCluster`."""

    address: str = MISSING
    device: str = "auto"

    def __post_init__(self) -> None:
        _check_device(self.device)
        if not self.address.strip():
            raise ValueError("cluster.address is empty")


@dataclass
class Tracking:
    """Where MLflow records the sweep: a SQLite file (``tracking=local``) or a server URI.

    ``lease_s``: seconds a driver's hold on its sweep lasts unrenewed (it renews every quarter);
    a second driver of the sweep waits that long after a driver was killed. ``outage_s``:
    seconds of an unreachable store the driver rides out, holding its results, before it stops.
    """

    uri: str = "sqlite:///mlflow.db"
    experiment: str = "sdyn"
    lease_s: float = 30.0
    outage_s: float = 900.0

    def __post_init__(self) -> None:
        if not self.uri.strip():
            raise ValueError("tracking.uri is empty")
        self.uri = sqlite_for_path(self.uri)
        if not 0 < len(self.experiment.strip()) <= NAME_BYTES:  # it names the artifacts' folder
            raise ValueError(
                f"tracking.experiment must have 1-{NAME_BYTES} characters, got "
                f"{len(self.experiment.strip())}"
            )
        # not (x >= least): NaN too, which compares false (a lease renewed without pause)
        if not 2 <= self.lease_s < math.inf:
            raise ValueError(f"tracking.lease_s must be >= 2 and finite, got {self.lease_s}")
        if not 0 <= self.outage_s < math.inf:
            raise ValueError(f"tracking.outage_s must be >= 0 and finite, got {self.outage_s}")


def sqlite_for_path(uri: str) -> str:
    """A tracking URI as sdyn uses it: a plain path (``mystore.db``, ``~/runs/m.db``; no
    ``scheme:``) names a SQLite database file, ``sqlite:///<absolute path>``, as does
    ``sqlite:///~/...`` (MLflow would read ``~`` as a folder of that name); any other URI is
    returned unchanged. (MLflow itself reads a plain path as its file store, which MLflow 3
    refuses.)"""
    if uri.startswith("sqlite:///~"):
        uri = uri.removeprefix("sqlite:///")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:", uri):
        return uri
    return f"sqlite:///{Path(uri).expanduser().resolve()}"


@dataclass
class Config:
    sweep: SweepOptions = field(default_factory=SweepOptions)
    experiment: Any = MISSING
    data: Any = MISSING
    cluster: Any = MISSING
    tracking: Tracking = field(default_factory=Tracking)
    report: ReportOptions = field(default_factory=ReportOptions)
    grid: Any = None


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
