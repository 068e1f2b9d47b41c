"""Ray dispatch: one task per bundle, results streamed back with ``ray.wait`` as they land."""

from __future__ import annotations

import os
import socket
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from sdyn import plugins

# HTTP/2's client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, its Ray Client
# server) answers with a frame of its own, type 4 (SETTINGS) in the header's fourth byte.
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)


def check_address(address: str) -> None:
    """Fail fast if a Ray address (``host:port`` or ``ray://host:port``) does not answer, or
    answers without HTTP/2 (gRPC, which Ray's GCS and Ray Client server speak; not checked
    where ``RAY_USE_TLS`` is on): ``ray.init`` waited minutes on a port that is no Ray's.

    ``auto`` is checked as the address ``RAY_ADDRESS`` gives, where it is set (else it names
    the latest ``ray start`` on this machine, left to ``ray.init``); ``local`` is left to
    ``ray.init``. Raises ValueError with a one-line reason.
    """
    if address == "auto" and os.environ.get("RAY_ADDRESS") not in (None, "", "auto", "local"):
        try:
            return check_address(os.environ["RAY_ADDRESS"])
        except ValueError as exc:
            raise ValueError(f"cluster.address=auto, RAY_ADDRESS: {exc}") from None
    if address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://").rsplit(":", 1)
    if len(hostport) != 2 or not hostport[1].isdigit():
        raise ValueError(f"cluster.address {address!r} is not HOST:PORT or ray://HOST:PORT")
    try:
        sock = socket.create_connection((hostport[0], int(hostport[1])), timeout=5)
    except OSError as exc:
        raise ValueError(f"cluster.address {address!r} cannot be reached: {exc}") from None
    reply = b""
    with sock:
        if os.environ.get("RAY_USE_TLS", "0").lower() not in ("0", "false"):
            return
        try:
            sock.sendall(H2_PREFACE)
            while len(reply) < 4 and (chunk := sock.recv(9)):
                reply += chunk
        except OSError:  # reset or silent: no gRPC there
            pass
    if len(reply) < 4 or reply[3] != 4:
        raise ValueError(
            f"cluster.address {address!r} answers, but not as a Ray cluster (no gRPC there): "
            "give its GCS port (HOST:6379) or its Ray Client port (ray://HOST:10001)"
        )


def settings() -> dict[str, str]:
    """sdyn's settings in this process's environment (``SDYN_FUSED``, ``SDYN_COMPILE``, ...), but
    ``SDYN_CACHE`` (a folder of this machine): what a cluster's tasks must see as the driver
    does. An embedded instance's workers inherit them; a cluster's nodes were started without
    them, so :func:`start` passes them as the job's ``runtime_env``."""
    return {k: v for k, v in os.environ.items() if k.startswith("SDYN_") and k != "SDYN_CACHE"}


def start(address: str | None = None, num_cpus: int | None = None, num_gpus: int | None = None):
    """Connect to the Ray cluster at ``address``, with :func:`settings` in its tasks'
    environment, or start a new embedded local instance.

    Raises:
        ValueError: the address does not answer, or its cluster cannot be joined (a token that
            is not the cluster's, ``RAY_AUTH_TOKEN``), with a one-line reason.
    """
    if ray.is_initialized():
        return
    if address is not None:
        check_address(address)
        env = settings()
        # A submitted job's own variables are in env too, with the values Ray sets for its
        # tasks: Ray takes a key set twice only with this.
        if env:
            os.environ.setdefault("RAY_OVERRIDE_JOB_RUNTIME_ENV", "1")
        try:
            ray.init(
                address=address,
                log_to_driver=False,
                configure_logging=False,
                runtime_env={"env_vars": env} if env else None,
            )
        except (ConnectionError, ray.exceptions.AuthenticationError) as exc:
            reason = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            hint = (  # Ray says the same of a cluster gone and of a token refused
                "a cluster with token authentication refuses a driver whose RAY_AUTH_TOKEN is "
                "not its own"
                if isinstance(exc, ray.exceptions.AuthenticationError)
                else "is the cluster up, and is RAY_AUTH_TOKEN its token where it asks for one?"
            )
            raise ValueError(
                f"cannot join the Ray cluster at {address}: {reason} ({hint})"
            ) from None
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


# Seconds dispatch waits on Ray at a time before it looks at its stop() again.
WAIT_S = 0.5

# Times a bundle whose worker or node was lost is submitted again (by dispatch, not by Ray, so
# that each retry is seen and said): a worker killed (kill -9, out of memory), a node gone with
# the bundles training there, a result lost with its node. A bundle still lost after that is
# split, and each of its runs gets as many tries alone.
SYSTEM_RETRIES = 3


@dataclass
class Outcome:
    """What came back for ``positions`` (indices into bundle ``bundle``)."""

    bundle: int
    positions: list[int]
    result: Any  # the experiment's BundleResult, None on error
    error: str | None  # formatted traceback when the task failed
    node: str | None  # Ray node id that ran it
    worker: int | None = None  # process id of the Ray worker that ran it
    gpus: tuple[str, ...] = ()  # GPU ids Ray assigned to it (empty on a CPU task)
    device: str | None = None  # the torch device it trained on


def _run(experiment: str, runs: list, device: str) -> tuple:
    try:
        result = plugins.get(experiment).train(runs, device)
    except SystemExit as exc:  # Ray takes it for a worker that died: retried, its cause lost
        raise RuntimeError(f"train raised SystemExit({exc.code!r})") from exc
    context = ray.get_runtime_context()
    gpus = tuple(str(g) for g in context.get_accelerator_ids().get("GPU", []))
    return result, context.get_node_id(), os.getpid(), gpus, device


# The decorator carries no num_gpus: Ray would then force max_calls=1, a fresh worker process
# per task (ray-project/ray#29624). CPU tasks reuse their workers (max_calls 0, the default).
# No retries by Ray: dispatch submits a lost bundle again itself (SYSTEM_RETRIES).
@ray.remote(max_retries=0, retry_exceptions=False)
def _train_bundle(experiment: str, runs: list, threads: int):
    import torch  # in the worker: the driver needs no torch (1-3 s before Ray can start)

    # One intra-op thread per CPU Ray gave this task: more would fight the other tasks for cores.
    torch.set_num_threads(threads)
    return _run(experiment, runs, "cpu")


# One long-lived actor per GPU holds it for the whole dispatch: CUDA is initialised once on the
# device Ray assigned (a reused task worker could keep a CUDA context on another task's GPU),
# and torch.compile's caches stay warm across bundles. A worker that dies is restarted and its
# call retried twice by Ray, then submitted again by dispatch (SYSTEM_RETRIES), like a task;
# exceptions of the training code are not retried.
@ray.remote(max_restarts=-1, max_task_retries=2)
class _GPUWorker:
    def __init__(self) -> None:
        import torch  # in the worker, as _train_bundle's

        torch.set_num_threads(1)
        # A GPU Ray declared but torch cannot see (a CPU build of torch, or a GPU declared with
        # ray start --num-gpus on a CPU node) trains on the CPU; Outcome.device says so.
        self.device = "cuda" if torch.cuda.is_available() else "cpu"

    def train(self, experiment: str, runs: list):
        return _run(experiment, runs, self.device)


def gpu_count() -> float:
    """GPUs in the Ray cluster (0 without one)."""
    return ray.cluster_resources().get("GPU", 0.0)


def dispatch(
    experiment: str,
    bundles: list[list[Any]],
    on_result: Callable[[Outcome], None],
    devices: list[str] | None = None,
    stop: Callable[[], bool] = lambda: False,
    on_event: Callable[..., None] = lambda event, bundle, positions, **fields: None,
):
    """Train every bundle as one Ray task; call ``on_result`` as each result lands. Returns
    early, leaving the tasks in flight, once ``stop()`` is true (checked every WAIT_S seconds).
    Tells ``on_event(event, bundle, positions, **fields)`` of each ``bundle_started`` (fields
    ``device``, ``attempt``), ``bundle_retried`` (``reason``, ``attempt``) and
    ``bundle_finished`` (``node``, ``worker``, ``failed``): the events of :mod:`sdyn.events`.

    Args:
        devices: per bundle ``cpu`` or ``cuda``; None = every bundle on the CPU. CPU bundles
            are Ray tasks of one CPU each, spread over the nodes. CUDA bundles go to one
            long-lived :class:`_GPUWorker` actor per GPU of the cluster (each taking one GPU
            and one CPU), the next bundle to whichever actor is free.

    A bundle whose worker or node was lost (any Ray error but an exception of the training
    code) is submitted again, up to SYSTEM_RETRIES times, to whichever node is alive (one line
    on stderr each time); a node that left is out of Ray's scheduling once Ray marks it dead.
    Exceptions raised by the training code are deterministic and are not retried. A bundle that
    still fails is split and each of its runs tried alone (with as many retries), so one bad run
    fails only itself.

    Raises:
        ValueError: a bundle asks for ``cuda`` and the cluster has no GPU.
    """
    devices = devices or ["cpu"] * len(bundles)
    wanted = sum(d == "cuda" for d in devices)
    if wanted and gpu_count() < 1:
        raise ValueError(f"{wanted} bundles want a GPU and the Ray cluster has none")
    task = _train_bundle.options(num_cpus=1, scheduling_strategy="SPREAD")
    gpu_options = {"num_gpus": 1, "num_cpus": 1, "scheduling_strategy": "SPREAD"}
    actors = [
        _GPUWorker.options(**gpu_options).remote() for _ in range(min(wanted, int(gpu_count())))
    ]
    idle, queue = list(actors), []  # free GPU actors; GPU work waiting for one
    pending: dict = {}  # ref -> (bundle, positions, actor or None)
    lost: dict = {}  # (bundle, positions) -> times its worker or node was lost

    def submit(i: int, positions: list[int]):
        runs = [bundles[i][k] for k in positions]
        if devices[i] != "cuda":
            pending[task.remote(experiment, runs, 1)] = (i, positions, None)
        elif idle:
            actor = idle.pop()
            pending[actor.train.remote(experiment, runs)] = (i, positions, actor)
        else:
            queue.append((i, positions))
            return
        attempt = lost.get((i, tuple(positions)), 0)
        on_event("bundle_started", i, positions, device=devices[i], attempt=attempt)

    try:
        for i, bundle in enumerate(bundles):
            submit(i, list(range(len(bundle))))
        while pending and not stop():
            # Back every WAIT_S to look at stop(): a signal handler runs only between
            # bytecodes, never while ray.wait blocks.
            done, _ = ray.wait(list(pending), num_returns=1, timeout=WAIT_S)
            for ref in done:
                i, positions, actor = pending.pop(ref)
                if actor is not None:
                    idle.append(actor)
                    if queue:
                        submit(*queue.pop(0))
                try:
                    result, node, worker, gpus, device = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    key = (i, tuple(positions))
                    system = not isinstance(exc, ray.exceptions.RayTaskError)
                    if system and lost.get(key, 0) < SYSTEM_RETRIES:
                        lost[key] = lost.get(key, 0) + 1
                        reason = type(exc).__name__
                        _say_retry(i, len(positions), reason, lost[key])
                        on_event("bundle_retried", i, positions, reason=reason, attempt=lost[key])
                        submit(i, positions)
                    elif len(positions) > 1:
                        for k in positions:
                            submit(i, [k])
                    else:
                        on_event(
                            "bundle_finished", i, positions, node=None, worker=None, failed=True
                        )
                        on_result(Outcome(i, positions, None, _describe(exc), None))
                else:
                    on_event(
                        "bundle_finished", i, positions, node=node, worker=worker, failed=False
                    )
                    on_result(Outcome(i, positions, result, None, node, worker, gpus, device))
    finally:
        for actor in actors:
            ray.kill(actor)  # gives its GPU back to the cluster


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def _say_retry(bundle: int, runs: int, reason: str, attempt: int) -> None:
    print(
        f"sdyn: bundle {bundle} ({runs} run{'s' if runs != 1 else ''}) lost its worker or node "
        f"({reason}); submitted again ({attempt} of {SYSTEM_RETRIES})",
        file=sys.stderr,
        flush=True,
    )
