"""``--plan``: what a sweep would train, where, and what it would cost; nothing is written.

    text = format_plan(header, stages, model, cpus)

A plan is shown as stages, each a list of bundles (the runs one Ray task trains together) on a
device: a grid sweep is one stage, ``grid``; a kind of sweep that trains in rounds (e.g. an
adaptive search) passes one :class:`Stage` per round it can foresee.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sdyn.engine.cost import CostModel

MAX_ROWS = 12  # bundles listed per stage; the rest summed in one line


@dataclass
class Bundle:
    """One Ray task of the plan: ``runs`` runs described by ``shape`` (e.g. ``n=128 m=4096``),
    ``footprint`` bytes (sum over its runs of the experiment's largest per-run tensor) and
    ``steps`` GD steps per run."""

    runs: int
    shape: str
    footprint: int
    steps: int


@dataclass
class Stage:
    """A stage of the plan: ``label`` (``grid``, ``round 1``, ...), its bundles, their device."""

    label: str
    device: str
    bundles: list[Bundle] = field(default_factory=list)


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
) -> str:
    """The plan as text: ``header`` lines, then per stage its bundles (runs, shape, device,
    estimated seconds and peak memory of each), then the estimate for the whole sweep on
    ``cpus`` one-CPU Ray tasks at a time: wall time ``max(sum / cpus, longest bundle)`` and
    peak memory the ``cpus`` largest bundles at once (``model`` None: nothing to train), then
    the ``(claim, reason)`` pairs of the claims the planned runs can never decide."""
    lines = list(header)
    total_s, longest, memories = 0.0, 0.0, []
    for stage in stages:
        runs = sum(b.runs for b in stage.bundles)
        lines.append(f"{stage.label}: {runs} runs to train in {len(stage.bundles)} bundles")
        if not stage.bundles or model is None:
            continue
        lines.append("  bundle  runs  shape                 device  est. time  peak memory")
        for i, b in enumerate(stage.bundles):
            seconds = b.runs * model.seconds(b.footprint // b.runs, b.steps)
            memory = model.memory(b.footprint)
            total_s, longest = total_s + seconds, max(longest, seconds)
            memories.append(memory)
            if i < MAX_ROWS:
                lines.append(
                    f"  {i + 1:>6}  {b.runs:>4}  {b.shape:<20}  {stage.device:<6}  "
                    f"{_duration(seconds):>9}  {_bytes(memory):>11}"
                )
        if len(stage.bundles) > MAX_ROWS:
            lines.append(f"  ... {len(stage.bundles) - MAX_ROWS} more bundles")
    if model is not None and memories:
        wall = max(total_s / cpus, longest)
        peak = sum(sorted(memories)[-cpus:])
        lines += [
            f"estimate: {_duration(wall)} on {cpus} CPUs ({_duration(total_s)} of training, "
            f"every run to its full budget: an upper bound where runs stop early), peak memory "
            f"{_bytes(peak)} ({cpus} bundles at once)",
            f"cost model (probe of {model.probe_s:.1f} s, one thread): per run "
            f"{model.per_run_s * 1e3:.1f} ms + {model.per_byte_s * 2**20:.3g} s per MiB + "
            f"{model.per_byte_step_s * 2**20 * 1e3:.3g} ms per MiB per step; memory "
            f"{_bytes(model.base_rss)} + {model.rss_per_byte:.3g} x footprint",
        ]
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
