"""Hydra configuration: the schemas that validate every value, and composition from overrides.

The config tree lives in ``conf/`` (groups experiment/, grid/, data/, cluster/, tracking/); the
structured schemas registered here make Hydra reject unknown keys and wrong types at composition,
and each schema's ``__post_init__`` rejects out-of-range values when the config is resolved.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, OverrideParseException
from omegaconf import MISSING, DictConfig, OmegaConf

from sdyn import experiments

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GRID_NAMES = tuple(sorted(p.stem for p in (CONF_DIR / "grid").glob("*.yaml")))


@dataclass
class NotApplicable:
    """Stands in for a grid the chosen experiment does not define; rejected by ``to_objects``."""

    name: str = "not_applicable"


@dataclass
class SweepOptions:
    name: str | None = None
    out_dir: str = "outputs"
    allow_failures: bool = False
    retry_failed: bool = False
    bundle_size: int = 0
    progress: bool = True
    quiet: bool = False
    max_runs: int = 5000
    yes: bool = False

    def __post_init__(self) -> None:
        if self.bundle_size < 0:
            raise ValueError(f"sweep.bundle_size must be >= 0, got {self.bundle_size}")
        if self.max_runs < 1:
            raise ValueError(f"sweep.max_runs must be >= 1, got {self.max_runs}")


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
        for key in ("num_cpus", "num_gpus"):
            value = getattr(self, key)
            if value is not None and value < 0:
                raise ValueError(f"cluster.{key} must be >= 0, got {value}")


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
        if self.lease_s < 2:
            raise ValueError(f"tracking.lease_s must be >= 2, got {self.lease_s}")
        if self.outage_s < 0:
            raise ValueError(f"tracking.outage_s must be >= 0, got {self.outage_s}")


def sqlite_for_path(uri: str) -> str:
    """A tracking URI as sdyn uses it: a plain path (``mystore.db``, ``~/runs/m.db``; no
    ``scheme:``) names a SQLite database file, ``sqlite:///<absolute path>``; any other URI is
    returned unchanged. (MLflow itself reads a plain path as its file store, which MLflow 3
    refuses.)"""
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
    grid: Any = None


def experiment_choice(overrides: list[str]) -> str:
    """The experiment an override list selects (``experiment=NAME``; default ``ntk``).

    Parsed with Hydra's own override parser, so quoting and syntax are Hydra's.

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
    choice = "ntk"
    for override in parsed:
        if override.key_or_group == "experiment" and not override.is_delete():
            choice = str(override.value())
    return choice


def register(experiment: str) -> None:
    """Register every schema in Hydra's ConfigStore, with the grids of ``experiment``.

    A grid's fields and defaults belong to its experiment (``module.GRIDS``), so ``grid/NAME``
    resolves to the chosen experiment's dataclass ``grid/NAME_schema``.

    Raises:
        ValueError: unknown experiment.
    """
    module = experiments.get(experiment)
    cs = ConfigStore.instance()
    cs.store(name="sweep_schema", node=Config)
    cs.store(group="cluster", name="local_schema", node=LocalCluster)
    cs.store(group="cluster", name="address_schema", node=AddressCluster)
    cs.store(group="tracking", name="tracking_schema", node=Tracking)
    for name in experiments.EXPERIMENTS:
        other = experiments.get(name)
        cs.store(group="experiment", name=f"{name}_schema", node=other.CONFIG)
        for data_name, schema in other.DATA.items():
            cs.store(group="data", name=f"{data_name}_schema", node=schema)
    for grid_name in GRID_NAMES:
        schema = module.GRIDS.get(grid_name, NotApplicable)
        cs.store(group="grid", name=f"{grid_name}_schema", node=schema)


def load(overrides: list[str]) -> DictConfig:
    """Compose ``conf/config.yaml`` with Hydra command-line ``overrides`` (Hydra's own syntax).

    Raises:
        ValueError: unknown experiment, a grid that does not apply to it, or an unknown key
            (with or without Hydra's ``+``), with the closest known key as a suggestion.
        hydra.errors.HydraException / omegaconf.errors.OmegaConfBaseException: malformed override,
        unknown group option, wrong type.
    """
    experiment = experiment_choice(overrides)
    register(experiment)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="sdyn"):
        try:
            cfg = compose(config_name="config", overrides=overrides)
        except ConfigCompositionException as exc:
            # Hydra's advice for an unknown key is to add it with "+": for a typo, wrong.
            found = UNKNOWN_KEY.search(f"{exc} {exc.__cause__}")
            if found is None:
                raise
            if found.group("type") == NotApplicable.__name__:
                raise ValueError(_grid_does_not_apply(experiment)) from None
            if found.group("key").startswith("grid.") and found.group("type") == "dict":
                raise ValueError(_no_grid(found.group("key"), experiment)) from None
            raise ValueError(
                _unknown_key(found.group("key"), _fields(found.group("type")))
            ) from None
    if isinstance(cfg.grid, DictConfig) and OmegaConf.get_type(cfg.grid) is dict:
        raise ValueError(_no_grid(f"grid.{next(iter(cfg.grid))}", experiment))  # +grid.KEY=...
    _reject_unknown_keys(cfg)
    return cfg


# Hydra's message when an override names a key its structured schema does not have.
UNKNOWN_KEY = re.compile(r"full_key: (?P<key>\S+).*?object_type=(?P<type>\w+)", re.DOTALL)


def _fields(type_name: str) -> list[str]:
    """The field names of sdyn's schema class called ``type_name`` ([] if none)."""
    classes = [Config, SweepOptions, LocalCluster, AddressCluster, Tracking]
    for name in experiments.EXPERIMENTS:
        module = experiments.get(name)
        classes += [module.CONFIG, *module.DATA.values(), *module.GRIDS.values()]
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
        if schema in (None, NotApplicable) or not dataclasses.is_dataclass(schema):
            continue  # NotApplicable: to_objects says the grid does not apply
        fields = [f.name for f in dataclasses.fields(schema)]
        for key in node:
            if key not in fields:
                raise ValueError(_unknown_key(f"{name}.{key}" if name else key, fields))


def to_objects(cfg: DictConfig) -> dict[str, Any]:
    """Instantiate every schema of a composed config, running its range checks.

    Returns a dict with keys ``sweep, experiment, data, cluster, tracking, grid`` holding the
    dataclass instances (``grid`` is None when no grid was chosen).

    Raises:
        ValueError: an out-of-range value (the message names the key).
    """
    objects = {key: OmegaConf.to_object(cfg[key]) if cfg[key] is not None else None for key in cfg}
    if isinstance(objects["grid"], NotApplicable):
        raise ValueError(_grid_does_not_apply(objects["experiment"].name))
    return objects


def _grids(experiment: str) -> str:
    return ", ".join(sorted(experiments.get(experiment).GRIDS))


def _no_grid(key: str, experiment: str) -> str:
    grids = _grids(experiment)
    return f"{key} sets a grid, but none is chosen: add +grid=NAME ({experiment}'s grids: {grids})"


def _grid_does_not_apply(experiment: str) -> str:
    return f"this grid does not apply to experiment {experiment!r}; its grids: {_grids(experiment)}"


def field_help(overrides: list[str]) -> str:
    """The second part of ``--help``: every field of the experiment, the data and each grid that
    ``overrides`` select, as ``key = value  # note``, with the value after the overrides (a
    grid not chosen shows its defaults) and the note its schema's source gives the field.

    Raises:
        ValueError / Hydra errors: as :func:`load`.
    """
    cfg = load(overrides)
    module = experiments.get(cfg.experiment.name)
    blocks = [
        (f"experiment={cfg.experiment.name}", "experiment", cfg.experiment),
        (f"data={cfg.data.name}", "data", cfg.data),
    ]
    parser = OverridesParser.create()
    others = [o for o in overrides if parser.parse_override(o).key_or_group.split(".")[0] != "grid"]
    for grid_name in sorted(module.GRIDS):
        chosen = cfg.grid is not None and cfg.grid.name == grid_name
        node = cfg.grid if chosen else load([*others, f"+grid={grid_name}"]).grid
        blocks.append((f"+grid={grid_name}", "grid", node))
    lines = []
    for title, key, node in blocks:
        notes = _field_notes(OmegaConf.get_type(node))
        lines.append(f"fields of {title}:")
        rows = {k: f"  {key}.{k} = {_override_value(v)}" for k, v in node.items() if k != "name"}
        width = max(len(row) for row in rows.values())
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
        source = inspect.getsource(cls)
        names = {
            row: found.group(1)
            for row, line in enumerate(source.splitlines(), start=1)
            if (found := re.match(r"\s+(\w+):", line))
        }
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and token.start[0] in names:
                notes[names[token.start[0]]] = token.string.lstrip("#").strip()
    return notes
