"""Threshold search: locate, per condition and seed, where a run starts to succeed along one
axis (the width m* of the NTK regime, say), by bracketing and bisection in batched rounds.

A search grid (:class:`SearchGrid`) gives every condition a **ladder**: the valid values of the
searched axis from its lower to its upper bound, a factor ``resolution`` apart (fewer where the
axis must be an even integer, say). The fixed grid that sweeps the whole ladder would read each
threshold to the same resolution; the search probes a few rungs of it:

- the first probe is the ladder's geometric middle (and, with ``anchor``, also its upper bound:
  there the claims read the theorem's lambda and check its assumptions, as on the fixed grid);
- while every probe succeeds it steps down by ``coarse_ratio``, while the highest probe fails
  it steps up by ``coarse_ratio`` (a bound reached ends the search there: the threshold is
  censored);
- then it halves the bracket (the last failure, the first success above it) in log scale until
  the two are neighbours on the ladder.

Each condition's next probe depends only on the outcomes of its earlier probes, so a search
replayed on the recorded outcomes makes the same decisions. The bracket is the one
:func:`sdyn.analysis.fits.threshold_intervals` reads from the same runs: the last failure and
the first success above it, so outcomes that are not monotone in the axis (a success below a
failure) are kept and reported, not assumed away. Several success criteria (one per threshold
claim) may be searched at once on the same runs: each has its own bracket, and the probes of a
round are the union of theirs. A probe that failed to run ends its condition's search.

All conditions advance together, one probe per condition and criterion per round, so a round is
a batch of ordinary runs for the engine.

What a search will probe is bounded by running the search itself on every joint position of
its criteria's thresholds, given the outcomes already recorded (:func:`searches`): the start
line's rounds and runs (:func:`estimate`), ``--plan``'s cheapest and costliest probes
(:func:`probe_bounds`) and each round's probes left (:meth:`Search.left`).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import ClassVar


class SearchGrid:
    """Base of an experiment's search grids (a dataclass schema that also inherits this).

    The subclass's fields include ``n``-like condition axes, ``seeds``, ``coarse_ratio`` and
    ``claims`` (ids of the threshold claims whose success criteria are searched; None: all
    whose ``threshold_axis`` is ``experiment.<axis>``); its ``points()`` lists every rung of
    every condition's ladder (the equivalent fixed grid).
    """

    axis: ClassVar[str]  # the experiment field searched, e.g. "m"


@dataclass(frozen=True)
class Criterion:
    """Success of a probe for one threshold claim: ``quantity <= level`` (NaN or inf fails)."""

    quantity: str
    level: float

    def success(self, row: dict) -> bool:
        value = row.get(self.quantity)
        return value is not None and math.isfinite(value) and value <= self.level


def criteria(claims: Sequence, axis: str, chosen: Sequence[str] | None) -> list[Criterion]:
    """The distinct success criteria of the threshold claims (those with a ``threshold_axis``) along
    ``experiment.<axis>``, of those named in ``chosen`` (None: all).

    Raises:
        ValueError: ``chosen`` names a claim that is not such a threshold claim, or none is.
    """
    eligible = {
        c.id: c for c in claims if getattr(c, "threshold_axis", None) == f"experiment.{axis}"
    }
    names = list(eligible) if chosen is None else list(chosen)
    unknown = [name for name in names if name not in eligible]
    if unknown or not names:
        raise ValueError(
            f"grid.claims: {', '.join(unknown) or 'none given'}; the threshold claims along "
            f"experiment.{axis} are {', '.join(eligible) or 'none'}"
        )
    found = [Criterion(eligible[n].quantity, float(eligible[n].level)) for n in names]
    return list(dict.fromkeys(found))


def unsearched(claims: Sequence, axis: str, chosen: Sequence[str] | None) -> dict[str, str]:
    """The threshold claims along ``experiment.<axis>`` whose success criterion a search of
    ``chosen`` (``grid.claims``; None: all) does not bracket, each with the reason a report
    gives for not measuring it: their thresholds lie outside what the search probed.

    Raises:
        ValueError: as :func:`criteria`.
    """
    searched = set(criteria(claims, axis, chosen))
    names = ", ".join(chosen or ())
    return {
        c.id: f"not searched: the search brackets the criteria of grid.claims=[{names}], not "
        f"{c.quantity} <= {float(c.level):g}"
        for c in claims
        if getattr(c, "threshold_axis", None) == f"experiment.{axis}"
        and Criterion(c.quantity, float(c.level)) not in searched
    }


def _nearest(ladder: Sequence[float], target: float, lo: int, hi: int) -> int:
    """The index in ``lo .. hi`` (inclusive) whose value is nearest ``target`` in log scale (the
    lower on a tie). The ladder increases, so only the two rungs around ``target`` compete."""
    above = min(max(bisect.bisect_left(ladder, target, lo, hi + 1), lo + 1), hi)
    below = above - 1 if above > lo else above
    return min((below, above), key=lambda i: (abs(math.log(ladder[i] / target)), i))


def decide(
    ladder: Sequence[float], seen: dict[int, bool | None], coarse_ratio: float
) -> int | None:
    """The next rung to probe for one condition and criterion, or None when its search is over.

    Args:
        ladder: increasing positive values of the searched axis, shape (L,).
        seen: ladder index -> outcome of each earlier probe (True: success, False: failure,
            None: the run failed).
        coarse_ratio: the factor of a step while the threshold is not yet bracketed (> 1).

    Over when a probe failed to run, when the bracket's two ends are neighbours on the ladder,
    or when the lowest probe succeeds at the lower bound (left-censored) or the highest fails at
    the upper bound (right-censored). Never returns an index already in ``seen``.
    """
    last = len(ladder) - 1
    if any(ok is None for ok in seen.values()):
        return None
    if not seen:
        return _nearest(ladder, math.sqrt(ladder[0] * ladder[-1]), 0, last)
    failures = [i for i, ok in seen.items() if not ok]
    if not failures:
        low = min(seen)
        return None if low == 0 else _nearest(ladder, ladder[low] / coarse_ratio, 0, low - 1)
    failure = max(failures)
    above = [i for i in seen if i > failure]
    if not above:
        if failure == last:
            return None
        return _nearest(ladder, ladder[failure] * coarse_ratio, failure + 1, last)
    success = min(above)
    if success - failure <= 1:
        return None
    middle = math.sqrt(ladder[failure] * ladder[success])
    return _nearest(ladder, middle, failure + 1, success - 1)


class Search:
    """The state of a search over conditions (any hashable key, e.g. ``(n, seed)``) that share
    the criteria; see the module docstring.

        search = Search({key: ladder, ...}, criteria=2, coarse_ratio=4.0, anchor=True)
        while probes := search.next_round():       # [(key, ladder index), ...]
            for key, i in probes:
                search.observe(key, i, outcomes)     # one bool (or None) per criterion
    """

    def __init__(
        self,
        ladders: dict[Hashable, Sequence[float]],
        criteria: int,
        coarse_ratio: float,
        anchor: bool = False,
    ):
        if coarse_ratio <= 1:
            raise ValueError(f"coarse_ratio must be > 1, got {coarse_ratio}")
        self.ladders, self.criteria, self.coarse_ratio = ladders, criteria, coarse_ratio
        self.anchor = anchor
        self.seen: dict[Hashable, dict[int, tuple]] = defaultdict(dict)
        self.rounds = 0

    def next_round(self) -> list[tuple[Hashable, int]]:
        """The probes of the next round (each ``(key, ladder index)`` once), in key order;
        [] when every condition's search is over."""
        probes = []
        for key, ladder in self.ladders.items():
            seen = self.seen[key]
            wanted = {
                decide(ladder, {i: outcome[c] for i, outcome in seen.items()}, self.coarse_ratio)
                for c in range(self.criteria)
            }
            if self.anchor and not seen:
                wanted.add(len(ladder) - 1)
            probes += [(key, i) for i in sorted(wanted - {None})]
        self.rounds += bool(probes)
        return probes

    def observe(self, key: Hashable, index: int, outcomes: Sequence[bool | None]) -> None:
        """Record a probe's outcome per criterion (None for each when the run failed)."""
        self.seen[key][index] = tuple(outcomes)

    def left(self) -> tuple[int, int]:
        """The fewest and most probes the search has left (those of a round not yet observed
        included), if outcomes are monotone along the axis: :func:`probe_bounds` on what it
        has seen, each probe counted once."""
        low, high = probe_bounds(
            self.ladders, self.criteria, self.coarse_ratio, self.anchor, lambda key, i: 1, self.seen
        )
        return sum(map(len, low.values())), sum(map(len, high.values()))


@dataclass(frozen=True)
class Estimate:
    """Bounds on a search's cost, if each condition's outcome is monotone along the axis."""

    rounds: tuple[int, int]  # (fewest, most) rounds
    per_round: list[tuple[int, int]]  # per round, (fewest, most) runs
    runs: tuple[int, int]  # (fewest, most) runs in all
    fixed_grid: int  # runs of the fixed grid over the same ladders

    def describe(self) -> str:
        """One line: rounds, runs in all and per round, against the fixed grid."""
        per = ", ".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in self.per_round)
        return (
            f"{self.rounds[0]}-{self.rounds[1]} rounds, {self.runs[0]}-{self.runs[1]} runs "
            f"(per round: {per}) against {self.fixed_grid} for the fixed grid"
        )


def estimate(
    ladders: dict[Hashable, Sequence[float]], criteria: int, coarse_ratio: float, anchor=False
) -> Estimate:
    """:class:`Estimate` of a search: the fewest and most rounds, and runs per round and in all,
    over every position of each criterion's threshold on every condition's ladder
    (:func:`searches`; exact if each condition's outcomes are monotone along the axis and its
    joint positions are at most :data:`MAX_SEARCHES`).

    Args:
        ladders: as :class:`Search` (key -> increasing values of the axis).
        criteria: criteria searched per condition (>= 1).
        coarse_ratio, anchor: as :class:`Search`.
    """
    fewest, most = defaultdict(int), defaultdict(int)  # round -> runs
    total, rounds = [0, 0], [math.inf, 0]
    for ladder in ladders.values():
        paths = searches(tuple(ladder), criteria, coarse_ratio, anchor)
        lengths = [len(path) for path in paths]
        rounds = [min(rounds[0], min(lengths)), max(rounds[1], max(lengths))]
        for r in range(max(lengths)):
            sizes = [len(path[r]) if r < len(path) else 0 for path in paths]
            fewest[r], most[r] = fewest[r] + min(sizes), most[r] + max(sizes)
        sums = [sum(map(len, path)) for path in paths]
        total = [total[0] + min(sums), total[1] + max(sums)]
    per_round = [(fewest[r], most[r]) for r in range(rounds[1])]
    fixed = sum(len(ladder) for ladder in ladders.values())
    return Estimate((int(rounds[0]), rounds[1]), per_round, (total[0], total[1]), fixed)


def probe_bounds(
    ladders: dict[Hashable, Sequence[float]],
    criteria: int,
    coarse_ratio: float,
    anchor: bool,
    weight,
    known: dict[Hashable, dict[int, tuple]] | None = None,
) -> tuple[dict[Hashable, list[int]], dict[Hashable, list[int]]]:
    """Per condition, ``(cheapest, costliest)``: the ladder indices, not yet ``known``, that the
    search probes at the threshold positions where they cost the least and where they cost the
    most (:func:`searches`). If each condition's outcomes are monotone along the axis, what the
    search has left to train costs at least the first's sum and at most the second's.

    Args:
        ladders, criteria, coarse_ratio, anchor: as :class:`Search`.
        weight: ``weight(key, index)``, the cost of probing rung ``index`` of ``key``'s ladder.
        known: key -> {ladder index: outcome per criterion (None: the run failed)}, the rungs
            whose outcomes are recorded: the search reads them back at no cost, and only the
            threshold positions they agree with are weighed. None: nothing is recorded.
    """
    known = known or {}
    cheapest, costliest = {}, {}
    for key, ladder in ladders.items():
        seen = known.get(key, {})
        paths = {
            frozenset(i for probes in path for i in probes if i not in seen)
            for path in searches(
                tuple(ladder), criteria, coarse_ratio, anchor, tuple(sorted(seen.items()))
            )
        }
        ranked = sorted(paths, key=lambda path: (sum(weight(key, i) for i in path), sorted(path)))
        cheapest[key], costliest[key] = sorted(ranked[0]), sorted(ranked[-1])
    return cheapest, costliest


# The most joint threshold positions :func:`searches` runs the search on (a second or two).
MAX_SEARCHES = 5_000


@functools.cache
def searches(
    ladder: tuple[float, ...],
    criteria: int,
    coarse_ratio: float,
    anchor: bool,
    known: tuple[tuple[int, tuple], ...] = (),
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Every distinct search of one condition, as its probes round by round: one per joint
    position of the ``criteria`` thresholds (criterion c succeeds on the rungs from its
    position up; ``len(ladder) + 1`` positions each), the rungs in ``known`` (``(index,
    outcome per criterion)`` pairs) taking their recorded outcomes. Each criterion's positions
    are those its known outcomes agree with (all of them where none does: outcomes that are not
    monotone). The search itself (:class:`Search`) is run on each, so its decisions are the
    ones a sweep makes. Cost: ``(len(ladder) + 1) ** criteria`` searches at most (about 0.1 ms
    each), cached; beyond :data:`MAX_SEARCHES` each criterion's positions are thinned evenly
    (its first and last kept), and the searches are those of the positions kept.
    """
    recorded = dict(known)
    positions = []
    for c in range(criteria):
        agree = [
            t
            for t in range(len(ladder) + 1)
            if all(out[c] is None or out[c] == (i >= t) for i, out in recorded.items())
        ]
        positions.append(agree or list(range(len(ladder) + 1)))
    if math.prod(map(len, positions)) > MAX_SEARCHES:  # several criteria on a long ladder
        each = max(2, int(MAX_SEARCHES ** (1 / criteria)))
        positions = [
            sorted({p[round(k * (len(p) - 1) / (each - 1))] for k in range(each)})
            for p in positions
        ]
    found = set()
    for thresholds in itertools.product(*positions):
        search, path = Search({0: ladder}, criteria, coarse_ratio, anchor), []
        while probes := search.next_round():
            for _, i in probes:
                outcome = recorded.get(i, tuple(i >= t for t in thresholds))
                search.observe(0, i, outcome)
            path.append(tuple(i for _, i in probes))
        found.add(tuple(path))
    return tuple(sorted(found))
