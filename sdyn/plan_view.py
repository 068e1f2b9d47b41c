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
from sdyn.text import count

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


@dataclass
class Bound:
    """A search's cheapest threshold positions, which bound what it trains from below:
    ``runs`` probes, as the CPUs alone would train them (``cpu``) and as one GPU would
    (``gpu``, None where the experiment states no step cost)."""

    runs: int
    cpu: list[Bundle]
    gpu: GPUPlan | None


def _seconds(bundle: Bundle, model: CostModel) -> float:
    return sum(model.seconds(bundle.footprint // bundle.runs, steps) for steps in bundle.steps)


def _steps_note(forecast: bool) -> str:
    if forecast:
        return "each run to the step its experiment forecasts it stops at"
    return "every run to its full budget: an upper bound where runs stop early"


def _one_gpu(plan: GPUPlan, model: CostModel, cpus: int) -> str:
    """``plan``'s GPU bundles, one after another, per card of
    :data:`~sdyn.engine.cost.CARDS`, and its CPU bundles on ``cpus`` CPUs beside them (the
    sweep takes the longer of the two)."""
    times = [f"{card.model} {_duration(_card_seconds(card, plan))}" for card in cost.CARDS]
    wall = _wall([_seconds(b, model) for b in plan.cpu], cpus)
    return (
        f"its {count(len(plan.gpu), 'bundle')} in {', '.join(times)}; the {len(plan.cpu)} "
        f"left on the CPUs in {_duration(wall)} on {count(cpus, 'CPU')} beside it"
    )


def _gpu_estimate(plan: GPUPlan, model: CostModel, cpus: int, forecast: bool) -> str:
    """One line: :func:`_one_gpu`, and what the data-sheet estimate assumes."""
    return (
        f"on one GPU: {_one_gpu(plan, model, cpus)} (a data-sheet estimate, not measured: per "
        f"iteration the longer of {cost.GPU_ITERATION_S * 1e3:.2f} ms and its FLOP at the "
        "card's FP64 rate or its bytes at its memory bandwidth, whichever binds, at "
        f"{cost.GPU_LIMIT_SHARE:.0%} of it; {_steps_note(forecast)})"
    )


def _card_seconds(card: cost.Card, plan: GPUPlan) -> float:
    return sum(cost.gpu_seconds(card, f, b, steps) for steps, f, b in plan.gpu)


def _wall(seconds: list[float], cpus: int) -> float:
    """Wall time of one-CPU tasks of these ``seconds`` on ``cpus`` CPUs: at least the longest."""
    return max(sum(seconds) / cpus, max(seconds, default=0.0))


def _lower_bound(bound: Bound, model: CostModel, cpus: int) -> str:
    """One line: the time of a search's cheapest probes on ``cpus`` CPUs and on one GPU."""
    line = (
        f"at least (the probes of the cheapest threshold positions, {bound.runs} runs): "
        f"{_duration(_wall([_seconds(b, model) for b in bound.cpu], cpus))} on {cpus} CPUs"
    )
    if bound.gpu is not None and bound.gpu.gpu:
        line += f"; on one GPU (data sheet), {_one_gpu(bound.gpu, model, cpus)}"
    return line


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
    lower: Bound | None = None,
) -> str:
    """The plan as text: ``header`` lines, then per stage its bundles (runs, shape, device,
    estimated seconds and peak memory of each: a bundle on a GPU with a ``step`` is timed by
    the data sheet of ``card``, by default an H100), then the estimate for the CPU bundles on
    ``cpus`` one-CPU Ray tasks at a time: wall time ``max(sum / cpus, longest bundle)`` and
    peak memory the ``cpus`` largest bundles at once, or all where fewer (``model`` None:
    nothing to train), with ``gpu`` (bundles on a GPU) a data-sheet estimate on one GPU, then
    the ``(claim, reason)`` pairs of the claims the planned runs can never decide.
    ``forecast``: the bundles' steps are the experiment's forecast, not every run's budget (the
    estimate lines say which).
    ``lower``: for a search whose stages hold the probes that may cost the most, its cheapest
    probes, timed on one line after the estimate."""
    lines, card = list(header), card or cost.card("H100")
    on_cpu, memories, on_card = [], [], 0
    for stage in stages:
        runs = sum(b.runs for b in stage.bundles)
        lines.append(
            f"{stage.label}: {count(runs, 'run')} to train in {count(len(stage.bundles), 'bundle')}"
        )
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
                on_cpu.append(seconds)
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
        at_once = min(cpus, len(memories))
        peak = sum(sorted(memories)[-at_once:])
        wall, total = _duration(_wall(on_cpu, cpus)), _duration(sum(on_cpu))
        trained = (
            f"{wall} on {cpus} CPUs ({total} of training, {_steps_note(forecast)})"
            if len(memories) > on_card
            else "every bundle on a GPU"
        )
        lines += [
            f"estimate: {trained}, peak memory {_bytes(peak)} ({at_once} bundles at once)",
            f"cost model (probe of {model.probe_s:.1f} s, one thread): per run "
            f"{model.per_run_s * 1e3:.1f} ms + {model.per_byte_s * 2**20:.3g} s per MiB + "
            f"{model.per_byte_step_s * 2**20 * 1e3:.3g} ms per MiB per step; memory "
            f"{_bytes(model.base_rss)} + {model.rss_per_byte:.3g} x footprint",
        ]
        if gpu is not None and gpu.gpu:
            lines.append(_gpu_estimate(gpu, model, cpus, forecast))
        if lower is not None:
            lines.append(_lower_bound(lower, model, cpus))
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
    lines = [
        f"# expands to {count(len(planned), 'run')} = {count(len(cells), 'cell')} x "
        f"{count(len(seeds), 'seed')}"
    ]
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
