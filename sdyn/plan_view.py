"""``--plan``: what a sweep would train, where, and what it would cost; nothing is written.

    text = format_plan(header, stages, model, cpus)

A plan is shown as stages, each a list of bundles (the runs one Ray task trains together) on a
device: a grid sweep is one stage, ``grid``; a kind of sweep that trains in rounds (e.g. an
adaptive search) passes one :class:`Stage` per round it can foresee. A :class:`GPUPlan` adds a
data-sheet estimate of the time on one GPU (:func:`sdyn.engine.cost.gpu_seconds`) per card.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdyn.engine import cost
from sdyn.engine.cost import CostModel

MAX_ROWS = 12  # bundles listed per stage; the rest summed in one line


@dataclass
class Bundle:
    """One Ray task of the plan: ``runs`` runs described by ``shape`` (e.g. ``n=128 m=4096``),
    ``footprint`` bytes (sum over its runs of the experiment's largest per-run tensor) and
    ``steps``, per run, the GD steps it trains (forecast, or its budget); ``step``, for a bundle
    on a GPU, the FLOP and bytes of one iteration of its step (the experiment's
    ``step_cost``), None where it has none. On a CPU each run costs its own steps; a GPU
    bundle iterates until its last run stops."""

    runs: int
    shape: str
    footprint: int
    steps: tuple[int, ...]
    step: tuple[float, float] | None = None


@dataclass
class Stage:
    """A stage of the plan: ``label`` (``grid``, ``round 1``, ...), its bundles, their device."""

    label: str
    device: str
    bundles: list[Bundle] = field(default_factory=list)


@dataclass
class GPUPlan:
    """The plan as a cluster with one GPU would train it (``cluster.device`` placing each
    bundle): ``gpu``, per bundle on the GPU, ``(iterations, FLOP, bytes)`` with FLOP and bytes
    of one iteration of its step; ``cpu``, the bundles left on the CPUs beside it."""

    gpu: list[tuple[int, float, float]]
    cpu: list[Bundle]


def _seconds(bundle: Bundle, model: CostModel) -> float:
    return sum(model.seconds(bundle.footprint // bundle.runs, steps) for steps in bundle.steps)


def _steps_note(forecast: bool) -> str:
    if forecast:
        return "each run to the step its experiment forecasts it stops at"
    return "every run to its full budget: an upper bound where runs stop early"


def _gpu_estimate(plan: GPUPlan, model: CostModel, cpus: int, forecast: bool) -> str:
    """One line: the time of ``plan``'s GPU bundles, one after another, per card of
    :data:`~sdyn.engine.cost.CARDS`, and of its CPU bundles on ``cpus`` CPUs beside them (the
    sweep takes the longer of the two)."""
    times = []
    for card in cost.CARDS:
        seconds = sum(cost.gpu_seconds(card, f, b, steps) for steps, f, b in plan.gpu)
        times.append(f"{card.model} {_duration(seconds)}")
    beside = [_seconds(b, model) for b in plan.cpu]
    wall = max(sum(beside) / cpus, max(beside, default=0.0))
    return (
        f"on one GPU: its {len(plan.gpu)} bundles take {', '.join(times)}; the "
        f"{len(plan.cpu)} left on the CPUs {_duration(wall)} on {cpus} CPUs beside it (a "
        f"data-sheet estimate, not measured: per iteration the longer of "
        f"{cost.GPU_ITERATION_S * 1e3:.2f} ms and its FLOP at the card's FP64 rate or its bytes "
        f"at its memory bandwidth, whichever binds, at {cost.GPU_LIMIT_SHARE:.0%} of it; "
        f"{_steps_note(forecast)})"
    )


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    return (
        f"{minutes:.0f} min" if minutes < 60 else f"{int(minutes // 60)} h {minutes % 60:02.0f} min"
    )


def _bytes(n: float) -> str:
    return f"{n / 2**20:.0f} MiB" if n < 2**30 else f"{n / 2**30:.1f} GiB"


def format_plan(
    header: list[str],
    stages: list[Stage],
    model: CostModel | None,
    cpus: int,
    undecided: list[tuple[str, str]] = (),
    gpu: GPUPlan | None = None,
    card: cost.Card | None = None,
    forecast: bool = False,
) -> str:
    """The plan as text: ``header`` lines, then per stage its bundles (runs, shape, device,
    estimated seconds and peak memory of each: a bundle on a GPU with a ``step`` is timed by
    the data sheet of ``card``, by default an H100), then the estimate for the CPU bundles on
    ``cpus`` one-CPU Ray tasks at a time: wall time ``max(sum / cpus, longest bundle)`` and
    peak memory the ``cpus`` largest bundles at once (``model`` None: nothing to train), with
    ``gpu`` (bundles on a GPU) a data-sheet estimate on one GPU, then the ``(claim, reason)``
    pairs of the claims the planned runs can never decide. ``forecast``: the bundles' steps are
    the experiment's forecast, not every run's budget (the estimate lines say which)."""
    lines, card = list(header), card or cost.card("H100")
    total_s, longest, memories, on_card = 0.0, 0.0, [], 0
    for stage in stages:
        runs = sum(b.runs for b in stage.bundles)
        lines.append(f"{stage.label}: {runs} runs to train in {len(stage.bundles)} bundles")
        if not stage.bundles or model is None:
            continue
        lines.append("  bundle  runs  shape                 device  est. time  peak memory")
        for i, b in enumerate(stage.bundles):
            memory = model.memory(b.footprint)
            memories.append(memory)
            if stage.device == "cuda" and b.step is not None:
                seconds, on_card = cost.gpu_seconds(card, *b.step, max(b.steps)), on_card + 1
            else:
                seconds = _seconds(b, model)
                total_s, longest = total_s + seconds, max(longest, seconds)
            if i < MAX_ROWS:
                lines.append(
                    f"  {i + 1:>6}  {b.runs:>4}  {b.shape:<20}  {stage.device:<6}  "
                    f"{_duration(seconds):>9}  {_bytes(memory):>11}"
                )
        if len(stage.bundles) > MAX_ROWS:
            lines.append(f"  ... {len(stage.bundles) - MAX_ROWS} more bundles")
    if on_card:
        lines.append(
            f"the {on_card} bundles on a GPU: their time on one {card.model}, a data-sheet "
            "estimate (see below); their memory, the worker's on the host"
        )
    if model is not None and memories:
        wall = max(total_s / cpus, longest)
        peak = sum(sorted(memories)[-cpus:])
        trained = (
            f"{_duration(wall)} on {cpus} CPUs ({_duration(total_s)} of training, "
            f"{_steps_note(forecast)})"
            if len(memories) > on_card
            else "every bundle on a GPU"
        )
        lines += [
            f"estimate: {trained}, peak memory {_bytes(peak)} ({cpus} bundles at once)",
            f"cost model (probe of {model.probe_s:.1f} s, one thread): per run "
            f"{model.per_run_s * 1e3:.1f} ms + {model.per_byte_s * 2**20:.3g} s per MiB + "
            f"{model.per_byte_step_s * 2**20 * 1e3:.3g} ms per MiB per step; memory "
            f"{_bytes(model.base_rss)} + {model.rss_per_byte:.3g} x footprint",
        ]
        if gpu is not None and gpu.gpu:
            lines.append(_gpu_estimate(gpu, model, cpus, forecast))
    if undecided:
        lines.append("claims these runs can never decide:")
        lines += [f"  {claim}: {why}" for claim, why in undecided]
    lines.append("nothing was written: run the same command without --plan to start it")
    return "\n".join(lines)


def format_expansion(planned: list) -> str:
    """The ``--cfg`` trailer: the run count and, for every parameter the grid varies, the
    values it takes (as YAML comments, so the printed config stays valid YAML).

    ``planned``: one :class:`sdyn.tracking.record.Planned` per run of the plan.
    """
    cells = {r.cell for r in planned}
    seeds = {r.seed for r in planned}
    lines = [f"# expands to {len(planned)} runs = {len(cells)} cells x {len(seeds)} seeds"]
    for key in planned[0].params:
        values = {r.params[key] for r in planned}
        if len(values) > 1:
            shown = sorted(values, key=_numeric_first)
            lines.append(f"#   {key}: {len(shown)} values, {', '.join(shown)}")
    return "\n".join(lines)


def _numeric_first(text: str) -> tuple:
    """Sort key: numbers by value, before any text."""
    try:
        return (0, float(text), "")
    except ValueError:
        return (1, 0.0, text)
