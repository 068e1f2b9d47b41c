"""What a sweep will cost, before it runs: a cost model measured on the spot by a tiny probe.

    model = measure("ntk", smallest_run, largest_run)    # ~seconds: three short trainings
    model.seconds(footprint, steps), model.memory(footprint_of_a_bundle)

The model: a run of ``steps`` GD steps whose largest per-run tensor takes ``footprint`` bytes
(the experiment's ``footprint``) trains in ``per_run_s + footprint (per_byte_s + per_byte_step_s
steps)`` seconds on one CPU thread, and a worker training a bundle of runs holds ``base_rss +
rss_per_byte * sum(footprint)`` bytes resident. The probe trains, in a fresh process on one
thread as a Ray task does, the plan's smallest run and its largest run for ``p`` and ``2 p``
steps (``p = min(PROBE_STEPS, steps / 2)``), and reads the process's peak resident size
(``getrusage``) before and after. Early stopping is not modelled: the time is for every run
using its full budget, an upper bound where runs stop early (NTK runs stop once they fit).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

PROBE_STEPS = 100


@dataclass(frozen=True)
class CostModel:
    """Seconds and resident bytes of training (see the module docstring); ``probe_s``: how long
    the probe took, wall seconds."""

    per_run_s: float
    per_byte_s: float
    per_byte_step_s: float
    base_rss: float
    rss_per_byte: float
    probe_s: float

    def seconds(self, footprint: int, steps: int) -> float:
        """Estimated seconds for one run on one CPU thread."""
        return self.per_run_s + footprint * (self.per_byte_s + self.per_byte_step_s * steps)

    def memory(self, footprint: int) -> float:
        """Estimated peak resident bytes of a worker training runs of ``footprint`` bytes (the
        sum over a bundle's runs)."""
        return self.base_rss + self.rss_per_byte * footprint


def _peak_rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0  # Linux: KiB


def _probe(experiment: str, small: Any, large: Any, steps: int) -> dict[str, float]:
    """In a fresh process: train ``small`` (warm-up, then timed) and ``large`` at ``steps`` and
    ``2 steps``; seconds of each and the peak resident bytes before and after ``large``."""
    import torch

    from sdyn import plugins

    torch.set_num_threads(1)  # as dispatch runs a task: one intra-op thread per CPU
    train = plugins.get(experiment).train

    def timed(run, k: int) -> float:
        run = dataclasses.replace(run, experiment=dataclasses.replace(run.experiment, steps=k))
        started = time.perf_counter()
        train([run], "cpu")
        return time.perf_counter() - started

    timed(small, steps)  # compiles and loads what the first training needs
    out = {"small": timed(small, steps), "base_rss": _peak_rss()}
    out["large_1"] = timed(large, steps)
    out["large_2"] = timed(large, 2 * steps)
    out["peak_rss"] = _peak_rss()
    return out


def measure(experiment: str, small: Any, large: Any, footprint) -> CostModel:
    """Probe ``experiment`` with its plan's smallest and largest runs (``footprint(run)``:
    bytes of the largest per-run tensor) and fit the cost model. Runs in a spawned process, so
    neither this process's state nor its peak memory enters the measurement."""
    steps = max(1, min(PROBE_STEPS, large.experiment.steps // 2))
    started = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        t = pool.submit(_probe, experiment, small, large, steps).result()
    f_small, f_large = footprint(small), footprint(large)
    per_byte_step = max(t["large_2"] - t["large_1"], 0.0) / (steps * f_large)
    if f_large > f_small:  # the fixed part splits into per run and per byte
        per_step = per_byte_step * steps
        per_byte = max((t["large_1"] - t["small"]) / (f_large - f_small) - per_step, 0.0)
    else:
        per_byte = 0.0
    per_run = max(t["small"] - f_small * (per_byte + per_byte_step * steps), 0.0)
    rss_per_byte = max(t["peak_rss"] - t["base_rss"], 0.0) / f_large
    return CostModel(
        per_run, per_byte, per_byte_step, t["base_rss"], rss_per_byte, time.perf_counter() - started
    )
