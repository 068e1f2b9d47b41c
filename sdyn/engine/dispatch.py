"""Ray dispatch: one task per bundle, results streamed back with ``ray.wait`` as they land."""

from __future__ import annotations

import socket
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import ray
import torch

from sdyn import experiments


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
    """Connect to the Ray cluster at ``address``, or start an embedded local instance.

    Raises:
        ValueError: the address does not answer.
    """
    if ray.is_initialized():
        return
    if address is not None:
        check_address(address)
        ray.init(address=address, log_to_driver=False)
    else:
        # "local": always a fresh embedded instance. With no address, ray.init() joins the
        # cluster named in /tmp/ray/ray_current_cluster, which on a shared machine can be
        # another user's, or a dead one.
        ray.init(
            address="local",
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )


@ray.remote(max_retries=2, retry_exceptions=False)
def _train_bundle(experiment: str, runs: list, device: str, threads: int):
    # One intra-op thread per CPU Ray gave this task: more would fight the other tasks for cores.
    torch.set_num_threads(threads)
    return experiments.get(experiment).train(runs, device)


def gpu_count() -> float:
    """GPUs in the Ray cluster (0 without one)."""
    return ray.cluster_resources().get("GPU", 0.0)


def dispatch(
    experiment: str, bundles: list[list[Any]], on_result: Callable[[int, Any, str | None], None]
) -> None:
    """Train every bundle as one Ray task; call ``on_result(i, result, error)`` as bundle i lands.

    ``error`` is the formatted traceback when the task raised (then ``result`` is None). Tasks
    whose worker died are retried by Ray (``max_retries=2``); exceptions raised by the training
    code are deterministic and are not. On a GPU cluster each task takes one GPU and its worker
    is reused across tasks (``max_calls=0``) instead of Ray's fresh process per GPU task.
    """
    on_gpu = gpu_count() > 0
    device = "cuda" if on_gpu else "cpu"
    options = {"num_gpus": 1, "num_cpus": 1, "max_calls": 0} if on_gpu else {"num_cpus": 1}
    task = _train_bundle.options(**options)
    pending = {task.remote(experiment, b, device, 1): i for i, b in enumerate(bundles)}
    for ref, i in _as_completed(pending):
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as exc:
            on_result(i, None, _describe(exc))
        else:
            on_result(i, result, None)


def _as_completed(pending: dict) -> Iterator[tuple[Any, Any]]:
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            yield ref, pending.pop(ref)


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))
