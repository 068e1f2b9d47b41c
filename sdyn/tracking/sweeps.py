"""A sweep's parent run, found by its name and plan or created; and the lease a driver holds on it.

    parent = open_sweep(client, uri, experiment_id, "ntk_width", hashes)  # ValueError: other plan
    lease = Lease(client, parent, lease_s=30)
    lease.acquire(say=print)   # waits while another live driver holds the sweep
    complete_parent(client, parent, config, hashes)
    ...                        # every write first calls lease.fence()
    close_sweep(client, lease, failed=0)

A sweep is identified by what it computes: its name and its plan (the digest of its run hashes,
tag ``sdyn.plan``, written with the parent in one call, so a parent is recognisable from its first
write). The plan's details (``plan.json``, the config) follow and are written again by the next
driver if a kill came between.

**Ownership.** Drivers take a sweep on in generations: driver k writes the parameter
``sdyn.driver.<k>`` (MLflow parameters are write-once: of two drivers claiming one generation,
exactly one succeeds) and then renews its lease (tag ``sdyn.lease``, an expiry time) every
quarter lease. Another driver waits while that lease is live and takes generation k+1 once it
lapsed (a killed driver) or was released (a finished one). A driver checks that it still holds
the sweep before each write when its last renewal is older than half a lease, so one that was
stalled or cut off from the store past its lease starts no write again (one it was in the middle
of completes). Hosts' clocks must agree to well within a lease.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

import sdyn
from sdyn.tracking import store

# MLflow's log_batch limits: 1000 metrics, 100 params, 100 tags per call.
BATCH_METRICS, BATCH_PARAMS = 1000, 100
DRIVER_PARAM = "sdyn.driver."
LEASE_TAG = "sdyn.lease"
RELEASED = "released"
ELECTED = "sdyn.elected"
# How often a waiting driver looks at the lease (seconds).
POLL_S = 1.0


def plan_digest(hashes: list[str], probes: str = "") -> str:
    """16 hex digits identifying a plan: the set of its runs' config hashes and, for a
    threshold search, ``probes``: what decides which of them it trains (its criteria, coarse
    ratio and anchor; :meth:`sdyn.plan.Searched.probes`)."""
    lines = sorted(set(hashes)) + ([f"probes {probes}"] if probes else [])
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def parents(client: MlflowClient, experiment_ids: list[str], name: str) -> list:
    """The parent runs of sweeps named ``name``, oldest first (superseded ones left out)."""
    return _live(
        client.search_runs(
            experiment_ids,
            filter_string=f"tags.`sdyn.kind` = 'sweep' and tags.`sdyn.sweep` = '{name}' "
            "and tags.`sdyn.superseded_by` IS NULL",
            order_by=["attributes.start_time ASC", "attributes.run_id ASC"],
        )
    )


def _live(runs: list) -> list:
    """``runs`` less the parents that lost an election (:func:`_elect`) but whose driver was
    stopped before it tagged them."""
    return [r for r in runs if r.data.params.get(ELECTED, r.info.run_id) == r.info.run_id]


def free_name(client: MlflowClient, experiment_id: str, name: str, digest: str) -> str:
    """``name``, or ``name-<6 hex of the plan>`` when a sweep called ``name`` exists with
    another plan than ``digest`` (:func:`plan_digest`; a default name whose experiment's
    defaults have changed since): the same command finds the same sweep again either way."""
    found = parents(client, [experiment_id], name)
    if not found or any(r.data.tags.get("sdyn.plan") == digest for r in found):
        return name
    return f"{name}-{digest[:6]}"


def check_name(found: list[Run], name: str, uri: str, digest: str, planned: int) -> None:
    """Refuse the name of a sweep whose parents ``found`` (:func:`parents` of ``name`` in the
    store ``uri``) hold another plan than ``digest`` (:func:`plan_digest`, of ``planned``
    runs).

    Raises:
        ValueError: one line giving both plans.
    """
    if found and not any(r.data.tags.get("sdyn.plan") == digest for r in found):
        other = found[-1].data.tags
        raise ValueError(
            f"sweep {name!r} exists in {uri} with another plan ({other.get('sdyn.planned')} "
            f"runs, plan {other.get('sdyn.plan')}; this one: {planned} runs, plan "
            f"{digest}): give this sweep another sweep.name"
        )


def open_sweep(
    client: MlflowClient,
    uri: str,
    experiment_id: str,
    name: str,
    digest: str,
    planned: int,
    tags: dict[str, str] | None = None,
    run_name: str | None = None,
) -> str:
    """The parent run id of sweep ``name`` with the plan ``digest`` (:func:`plan_digest`) of
    ``planned`` runs: found, or created.

    A new parent carries its identity (tags ``sdyn.kind``, ``sdyn.sweep``, ``sdyn.plan``,
    ``sdyn.planned``) and ``tags`` from the call that creates it, and is named ``run_name``
    (default ``name``) in MLflow. Drivers creating the same sweep at once settle on one parent
    (:func:`_elect`); on a SQLite store a file lock keeps them from both creating one.

    Raises:
        ValueError: a sweep named ``name`` exists with another plan (nothing is written).
    """
    with store.store_lock(uri):
        found = parents(client, [experiment_id], name)
        check_name(found, name, uri, digest, planned)
        if not found:
            tags = {
                "sdyn.kind": "sweep",
                "sdyn.sweep": name,
                "sdyn.plan": digest,
                "sdyn.planned": str(planned),
                "sdyn.version": sdyn.__version__,
                "mlflow.source.git.commit": _git_commit(),
                **(tags or {}),
            }
            client.create_run(experiment_id, run_name=run_name or name, tags=tags)
        return _elect(client, experiment_id, name, digest)


def _elect(client: MlflowClient, experiment_id: str, name: str, digest: str) -> str:
    """Settle which of the parents created for one sweep is the sweep, and return its run id.

    Each candidate's fate is the write-once parameter ``sdyn.elected``: its own id (it is the
    sweep) or the winner's (it lost; it is also tagged ``sdyn.superseded_by`` and KILLED). A
    driver reads the candidates, keeps the elected one if there is one, else the oldest, then
    marks every other candidate lost *before* marking its choice elected. Two drivers can then
    never elect two parents: each would have had to read before the other's parent existed,
    and each reads after creating its own. Start times and clocks play no part.
    """
    while True:
        found = [
            r
            for r in parents(client, [experiment_id], name)
            if r.data.tags.get("sdyn.plan") == digest
        ]
        ids = [r.info.run_id for r in found]
        elected = [r.info.run_id for r in found if ELECTED in r.data.params]
        winner = (elected or ids)[0]
        if all(_decide(client, run, winner) for run in ids if run != winner) and _decide(
            client, winner, winner
        ):
            return winner


def _decide(client: MlflowClient, run_id: str, winner: str) -> bool:
    """Write ``sdyn.elected = winner`` on candidate ``run_id``; False when it already holds
    another fate that contradicts this one (another driver decided first: read again)."""
    try:
        client.log_param(run_id, ELECTED, winner)
    except MlflowException as exc:
        if exc.error_code != "INVALID_PARAMETER_VALUE":
            raise
        fate = client.get_run(run_id).data.params[ELECTED]
        # A loser marked lost for another winner is still lost; anything else means read again.
        return run_id != winner and fate != run_id
    if run_id != winner:
        try:
            client.set_tag(run_id, "sdyn.superseded_by", winner)
        except MlflowException:  # MLflow's tag upsert races with another driver's same write
            if client.get_run(run_id).data.tags.get("sdyn.superseded_by") != winner:
                raise
        client.set_terminated(run_id, "KILLED")
    return True


def complete_parent(
    client: MlflowClient, parent_id: str, config: dict, hashes: list[str], unused=frozenset()
):
    """Write what a parent lacks of its plan: params (the flat config but the keys in
    ``unused``, e.g. the experiment's defaults for what the grid sets), ``config.yaml`` (all of
    it), ``plan.json`` (every planned config hash), then the tag ``sdyn.ready``.

    A no-op on a ready parent that still holds ``plan.json``; on one whose driver was killed
    before it was ready, or whose artifacts were deleted (the database kept), writes the rest
    (params already there are kept): without its plan a sweep's report would count no run.
    Call while holding the sweep's lease.
    """
    run = client.get_run(parent_id)
    if run.data.tags.get("sdyn.ready") and any(
        f.path == "plan.json" for f in client.list_artifacts(parent_id)
    ):
        return
    params = [
        Param(key, str(value)[:6000])
        for key, value in pd.json_normalize(config, sep=".").to_dict("records")[0].items()
        if key not in run.data.params and key not in unused
    ]
    for i in range(0, len(params), BATCH_PARAMS):
        client.log_batch(parent_id, params=params[i : i + BATCH_PARAMS])
    client.log_dict(parent_id, config, "config.yaml")
    client.log_dict(parent_id, {"hashes": hashes}, "plan.json")
    client.set_tag(parent_id, "sdyn.ready", "1")


def resume(client: MlflowClient, parent_id: str) -> None:
    """A sweep taken on again: the tag of an earlier stop (``sdyn.stopped``) goes, so that a
    sweep resumed to its end does not read as stopped."""
    if "sdyn.stopped" in client.get_run(parent_id).data.tags:
        client.delete_tag(parent_id, "sdyn.stopped")


class LostSweep(Exception):
    """Another driver took the sweep over after this one's lease lapsed."""


class Lease:
    """This driver's hold on a sweep's parent run (see the module docstring).

    ``driver`` is ``host:pid:random`` and marks what this driver writes; ``generation`` is the
    number of its claim, set by :meth:`acquire`.
    """

    def __init__(self, client: MlflowClient, parent_id: str, lease_s: float):
        self.client, self.parent_id, self.lease_s = client, parent_id, lease_s
        self.driver = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.generation: int | None = None
        self.lost = False
        self._renewed = -math.inf  # time.monotonic() of the last confirmed hold
        self._stop = threading.Event()
        self._heart: threading.Thread | None = None
        self._released = False

    def holder(self) -> tuple[int, str | None, float]:
        """The sweep's latest claim: (generation, driver, lease expiry as a Unix time); the
        expiry is 0 once that driver released the sweep, and (-1, None, 0) before any claim."""
        run = self.client.get_run(self.parent_id)
        claims = [k for k in run.data.params if k.startswith(DRIVER_PARAM)]
        generations = [int(k.removeprefix(DRIVER_PARAM)) for k in claims]
        if not generations:
            return -1, None, 0.0
        generation = max(generations)
        driver, claimed = run.data.params[f"{DRIVER_PARAM}{generation}"].split()
        expiry = float(claimed)
        renewer, _, renewed = run.data.tags.get(LEASE_TAG, "").partition(" ")
        if renewer == driver:
            expiry = 0.0 if renewed == RELEASED else max(expiry, float(renewed))
        return generation, driver, expiry

    def acquire(
        self, say: Callable[[str], None], wait: Callable[[float], None] = time.sleep
    ) -> None:
        """Take the sweep on: wait while another driver's lease is live (saying so once; ``wait``
        waits between looks, and what it raises ends the wait), then claim the next generation
        and start renewing the lease in a background thread."""
        waiting = False
        while True:
            generation, driver, expiry = self.holder()
            if driver is not None and time.time() < expiry:
                if not waiting:
                    say(
                        f"the sweep is being run by driver {driver}: waiting until it finishes "
                        f"or its lease lapses (tracking.lease_s)"
                    )
                    waiting = True
                wait(POLL_S)
                continue
            started = time.monotonic()
            claim = f"{self.driver} {time.time() + self.lease_s:.3f}"
            try:
                self.client.log_param(self.parent_id, f"{DRIVER_PARAM}{generation + 1}", claim)
            except MlflowException as exc:
                if exc.error_code != "INVALID_PARAMETER_VALUE":
                    raise
                continue  # another driver claimed this generation first
            self.generation, self._renewed = generation + 1, started
            self.client.update_run(self.parent_id, status="RUNNING")
            self.client.set_tag(self.parent_id, LEASE_TAG, claim)  # who holds it, until when
            self._heart = threading.Thread(target=self._beat, name="sdyn-lease", daemon=True)
            self._heart.start()
            return

    def renew(self) -> None:
        """Confirm this driver still holds the sweep and extend its lease.

        Raises:
            LostSweep: another driver claimed a later generation.
        """
        started = time.monotonic()
        generation, driver, _ = self.holder()
        if generation != self.generation:
            self.lost = True
            raise LostSweep(
                f"driver {driver} took the sweep over while this driver could not renew its lease"
            )
        expiry = time.time() + self.lease_s
        self.client.set_tag(self.parent_id, LEASE_TAG, f"{self.driver} {expiry:.3f}")
        self._renewed = started

    def fence(self) -> None:
        """Call before each write: renews first when the last renewal is older than half a
        lease (a stalled or cut-off driver), so a driver that lost the sweep writes nothing.

        Raises:
            LostSweep: as :meth:`renew`.
        """
        if self.lost:
            raise LostSweep("another driver took the sweep over")
        if time.monotonic() - self._renewed > self.lease_s / 2:
            self.renew()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease_s / 4):
            try:
                self.renew()
            except LostSweep:
                return
            except Exception:  # the store is unreachable: the driver's writes wait and say so
                continue

    def release(self) -> None:
        """Stop renewing and mark the sweep free for the next driver (unless it was lost or
        already released)."""
        self._stop.set()
        if self._heart is not None:
            self._heart.join()
        if not self.lost and self.generation is not None and not self._released:
            self.client.set_tag(self.parent_id, LEASE_TAG, f"{self.driver} {RELEASED}")
            self._released = True


def all_sweeps(client: MlflowClient, experiment_ids: list[str]) -> list:
    """Every sweep's parent run in the experiments (superseded ones left out), oldest first."""
    return _live(
        client.search_runs(
            experiment_ids,
            filter_string="tags.`sdyn.kind` = 'sweep' and tags.`sdyn.superseded_by` IS NULL",
            order_by=["attributes.start_time ASC", "attributes.run_id ASC"],
            max_results=50000,
        )
    )


VERDICT_TAG = "sdyn.verdict."


def log_report(
    client: MlflowClient,
    parent_id: str,
    directory: Path,
    files: list[str],
    metrics: dict[str, float],
    verdicts: dict[str, str],
):
    """Attach a report to the sweep's parent run: its ``files`` in ``directory`` (under
    ``report/``; nothing else the folder holds), the fitted values as metrics (each logged
    when it differs from the parent's latest value) and one tag ``sdyn.verdict.<claim>`` per
    claim's verdict (an earlier report's tag of a claim this one lacks is deleted)."""
    with tempfile.TemporaryDirectory() as tmp:
        for name in files:
            shutil.copy(directory / name, tmp)
        client.log_artifacts(parent_id, tmp, artifact_path="report")
    logged = client.get_run(parent_id).data
    for key in logged.tags:
        if key.startswith(VERDICT_TAG) and key.removeprefix(VERDICT_TAG) not in verdicts:
            client.delete_tag(parent_id, key)
    tags = [RunTag(f"{VERDICT_TAG}{claim}", verdict) for claim, verdict in verdicts.items()]
    for i in range(0, len(tags), BATCH_PARAMS):
        client.log_batch(parent_id, tags=tags[i : i + BATCH_PARAMS])
    now = int(time.time() * 1000)
    batch = [
        Metric(k, float(v), now, 0)
        for k, v in metrics.items()
        if math.isfinite(v) and logged.metrics.get(k) != float(v)
    ]
    for i in range(0, len(batch), BATCH_METRICS):
        client.log_batch(parent_id, metrics=batch[i : i + BATCH_METRICS])


def close_sweep(client: MlflowClient, lease: Lease, failed: int) -> None:
    """Mark the parent FINISHED (or FAILED when runs failed), tag the failure count, and
    release the lease (after the status, so a driver waiting on it finds the sweep closed)."""
    client.set_tag(lease.parent_id, "sdyn.failed_runs", str(failed))
    client.set_terminated(lease.parent_id, "FAILED" if failed else "FINISHED")
    lease.release()


def _git_commit() -> str:
    """The commit of sdyn's checkout, when sdyn runs from one (an editable install); "unknown"
    for an installed package, even one in a venv inside some other repository."""
    root = Path(sdyn.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--show-toplevel", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except OSError:
        return "unknown"
    lines = out.stdout.split()
    if out.returncode or len(lines) != 2 or Path(lines[0]).resolve() != root:
        return "unknown"
    return lines[1]
