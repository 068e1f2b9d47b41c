"""An experiment that fails on cue, for the reliability tests: ``experiment=faults`` is the
``ntk`` experiment (its config, grids, data sets and claims: the same runs and report, under
other config hashes, since the config's name is in them) whose ``train`` first looks at
``$SDYN_FAULTS``, a JSON object, in the Ray worker that trains the bundle:

- ``"raise": [hash, ...]``: a bundle holding one of these runs raises (its training failed);
- ``"exit": [hash, ...]``: the worker training one of these runs dies (``os._exit``), every time;
- ``"kill": {hash: n}``: the worker training this run is killed -9 (by itself) the first ``n``
  times, counted in the folder ``"dir"`` (which every worker can reach);
- ``"hold": {"except": [hash, ...], "until": path}``: a bundle holding a run not listed waits
  until the file ``path`` exists. A test holds a sweep back this way until its fault landed.

The faults come from outside the engine: sdyn finds this module as it finds any plugin (by name,
on the ``PYTHONPATH`` the driver and its embedded Ray's workers share; :func:`harness.faulty`
sets both variables).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

from sdyn import grid
from sdyn.experiments import ntk

ENV = "SDYN_FAULTS"


def train(runs: list, device: str | None):
    """``ntk``'s train, after the faults ``$SDYN_FAULTS`` asks for on these runs."""
    spec = json.loads(os.environ.get(ENV, "{}"))
    hashes = {grid.config_hash(run) for run in runs}
    for target, times in spec.get("kill", {}).items():
        if target in hashes:
            for k in range(times):
                mark = Path(spec["dir"], f"kill-{target}-{k}")
                try:  # the k-th try of this run: the first to create its mark dies
                    os.close(os.open(mark, os.O_CREAT | os.O_EXCL))
                except FileExistsError:
                    continue
                os.kill(os.getpid(), signal.SIGKILL)
    if hashes & set(spec.get("exit", [])):
        os._exit(1)
    if hashes & set(spec.get("raise", [])):
        raise RuntimeError(f"fault injected by {ENV} for run {sorted(hashes & set(spec['raise']))}")
    hold = spec.get("hold")
    if hold and not hashes <= set(hold["except"]):
        while not Path(hold["until"]).exists():
            time.sleep(0.05)
    return ntk.EXPERIMENT.train(runs, device)


EXPERIMENT = dataclasses.replace(ntk.EXPERIMENT, name="faults", train=train)
