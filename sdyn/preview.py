"""``--plan``: the sweep as it would run now, read against its store and cluster and priced:
what is recorded, what trains where, how long it takes, what its runs could never decide.
Reads the store; writes nothing, starts no Ray.
"""

from __future__ import annotations

import os

import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from sdyn import driver, grid, names, plan_view
from sdyn.analysis import claims
from sdyn.api import PluginError, blamed
from sdyn.engine import cost, startup
from sdyn.errors import BadInput, one_line
from sdyn.plan import Plan
from sdyn.text import count
from sdyn.tracking import store, sweeps, table
from sdyn.tracking import uri as uris


def show_plan(p: Plan) -> str:
    """The ``--plan`` text (:func:`sdyn.plan_view.format_plan`): runs, cells and bundles, what
    the store already holds, the device per bundle, each bundle's time (on the CPU by the cost
    model, measured now by a probe; on a GPU, for an experiment with a ``step_cost``, by the
    data sheet of this machine's card, else an H100) and peak memory, for such an experiment
    a data-sheet estimate of the time on one GPU, and the claims the planned runs could never
    decide (:func:`sdyn.analysis.claims.limits`). Each run is priced at the step its
    experiment's ``steps_forecast`` says it stops at, else at its whole budget. A threshold
    search is shown by the probes that may cost the most, and its cheapest probes time it from
    below (:meth:`sdyn.plan.Searched.probe_bounds`). Reads the store; writes nothing, starts no
    Ray.

    Raises:
        BadInput: the store or the cluster's address cannot be used, or its sweep name is
            another plan's.
        PluginError: a function of the experiment (``train`` in the probe, ``steps_forecast``,
            ``step_cost``, a claim kind's ``limits``) raised or returned amiss.
    """
    track, cluster = p.objects["tracking"], p.objects["cluster"]
    try:
        uris.check(track.uri)
        if getattr(cluster, "address", None) is not None:  # as the sweep would refuse it
            startup.dispatch_module().check_address(cluster.address)
    except ValueError as exc:
        raise BadInput(one_line(exc)) from None
    todo, where, other_code = list(range(len(p.runs))), "no such store yet", None
    recorded = reused = pd.DataFrame(columns=list(table.META))
    if uris.exists(track.uri):
        client = MlflowClient(track.uri)
        try:
            found = client.get_experiment_by_name(track.experiment)
        except MlflowException as exc:
            if exc.error_code not in store.REFUSALS:
                raise
            raise BadInput(one_line(store.refused(exc, track.uri))) from None
        where = "no sweep of this plan yet"
        if found is not None:
            digest = sweeps.plan_digest(p.hashes, p.probes)
            if not p.objects["sweep"].name:
                p.name = sweeps.free_name(client, found.experiment_id, p.name, digest)
            mine = sweeps.parents(client, [found.experiment_id], p.name)
            try:  # a name another plan holds: refused, as the sweep would be
                sweeps.check_name(mine, p.name, track.uri, digest, len(p.hashes))
            except ValueError as exc:
                raise BadInput(one_line(exc)) from None
            mine = [r.info.run_id for r in mine if r.data.tags.get("sdyn.plan") == digest]
            parent = next(iter(mine), None)
            recorded, reused, todo, other_code = driver.recorded_and_todo(
                p, client, found.experiment_id, parent
            )
            where = f"parent run {mine[0]}" if mine else "a new sweep"
    # GPUs as dispatch would see them: those declared, else this machine's (address: unknown);
    # asked of torch only where there is something to bundle.
    declared = getattr(cluster, "num_gpus", None)
    gpus, card = declared or 0, None
    if declared is None and todo and getattr(cluster, "address", None) is None:
        import torch

        gpus = torch.cuda.device_count()
        card = cost.card(torch.cuda.get_device_name(0)) if gpus else None
    cpus = getattr(cluster, "num_cpus", None) or os.cpu_count() or 1
    costed, cheapest, known = todo, [], {}
    decided_on = range(len(p.runs))  # the runs a claim could be decided on
    if p.search is not None:  # a search trains some rungs: between its cheapest and costliest
        rows, trains = pd.concat([recorded, reused]).set_index("config_hash"), set(todo)
        known = {
            k: p.search.outcomes(rows.loc[h])
            for k, h in enumerate(p.hashes)
            if h in rows.index and k not in trains
        }
        low, high = map(set, p.search.probe_bounds(lambda k: _run_cost(p, k), known))
        costed, cheapest = [k for k in todo if k in high], [k for k in todo if k in low]
        # A search never trains its whole ladder: at most, per condition, its longest path of
        # probes (weighed one per run), beside what is recorded.
        decided_on = sorted(set(known) | set(p.search.probe_bounds(lambda k: 1.0, known)[1]))
    groups, devices = driver.bundle_plan(p, costed, gpus)

    step_cost, forecast = p.experiment.step_cost, p.experiment.steps_forecast
    owner = f"experiment {p.experiment.name!r}"
    priced = sorted({*costed, *cheapest})
    runs_priced = [p.runs[k] for k in priced]
    stops = list(map(cost.budget, runs_priced))
    if forecast and priced:
        with blamed(f"{owner}: steps_forecast", forecast):
            stops = list(forecast(runs_priced))
        if len(stops) != len(priced):
            raise PluginError(
                f"{owner}: steps_forecast returned {len(stops)} steps for {len(priced)} runs"
            )
    steps = dict(zip(priced, stops, strict=True))

    def bundle(ks: list[int], device: str = "cpu") -> plan_view.Bundle:
        runs = [p.runs[k] for k in ks]
        footprint = sum(p.experiment.footprint(run) for run in runs)
        step = None
        if device == "cuda" and step_cost is not None:
            with blamed(f"{owner}: step_cost", step_cost):
                step = step_cost(runs)
            if not (isinstance(step, tuple) and len(step) == 2):
                raise PluginError(
                    f"{owner}: step_cost returned {step!r}: give (FLOP, bytes moved) per step"
                )
        name = p.planned[ks[0]].cell_name
        return plan_view.Bundle(len(ks), name, footprint, tuple(steps[k] for k in ks), step)

    stages = {}
    for ks, device in zip(groups, devices, strict=True):
        label = "grid" if len(set(devices)) == 1 else f"grid ({device})"
        stage = stages.setdefault(device, plan_view.Stage(label, device))
        stage.bundles.append(bundle(ks, device))
    model = None
    if costed:
        small, large = cost.probe_runs([p.runs[k] for k in costed], p.experiment.footprint)
        with blamed(f"{owner}: train, timed by a probe", p.experiment.train):
            model = cost.measure(p.experiment.name, small, large, p.experiment.footprint)

    def one_gpu(ks_all: list[int]) -> plan_view.GPUPlan | None:  # as one GPU would train them
        if not ks_all or step_cost is None:
            return None
        on_gpu = plan_view.GPUPlan([], [])
        for ks, device in zip(*driver.bundle_plan(p, ks_all, max(gpus, 1)), strict=True):
            b = bundle(ks, device)
            if device == "cuda":
                on_gpu.gpu.append((max(b.steps), *b.step))
            else:
                on_gpu.cpu.append(b)
        return on_gpu

    on_gpu, lower = one_gpu(costed), None
    if cheapest:
        alone = [bundle(ks) for ks in driver.bundle_plan(p, cheapest, 0, "cpu")[0]]
        lower = plan_view.Bound(len(cheapest), alone, one_gpu(cheapest))
    cells = len({r.cell for r in p.planned})
    # A search trains only what it probes, which the search line below bounds.
    to_train = f"{len(todo)} to train" if p.search is None else "a search trains what it probes"
    header = [
        f"sdyn: plan of sweep {p.name} ({names.describe(p.settings) or 'the defaults'})",
        f"runs: {len(p.runs)} = {count(cells, 'cell')} x {count(p.objects['grid'].seeds, 'seed')}",
        f"store: {track.uri}, {where}: {len(p.runs) - len(todo)} already recorded, {to_train}",
    ]
    if other_code:
        header.append(other_code.removeprefix("sdyn: "))
    if p.search is not None and not costed:
        header.append(
            f"threshold search: the recorded outcomes of {len(known)} of its rungs end every "
            "condition's search: it trains nothing more"
        )
    elif p.search is not None:
        header.append(
            f"threshold search: expected {p.search.estimate().describe()}; the bundles and "
            f"estimates below are for the {len(costed)} of them that may cost the most (per "
            "condition, the probes of the costliest threshold positions"
            + (f" that the {len(known)} recorded outcomes allow" if known else "")
            + "), an upper bound if outcomes are monotone along the axis; the line after the "
            "estimate bounds it from below"
        )
    planned = pd.DataFrame([grid.run_params(p.runs[k]) for k in decided_on])
    undecided = claims.limits(p.experiment.claims, planned, p.objects["grid"].name)
    return plan_view.format_plan(
        header,
        list(stages.values()),
        model,
        cpus,
        undecided,
        on_gpu,
        card,
        forecast is not None,
        lower,
    )


def _run_cost(p: Plan, k: int) -> float:
    """What run k of the plan costs to train, for comparing runs: footprint times steps."""
    return p.experiment.footprint(p.runs[k]) * cost.budget(p.runs[k])
