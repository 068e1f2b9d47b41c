"""Drive a planned sweep (:func:`sdyn.plan.plan`): connect the store, take the sweep on, skip
what is recorded, train the rest on Ray, record each bundle as it lands, and report.

A sweep reaches here through :func:`sdyn.start.run`, which starts Ray and a new store
together; ``--plan`` reads the store as a sweep would (:func:`sdyn.preview.show_plan`).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import signal
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from tqdm import tqdm

from sdyn import events, names, stops
from sdyn.analysis import kept
from sdyn.analysis.load import load_sweep
from sdyn.api import PluginError
from sdyn.engine import bundles as bundles_mod
from sdyn.engine import startup
from sdyn.errors import EXIT_BAD_INPUT, EXIT_NOT_RECORDED, EXIT_RUNS_FAILED, BadInput, one_line
from sdyn.plan import Plan
from sdyn.text import count
from sdyn.tracking import FAILED, record, store, sweeps, table
from sdyn.tracking import uri as uris

if TYPE_CHECKING:
    from sdyn.engine import dispatch as dispatch_mod


def run_sweep(p: Plan, connecting: Future | None = None) -> int:
    """Execute a plan once :func:`sdyn.start.run` checked its store and cluster and started what
    it could: connect, take the sweep on, skip what is recorded, train the rest, record, report.
    Call it with SIGINT and SIGTERM armed (:func:`sdyn.stops.stoppable`): a stop once the
    sweep's parent run exists ends here (:func:`_stopped`); one before raises
    :class:`sdyn.stops.Stopped`.

    Args:
        connecting: the store's connection being made (:func:`connect`) while Ray started;
            None: made here.

    Returns the process exit status: 0; 1 when runs failed and failures are not allowed; 3 when
    the store stayed unreachable past ``tracking.outage_s``, another driver took the sweep
    over or Ray's own start failed (one line on stderr; a rerun of the same command resumes);
    128 + the signal's number for a stop, also one while the store was unreachable.
    """
    track = p.objects["tracking"]
    try:
        client, experiment_id, connected = connecting.result() if connecting else connect(track)
        stops.STOPS.check()  # a stop before the sweep is opened: nothing of it is written
        opened = time.perf_counter()
        digest = sweeps.plan_digest(p.hashes, p.probes)
        if not p.objects["sweep"].name:  # a default name taken by another plan: made unique
            p.name = sweeps.free_name(client, experiment_id, p.name, digest)
        sweep_opts = p.objects["sweep"]
        log = events.EventLog(
            events.log_path(sweep_opts.events, sweep_opts.out_dir, p.name), p.name
        )
        tags = {"sdyn.settings": names.describe(p.settings) or "the experiment's defaults"}
        # The status of each parent this sweep's name had: one reopened is given it back, not
        # deleted, if the plugin turns out broken.
        before = {
            r.info.run_id: r.info.status for r in sweeps.parents(client, [experiment_id], p.name)
        }
        parent = sweeps.open_sweep(
            client, track.uri, experiment_id, p.name, digest, len(p.hashes), tags,
            names.run_name(p.name, p.cfg),
        )  # fmt: skip
    except ValueError as exc:
        raise BadInput(one_line(exc)) from None
    lease = sweeps.Lease(client, parent, track.lease_s)
    log.driver = lease.driver
    try:
        stops.STOPS.check()  # a stop while the sweep was opened: its parent is marked KILLED
        return log.finished(_drive(p, client, experiment_id, lease, opened, connected, log))
    except stops.Stopped as stop:
        if lease.generation is None and parent in before:  # never held: another driver's
            stops.ignore()
            print(
                f"sdyn: stopped by {signal.Signals(stop.signum).name} before this driver took "
                f"the sweep on; it recorded nothing (parent run {parent} left as it was)",
                file=sys.stderr,
                flush=True,
            )
            return log.finished(128 + stop.signum)
        return log.finished(_stopped(stop, client, experiment_id, parent))
    except PluginError as exc:  # found on the first bundle, before this command recorded a run
        if parent in before:  # a sweep recorded before: left as it was
            client.update_run(parent, status=before[parent])
        else:
            client.delete_run(parent)
        log.finished(EXIT_BAD_INPUT)
        raise BadInput(one_line(exc)) from None
    except (store.Unreachable, sweeps.LostSweep, startup.RayDidNotStart) as exc:
        print(
            f"sdyn: error: {exc}; stopped without recording the runs in flight (parent run "
            f"{parent} stays RUNNING until its lease lapses; the same command resumes)",
            file=sys.stderr,
        )
        signum = stops.STOPS.signum  # a stop that came while the store was away
        return log.finished(128 + signum if signum else EXIT_NOT_RECORDED)
    finally:
        with contextlib.suppress(Exception):  # a driver that stops frees its sweep at once
            lease.release()


def connect(track) -> tuple[MlflowClient, str, float]:
    """:func:`sdyn.tracking.store.connect` to ``tracking``'s store, and the seconds it took (a
    new store's creation included)."""
    started = time.perf_counter()
    client, experiment_id = store.connect(track.uri, track.experiment)
    return client, experiment_id, time.perf_counter() - started


def stop_ray_meanwhile() -> threading.Thread:
    """Shut down the Ray this driver started or joined (:func:`sdyn.engine.startup.stop_ray`) in
    a thread, while the caller goes on (the report): 1-2 s, mostly waiting for Ray's processes
    to end. Returns the thread, to join.

    Garbage holding Ray object references (a failed task's exception is in a reference cycle
    with them) is collected first, while Ray is up: freed by a collection in another thread
    while Ray shuts down, such a reference ends the process ("The core worker has already been
    shutdown", a check in Ray's core worker).
    """
    gc.collect()
    thread = threading.Thread(target=startup.stop_ray, name="sdyn-ray-stop")
    thread.start()
    return thread


def _drive(
    p: Plan,
    client,
    experiment_id: str,
    lease: sweeps.Lease,
    opened: float,
    connected: float,
    log: events.EventLog,
) -> int:
    sweep_opts, track = p.objects["sweep"], p.objects["tracking"]
    patience = store.Patience(track.outage_s)
    say = _say(sweep_opts.quiet)
    if sweep_opts.quiet:  # Ray's notices too
        logging.getLogger("ray").setLevel(logging.ERROR)
    recorder, todo, reused = take_on(p, client, experiment_id, lease, patience, log)
    setup = time.perf_counter() - opened
    where = f"MLflow {track.uri}, parent run {lease.parent_id}"
    to_train = len(todo) if p.search is None else None
    log("sweep_started", store=track.uri, parent=lease.parent_id, generation=lease.generation,
        runs=len(p.runs), to_train=to_train)  # fmt: skip
    if p.search is None:
        say(
            f"sdyn: sweep {p.name}: {count(len(p.runs), 'run')}, {len(p.runs) - len(todo)} already "
            f"recorded, {len(todo)} to train ({where})"
        )
    else:
        say(
            f"sdyn: threshold search {p.name}: expected {p.search.estimate().describe()} "
            f"at the same resolution ({where})"
        )

    writes = patience.seconds
    try:
        if p.search is None:
            failed, elapsed = train_and_record(p, todo, recorder)
        else:
            failed, elapsed, todo = search_and_record(p, recorder, reused)
    except stops.Stopped:
        stops.ignore()
        recorder.flush()  # the bundles that landed are kept; those in flight are abandoned
        raise
    earlier = max(recorder.failed() - failed, 0)  # failed in an earlier command, still so
    out_dir = Path(sweep_opts.out_dir) / p.name
    # A report is written whole: a stop cut into plotting leaves debris (and a traceback). The
    # deferral starts before the line that says training is over, so a stop after it waits.
    with stops.STOPS.deferring("stopping once the report is drawn (seconds)"):
        say(
            f"sdyn: trained {count(len(todo), 'run')} in {elapsed:.1f} s ({failed} failed); "
            f"recording them took {patience.seconds - writes:.2f} s of the driver's time"
        )
        if earlier:
            say(
                f"sdyn: {count(earlier, 'run')} of the sweep failed when first trained "
                "(sweep.retry_failed=true trains them again)"
            )
        failed += earlier
        ray_stop = stop_ray_meanwhile()  # nothing more runs on Ray
        try:
            formats = tuple(p.objects["report"].formats)
            runs = patience(load_sweep, lease.parent_id, track.uri)
            result = kept.find(runs, out_dir, formats)
            if result is None:  # fitting and plotting: imported only to draw
                from sdyn.analysis import report as report_mod

                result = patience(
                    report_mod.build, lease.parent_id, track.uri, out_dir, formats, runs
                )
        except PluginError as exc:  # a plugin's claim kind raised: the runs stay recorded
            patience(sweeps.close_sweep, client, lease, failed)
            print(
                f"sdyn: error: {one_line(exc)}; the sweep's runs are recorded (MLflow parent run "
                f"{lease.parent_id}), its report is not: once the kind is mended, python -m "
                f"sdyn.report --sweep {p.name} --tracking-uri {track.uri} --out "
                f"{sweep_opts.out_dir} writes it",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        except (store.Unreachable, sweeps.LostSweep):  # the sweep cannot be closed (run_sweep)
            raise
        except Exception:  # sdyn's own bug, traced in full: the sweep is closed first
            patience(sweeps.close_sweep, client, lease, failed)
            raise
        finally:
            ray_stop.join()
    say(result.table)
    closing = time.perf_counter()
    patience(
        sweeps.log_report, client, lease.parent_id, out_dir, result.files, result.metrics,
        result.verdicts,
    )  # fmt: skip
    patience(sweeps.close_sweep, client, lease, failed)
    say(
        f"sdyn: report in {out_dir / 'index.html'} and on MLflow parent run {lease.parent_id} "
        f"(MLflow: store {connected:.2f} s, set-up {setup:.2f} s, closing "
        f"{time.perf_counter() - closing:.2f} s)"
    )
    browse = uris.mlflow_url(track.uri, experiment_id)
    if browse:  # a tracking server (MLflow's own per-run links are off)
        say(f"sdyn: browse it at {browse}")
    return EXIT_RUNS_FAILED if failed and not sweep_opts.allow_failures else 0


def take_on(
    p: Plan,
    client,
    experiment_id: str,
    lease: sweeps.Lease,
    patience: store.Patience,
    log: events.EventLog | None = None,
) -> tuple[record.Recorder, list[int], pd.DataFrame]:
    """Hold the sweep (after any other driver of it), complete its parent, and start recording.

    Reads what this sweep recorded and, for the rest, what other sweeps recorded (copied into
    this run table, not trained again). Returns the recorder, the runs to train (indices
    into the plan): those not recorded, with ``sweep.retry_failed`` the failed and diverged
    ones, with ``sweep.retrain`` all; and the rows other sweeps recorded. A search trains and
    copies in only what it probes (:func:`search_and_record`): its list is empty and nothing is
    copied yet. Says in one line how many runs only other code of the experiment recorded.
    The recorder and the training log to ``log`` (:mod:`sdyn.events`); None: no event log.
    """
    say, log = _say(p.objects["sweep"].quiet), log or (lambda event, **fields: None)

    def waiting(line: str) -> None:
        say(f"sdyn: {line}")
        log("sweep_waiting")

    lease.acquire(say=waiting, wait=stops.STOPS.wait)
    config = OmegaConf.to_container(p.cfg, resolve=True)
    # The experiment's own values of what the grid sets (n, m, ...) were never used.
    unused = {f"experiment.{axis}" for axis in p.objects["grid"].points()[0]}
    patience(sweeps.complete_parent, client, lease.parent_id, config, p.hashes, unused)
    patience(sweeps.resume, client, lease.parent_id)
    recorded, reused, todo, other_code = recorded_and_todo(
        p, client, experiment_id, lease.parent_id
    )
    if other_code:
        say(other_code)
    recorder = record.Recorder(
        client, experiment_id, lease, p.name, p.planned, patience, log, p.objects["sweep"].retrain
    )
    if p.search is not None:
        recorder.start(recorded, reused.iloc[:0], [])
        return recorder, [], reused
    recorder.start(recorded, reused, [p.hashes[k] for k in todo])
    return recorder, todo, reused


def recorded_and_todo(p: Plan, client, experiment_id: str, parent_id: str | None):
    """What the store holds of the plan, read without writing: the rows of this sweep's run
    table (parent ``parent_id``; None for a sweep not yet created), the rows other sweeps of
    the same experiment and data recorded for the rest (none with ``sweep.retrain``), the runs
    to train (indices into the plan, :func:`_trains`), and the line saying how many of the rest
    only other code of the experiment recorded (None: none)."""
    empty = pd.DataFrame(columns=list(table.META))
    recorded = table.read_table(client, parent_id) if parent_id else empty
    recorded = table.one_per_run(recorded[recorded["config_hash"].isin(p.hashes)])
    missing = set(p.hashes) - set(recorded["config_hash"])
    experiment, data = p.objects["experiment"].name, p.objects["data"].name
    others = empty
    if missing:
        others = table.recorded_elsewhere(client, experiment_id, parent_id or "", experiment, data)
    reused = table.one_per_run(others[others["config_hash"].isin(missing)])
    missing -= set(reused["config_hash"])
    stale = table.other_code(others, [r for r in p.planned if r.hash in missing])
    if p.objects["sweep"].retrain:
        reused = empty
    status = dict(zip(recorded["config_hash"], recorded["status"], strict=True))
    status.update(zip(reused["config_hash"], reused["status"], strict=True))
    todo = [k for k, h in enumerate(p.hashes) if _trains(p, status.get(h))]
    return recorded, reused, todo, _other_code(p, stale)


def _trains(p: Plan, status: str | None) -> bool:
    """Whether a run recorded with ``status`` (None: not recorded) is trained: when it is not
    recorded, always with ``sweep.retrain``, when failed or diverged with
    ``sweep.retry_failed``."""
    opts = p.objects["sweep"]
    return status is None or opts.retrain or (opts.retry_failed and status in (FAILED, "diverged"))


def _other_code(p: Plan, stale: pd.DataFrame) -> str | None:
    """The line saying that the runs of the plan that only other code of the experiment
    recorded (:func:`sdyn.tracking.table.other_code`) are trained again; None when none is."""
    if stale.empty:
        return None
    found = stale.get("code_version", pd.Series([None] * len(stale)))
    versions = ", ".join(sorted({v if isinstance(v, str) else "unknown" for v in found}))
    return (
        f"sdyn: {stale['planned_hash'].nunique()} runs recorded by other code of experiment "
        f"{p.experiment.name} (version {versions} -> {p.experiment.version}) are not reused; "
        "they stay in the store"
    )


def search_and_record(
    p: Plan, recorder: record.Recorder, elsewhere: pd.DataFrame
) -> tuple[int, float, list[int]]:
    """Run a threshold search round by round: each round's probes that this sweep or another
    recorded are read back (the others' rows copied into this run table), the rest trained
    together as one batch of bundles and recorded before the next round is decided.

    Decisions depend only on the probes' outcomes, so a resumed search replays the recorded
    rounds without training and goes on where it stopped; a stop (:mod:`sdyn.stops`) ends it
    between two rounds. Returns the failed runs, the wall time in seconds and the runs trained
    (indices into the plan).
    """
    s, say = p.search, _say(p.objects["sweep"].quiet)
    elsewhere = elsewhere.set_index("config_hash", drop=False)
    search = s.search()
    failed, elapsed, trained = 0, 0.0, []
    while probes := search.next_round():
        stops.STOPS.check()  # a stop while recorded rounds replay ends at the next round
        ks = [s.runs[probe] for probe in probes]
        todo = [k for k in ks if _trains(p, _status(recorder, p.hashes[k]))]
        found = [p.hashes[k] for k in todo if p.hashes[k] in elsewhere.index]
        found = [h for h in found if not _trains(p, elsewhere.at[h, "status"])]
        todo = [k for k in todo if p.hashes[k] not in found]
        fewest, most = search.left()
        left = count(most, "probe") if fewest == most else f"{fewest}-{most} probes"
        say(
            f"sdyn: round {search.rounds - 1}: {count(len(ks), 'probe')}, "
            f"{len(ks) - len(todo)} already recorded, {len(todo)} to train; {left} left in the "
            "search, this round's included"
        )
        recorder.expect([p.hashes[k] for k in todo])
        recorder.reuse(elsewhere.loc[found].reset_index(drop=True))
        # written when it returns; a later round's bundles are checked as later bundles
        lost, seconds = train_and_record(p, todo, recorder, first=not trained)
        failed, elapsed, trained = failed + lost, elapsed + seconds, trained + todo
        for probe, k in zip(probes, ks, strict=True):
            search.observe(*probe, s.outcomes(recorder.rows[p.hashes[k]]))
    return failed, elapsed, trained


def _status(recorder: record.Recorder, key: str) -> str | None:
    row = recorder.rows.get(key)
    return None if row is None else row["status"]


def bundle_plan(
    p: Plan, todo: list[int], gpus: float, policy: str | None = None
) -> tuple[list[list[int]], list[str]]:
    """The bundles of the runs ``todo`` (indices into the plan) and the device of each
    (:func:`sdyn.engine.bundles.plan`), under ``policy`` (None: ``cluster.device``) on a
    cluster of ``gpus`` GPUs."""
    policy = policy or p.objects["cluster"].device
    gpu_footprint = p.experiment.gpu_footprint
    return bundles_mod.plan(
        todo,
        lambda k: p.experiment.shape_key(p.runs[k]),
        lambda k: p.experiment.footprint(p.runs[k]),
        lambda k: bundles_mod.choose_device(
            policy, p.experiment.footprint(p.runs[k]), gpu_footprint, gpus
        ),
        p.objects["sweep"].bundle_size,
        lambda k: p.experiment.bundle_key(p.runs[k]),
    )


def train_and_record(
    p: Plan, todo: list[int], recorder: record.Recorder, first: bool = True
) -> tuple[int, float]:
    """Train the runs ``todo`` (indices into the plan) on Ray and record each bundle as it lands;
    Ray is started (or joined) here, only when there is something to train.

    Each bundle's result is checked before it is recorded
    (:meth:`sdyn.api.Experiment.check_result`): when this command has ``first`` to record, its
    first bundle's :class:`~sdyn.api.PluginError` is raised (a broken plugin records nothing);
    a later bundle's fails that bundle's runs, with the reason as their traceback.

    Returns the number of failed runs and the wall time in seconds.
    """
    sweep_opts = p.objects["sweep"]
    if not todo:  # a rerun that finds every run recorded starts no Ray
        recorder.finish()
        return 0, 0.0
    startup.start_ray(p.objects["cluster"])  # a search's later rounds: already started
    bundle_list, devices = bundle_plan(p, todo, startup.dispatch_module().gpu_count())
    _say(sweep_opts.quiet)(f"sdyn: {bundles_mod.describe(len(todo), devices)}")
    failed = 0
    shown = sweep_opts.progress and not sweep_opts.quiet
    bar = tqdm(total=len(todo), unit="run", disable=not shown, desc="training")

    warned = False  # once: a bundle planned for a GPU trained on the CPU
    checked = not first  # once: the first result holds what the claims read
    grid_name = p.objects["grid"].name

    def logged(event: str, bundle: int, positions: list[int], **fields) -> None:
        runs = [p.hashes[bundle_list[bundle][j]] for j in positions]
        recorder.events(event, bundle=bundle, runs=runs, **fields)

    def record(outcome: dispatch_mod.Outcome) -> None:
        nonlocal failed, warned, checked
        if outcome.device == "cpu" and devices[outcome.bundle] == "cuda" and not warned:
            print("sdyn: warning: a GPU worker's torch has no CUDA; it trains on the CPU")
            warned = True
        hashes = [p.hashes[bundle_list[outcome.bundle][j]] for j in outcome.positions]
        error = outcome.error
        if error is None:
            result = outcome.result
            try:  # before it is recorded; the first bundle's claims too
                p.experiment.check_result(result, len(hashes), grid_name, whole=not checked)
                if why := table.unrecordable(result.summaries, result.curves, result.tables):
                    raise PluginError(f"experiment {p.experiment.name!r}: train() returned {why}")
            except PluginError as exc:
                if not checked:  # a broken plugin writes no run
                    raise
                error = f"sdyn.api.PluginError: {exc}"  # this bundle's runs fail, as if it raised
            checked = True
        if error is None:
            summaries, curves, tables = result.summaries, result.curves, result.tables
        else:
            summaries, curves, tables = [{"status": FAILED}] * len(hashes), None, None
            if not failed and not sweep_opts.quiet:  # the first cause; all are recorded
                cause = error.strip().splitlines()[-1]
                tqdm.write(
                    f"sdyn: a run failed: {cause} (each failed run's traceback: "
                    "tracebacks/seed-<k>.txt on its cell run)"
                )
        recorder.add(hashes, summaries, curves, tables, outcome.node, error)
        failed += sum(s["status"] == FAILED for s in summaries)
        bar.update(len(hashes))

    started = time.perf_counter()
    try:  # the bar closed before any error's line, which would be glued to it
        if bundle_list:
            runs = [[p.runs[k] for k in ks] for ks in bundle_list]
            with stops.STOPS.deferring():  # a signal never cuts a write short; dispatch polls it
                startup.dispatch_module().dispatch(
                    p.objects["experiment"].name, runs, record, devices, stops.STOPS.requested,
                    logged,
                )  # fmt: skip
    finally:
        bar.close()
    recorder.finish()
    return failed, time.perf_counter() - started


def _say(quiet: bool):
    """sdyn's own lines on stdout (flushed, so they interleave with Ray's and MLflow's), or
    nothing with ``sweep.quiet``."""
    return (lambda line: None) if quiet else (lambda line: print(line, flush=True))


def _stopped(stop: stops.Stopped, client, experiment_id: str, parent: str) -> int:
    """After a stop: the parent and any cell run left open marked KILLED (tag ``sdyn.stopped``),
    Ray shut down, one line on stderr. Returns 128 + the signal's number (130, 143)."""
    stops.ignore()
    name = signal.Signals(stop.signum).name
    with contextlib.suppress(Exception):  # the store may be what is failing: still stop
        for cell in table.cell_runs(client, experiment_id, parent).values():
            if cell.info.status == "RUNNING":
                client.set_terminated(cell.info.run_id, "KILLED")
        client.set_tag(parent, "sdyn.stopped", name)
        client.set_terminated(parent, "KILLED")
    startup.stop_ray()
    print(
        f"sdyn: stopped by {name}: runs that finished are recorded, those in flight abandoned; "
        f"parent run {parent} marked KILLED (the same command resumes)",
        file=sys.stderr,
        flush=True,
    )
    return 128 + stop.signum
