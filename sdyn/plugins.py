"""Find experiments: the ``sdyn.experiments`` entry-point group, or a module named directly.

``experiment=NAME`` names an entry point of :data:`sdyn.api.ENTRY_POINT_GROUP` (sdyn's own
four experiments are entry points of the sdyn package, like any plugin's), or, when no entry
point has it, an importable module (``my_pkg.my_theorem``, or a ``my_theorem.py`` in the
working directory) with a module-level ``EXPERIMENT``. Either way the result is an
:class:`sdyn.api.Experiment` with its ``version`` (what keys its runs) filled in; every way a
plugin can be broken is a :class:`sdyn.api.PluginError` with a one-line message.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from sdyn.api import ENTRY_POINT_GROUP, Experiment, PluginError


@functools.cache
def _entry_points() -> dict[str, list]:
    """The group's entry points by name (a name two distributions register has two)."""
    found: dict[str, list] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if all(point.value != other.value for other in found.get(point.name, [])):
            found.setdefault(point.name, []).append(point)
    return found


def names() -> list[str]:
    """The names of the installed experiments (entry points), sorted."""
    return sorted(_entry_points())


@functools.cache
def get(name: str) -> Experiment:
    """The experiment called ``name``: an entry point, else a module of that (dotted) path,
    with its ``version`` filled in (:func:`_version`).

    Raises:
        PluginError: no such experiment; two distributions register ``name``; its module
            fails to import (the module and the
            exception's last line); it has no ``EXPERIMENT``, or one that is not an
            :class:`~sdyn.api.Experiment`, or whose name is not ``name`` (for a module path:
            the module path); or it is broken (see :class:`~sdyn.api.Experiment`).
    """
    if name.endswith(".py") or "/" in name or "\\" in name:
        module = Path(name).stem
        raise PluginError(
            f"experiment={name} names a file: name its module (experiment={module} for "
            f"{module}.py in the working directory, or a dotted path on the Python path)"
        )
    points = _entry_points()
    if len(points.get(name, ())) > 1:
        values = " and ".join(sorted(point.value for point in points[name]))
        raise PluginError(f"two experiments register the name {name!r}: {values}; uninstall one")
    if name in points:
        target, loaded = points[name][0].value, points[name][0].load
    else:
        target, loaded = f"{name}:EXPERIMENT", lambda: _from_module(name)
    try:
        experiment = loaded()
    except PluginError:
        raise
    except ModuleNotFoundError as exc:
        if name in points or exc.name != name.split(".")[0]:
            raise _import_error(name, target, exc) from None
        known = ", ".join(names())
        raise PluginError(
            f"unknown experiment {name!r}; installed: {known} (or a module with an EXPERIMENT: "
            "my_pkg.my_theorem on the path, or my_theorem.py in the working directory)"
        ) from None
    except Exception as exc:
        raise _import_error(name, target, exc) from None
    if not isinstance(experiment, Experiment):
        raise PluginError(
            f"experiment {name!r}: {target} is a {type(experiment).__name__}, not an "
            "sdyn.api.Experiment"
        )
    if name not in points:
        # Runs record the experiment's name: the module path finds the module again.
        return dataclasses.replace(experiment, name=name, version=_version(experiment, name))
    if experiment.name != name:
        raise PluginError(
            f"experiment {name!r}: {target} is named {experiment.name!r}; the entry point's "
            "name and the Experiment's must agree"
        )
    if experiment.version is None:
        return dataclasses.replace(experiment, version=_version(experiment, name, points[name][0]))
    return experiment


def _version(experiment: Experiment, module: str, point: EntryPoint | None = None) -> str | int:
    """What keys the runs of ``experiment`` (:attr:`~sdyn.api.Experiment.version`): its own
    version, else the version of the distribution that registers its entry point ``point``,
    else a hash of the source file of its ``module``."""
    if experiment.version is not None:
        return experiment.version
    if point is not None and point.dist is not None:
        return point.dist.version
    source = Path(sys.modules[point.module if point else module].__file__).read_bytes()
    return f"source {hashlib.sha256(source).hexdigest()[:12]}"


def _import_error(name: str, target: str, exc: Exception) -> PluginError:
    """The one-line error for a plugin whose module fails to import or load."""
    lines = str(exc).strip().splitlines()
    return PluginError(
        f"experiment {name!r}: importing {target.split(':')[0]} failed: "
        f"{type(exc).__name__}: {lines[-1] if lines else ''}"
    )


def _from_module(path: str) -> object:
    """``path``'s ``EXPERIMENT``, importing the module from the working directory too."""
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    module = importlib.import_module(path)
    if not hasattr(module, "EXPERIMENT"):
        raise PluginError(
            f"experiment {path!r}: module {path} has no EXPERIMENT (an sdyn.api.Experiment)"
        )
    return module.EXPERIMENT
