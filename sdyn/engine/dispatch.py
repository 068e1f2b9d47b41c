"""Ray dispatch: one task per bundle, results streamed back with ``ray.wait`` as they land."""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
import torch

from sdyn import experiments, grid


def check_address(address: str) -> None:
    """Fail fast if a Ray address (``host:port`` or ``ray://host:port``) does not answer.

    ``auto`` and ``local`` are left to ``ray.init``. Raises ValueError with a one-line reason.
    """
    if address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://").rsplit(":", 1)
    if len(hostport) != 2 or not hostport[1].isdigit():
        raise ValueError(f"cluster.address {address!r} is not HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((hostport[0], int(hostport[1])), timeout=5).close()
    except OSError as exc:
        raise ValueError(f"cluster.address {address!r} cannot be reached: {exc}") from None


def start(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None):
    """Connect to the Ray cluster at ``address``, or start a new embedded local instance.

    Raises:
        ValueError: the address does not answer.
    """
    if ray.is_initialized():
        return
    if address is not None:
        check_address(address)
        ray.init(address=address, log_to_driver=False)
    else:
        # "local": always a fresh embedded instance, never one found via RAY_ADDRESS or
        # /tmp/ray/ray_current_cluster (another user's `ray start` on a shared machine).
        ray.init(
            address="local",  # always a new embedded instance, even if a cluster runs here
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )


def stop() -> None:
    """Shut this driver's Ray down (an embedded instance: its processes end; a cluster: the
    driver disconnects and its tasks are cancelled)."""
    if ray.is_initialized():
        ray.shutdown()


# Reliability tests inject faults through this variable: "raise:<config hash>" makes the task
# holding that run raise, "exit:<config hash>" kills its worker process. Unset in normal use.
FAULT_ENV = "SDYN_FAULT_INJECTION"


WAIT_S = 0.5


@dataclass
class Outcome:
    """What came back for ``positions`` (indices into bundle ``bundle``)."""

    bundle: int
    positions: list[int]
    result: Any  # the experiment's BundleResult, None on error
    error: str | None  # formatted traceback when the task failed
    node: str | None  # Ray node id that ran it


def _inject_fault(runs: list) -> None:
    kind, _, target = os.environ.get(FAULT_ENV, "").partition(":")
    if target and any(grid.config_hash(r) == target for r in runs):
        if kind == "exit":
            os._exit(1)
        raise RuntimeError(f"fault injected by {FAULT_ENV} for run {target}")


@ray.remote(max_retries=2, retry_exceptions=False)
def _train_bundle(experiment: str, runs: list, device: str, threads: int):
    # One intra-op thread per CPU Ray gave this task: more would fight the other tasks for cores.
    torch.set_num_threads(threads)
    _inject_fault(runs)
    result = experiments.get(experiment).train(runs, device)
    return result, ray.get_runtime_context().get_node_id()


def gpu_count() -> float:
    """GPUs in the Ray cluster (0 without one)."""
    return ray.cluster_resources().get("GPU", 0.0)


def dispatch(
    experiment: str,
    bundles: list[list[Any]],
    on_result: Callable[[Outcome], None],
    stop: Callable[[], bool] = lambda: False,
):
    """Train every bundle as one Ray task; call ``on_result`` as each result lands. Returns
    early, leaving the tasks in flight, once ``stop()`` is true (checked every WAIT_S seconds).

    Tasks whose worker died are retried by Ray (``max_retries=2``); exceptions raised by the
    training code are deterministic and are not. A bundle that still fails is split and each
    of its runs tried alone, so one bad run fails only itself. On a GPU cluster each task takes
    one GPU and its worker is reused across tasks (``max_calls=0``) instead of Ray's fresh
    process per GPU task.
    """
    on_gpu = gpu_count() > 0
    device = "cuda" if on_gpu else "cpu"
    options = {"num_gpus": 1, "num_cpus": 1, "max_calls": 0} if on_gpu else {"num_cpus": 1}
    options["scheduling_strategy"] = "SPREAD"  # balance bundles over the nodes of a cluster
    task = _train_bundle.options(**options)

    def submit(i: int, positions: list[int]):
        runs = [bundles[i][k] for k in positions]
        pending[task.remote(experiment, runs, device, 1)] = (i, positions)

    pending: dict = {}
    for i, bundle in enumerate(bundles):
        submit(i, list(range(len(bundle))))
    while pending and not stop():
        # Back every WAIT_S to look at stop(): a signal handler runs only between bytecodes,
        # never while ray.wait blocks.
        done, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
        for ref in done:
            i, positions = pending.pop(ref)
            try:
                result, node = ray.get(ref)
            except ray.exceptions.RayError as exc:
                if len(positions) > 1:
                    for k in positions:
                        submit(i, [k])
                else:
                    on_result(Outcome(i, positions, None, _describe(exc), None))
            else:
                on_result(Outcome(i, positions, result, None, node))


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
