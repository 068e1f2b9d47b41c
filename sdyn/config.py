"""The config's schemas: every field of ``sweep.*``, ``report.*``, ``cluster.*`` and
``tracking.*``, with the range checks each schema's ``__post_init__`` runs when a composed
config is resolved (:func:`sdyn.compose.to_objects`). Hydra composes them with the experiment's
own (:mod:`sdyn.compose`); the structured schemas make it reject unknown keys and wrong types.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

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
