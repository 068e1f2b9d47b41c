"""Named sweeps: ``python -m sdyn.sweep --sweep NAME`` runs a saved list of overrides.

A named sweep is a file ``NAME.yaml`` with an ``overrides`` list (Hydra overrides, as on the
command line) and a ``description``, or an entry of an experiment's ``sweeps``
(:class:`sdyn.api.Experiment`). ``--sweep NAME`` takes the first found, in this order (a
user's sweep shadows one of the same name further down, as Hydra's ``hydra.searchpath`` does):

1. ``DIR/NAME.yaml`` for each ``--sweeps-path DIR``, in the order given;
2. ``sweeps/NAME.yaml`` in the working directory;
3. sdyn's own, ``sdyn/sweeps/NAME.yaml`` (package data);
4. the ``sweeps`` of the installed experiments (entry points), by experiment name: their
   overrides start with ``experiment=<that experiment>``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from sdyn import plugins
from sdyn.api import PluginError

# Package data: a real directory (sdyn is installed as files, never zipped).
SDYN_SWEEPS = Path(str(resources.files("sdyn") / "sweeps"))


def directories(extra: Sequence[str | Path] = ()) -> list[Path]:
    """The folders of ``NAME.yaml`` files searched, in order: ``extra``, the working directory's
    ``sweeps/`` (where it exists), sdyn's own.

    Raises:
        ValueError: a folder of ``extra`` that is not a directory.
    """
    for folder in extra:
        if not Path(folder).is_dir():
            raise ValueError(f"--sweeps-path {folder}: not a directory")
    here = Path("sweeps")
    return [Path(f) for f in extra] + ([here] if here.is_dir() else []) + [SDYN_SWEEPS]


def known(extra: Sequence[str | Path] = ()) -> list[str]:
    """The names of the YAML named sweeps on the search path, sorted (experiments' not
    included: finding them imports every installed experiment).

    Raises:
        ValueError: as :func:`directories`.
    """
    return sorted({p.stem for folder in directories(extra) for p in folder.glob("*.yaml")})


def overrides(name: str, extra: Sequence[str | Path] = ()) -> list[str]:
    """The overrides of the named sweep ``name`` (the sweep is named after it as after a default
    name: :func:`sdyn.plan.plan`'s ``named``).

    Raises:
        ValueError: no named sweep ``name`` (the message lists the known ones); its file is not
            YAML or has no ``overrides`` list; a folder of ``extra`` is not a directory; two
            installed experiments ship it.
        sdyn.api.PluginError: an installed experiment is broken and no other ships ``name``
            (searched when no file has the name).
    """
    folders = directories(extra)
    for folder in folders:
        path = folder / f"{name}.yaml"
        if Path(name).name == name and path.is_file():
            try:
                spec = OmegaConf.load(path)
            except yaml.YAMLError as exc:
                raise ValueError(f"{path} is not valid YAML: {exc}") from None
            if not (OmegaConf.is_dict(spec) and OmegaConf.is_list(spec.get("overrides"))):
                raise ValueError(f"{path} needs an 'overrides' list")
            return list(map(str, spec.overrides))
    shipped: dict[str, list[list[str]]] = defaultdict(list)
    broken = None  # a broken experiment hides no other's sweep; raised if none has the name
    for experiment_name in plugins.names():
        try:
            experiment = plugins.get(experiment_name)
        except PluginError as exc:
            broken = broken or exc
            continue
        for sweep, listed in experiment.sweeps.items():
            shipped[sweep].append([f"experiment={experiment.name}", *listed])
    if len(shipped.get(name, ())) > 1:
        owners = " and ".join(found[0].removeprefix("experiment=") for found in shipped[name])
        raise ValueError(f"named sweep {name!r} is shipped by experiments {owners}: uninstall one")
    if name in shipped:
        return shipped[name][0]
    if broken is not None:
        raise broken
    names = ", ".join(sorted({*known(extra), *shipped}))
    where = ", ".join(map(str, folders))
    raise ValueError(
        f"no named sweep {name!r} in {where} or the installed experiments (named sweeps: {names})"
    )
