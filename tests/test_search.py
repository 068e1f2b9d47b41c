"""The threshold search's decisions (sdyn/search.py) on synthetic success oracles."""

import math

import numpy as np
import pytest

from sdyn.analysis.fits import fit_threshold, threshold_intervals
from sdyn.experiments import ntk
from sdyn.search import Search, criteria, decide, estimate, probe_bounds, unsearched

LADDER = ntk.ThresholdGrid().width_list()  # 2 ... 4096, 2^(1/4) apart (even widths)


def _search(ladders, oracles, coarse_ratio=4.0):
    """Run a search to its end; ``oracles[key]`` gives, per ladder index, the outcome per
    criterion. Returns the search and its probes per round."""
    search = Search(ladders, len(next(iter(oracles.values()))(0)), coarse_ratio)
    rounds = []
    while probes := search.next_round():
        for key, i in probes:
            search.observe(key, i, oracles[key](i))
        rounds.append(probes)
    return search, rounds


def _intervals(search, key, criterion=0):
    """The interval sdyn's analysis reads off the key's probes for one criterion."""
    seen = search.seen[key]
    xs = [search.ladders[key][i] for i in seen]
    values = [0.0 if outcome[criterion] else 1.0 for outcome in seen.values()]
    return threshold_intervals(xs, values, 0.5).iloc[0]


def test_the_search_finds_every_noisy_threshold_of_a_known_law_within_the_resolution():
    rng = np.random.default_rng(0)
    ns, seeds, alpha = (8, 16, 32, 64, 128), 5, 1.2
    truth = {(n, s): 3.0 * n**alpha * math.exp(0.3 * rng.standard_normal()) for n in ns
             for s in range(seeds)}  # fmt: skip
    ladders = {key: LADDER for key in truth}
    oracles = {key: (lambda i, t=t: (LADDER[i] >= t,)) for key, t in truth.items()}
    search, rounds = _search(ladders, oracles)
    probes = sum(len(r) for r in rounds)
    assert probes <= 0.2 * len(LADDER) * len(truth)  # a fraction of the fixed grid's runs
    low, high = [], []
    for key, t in truth.items():
        cell = _intervals(search, key)
        assert cell["low"] < t <= cell["high"]
        assert not cell["non_monotone"]
        if cell["censored"] == "":  # neighbours on the ladder: the resolution reached
            assert LADDER.index(cell["high"]) == LADDER.index(cell["low"]) + 1
        else:
            assert (cell["censored"], t) in (("left", t <= LADDER[0]), ("right", t > LADDER[-1]))
        low.append(cell["low"])
        high.append(cell["high"])
    fit = fit_threshold(low, high, [key[0] for key in truth])
    assert fit.ci_low < alpha < fit.ci_high
    # The estimate's bounds hold for this search.
    bounds = estimate(ladders, 1, 4.0)
    assert bounds.rounds[0] <= len(rounds) <= bounds.rounds[1]
    assert bounds.runs[0] <= probes <= bounds.runs[1]
    for (lo, hi), made in zip(bounds.per_round, rounds, strict=False):
        assert lo <= len(made) <= hi
    assert bounds.fixed_grid == len(LADDER) * len(truth)


def test_thresholds_beyond_the_bounds_are_censored_at_the_bounds():
    ladders = {"low": LADDER, "high": LADDER}
    oracles = {"low": lambda i: (True,), "high": lambda i: (False,)}
    search, _ = _search(ladders, oracles)
    assert 0 in search.seen["low"] and len(LADDER) - 1 in search.seen["high"]
    low, high = _intervals(search, "low"), _intervals(search, "high")
    assert (low["censored"], low["low"], low["high"]) == ("left", 0.0, LADDER[0])
    assert (high["censored"], high["low"], high["high"]) == ("right", LADDER[-1], math.inf)


def test_non_monotone_outcomes_are_bracketed_above_the_last_failure_and_reported():
    # Two criteria on the same runs: the first probes low widths, where the second has a
    # chance success (at ladder index 5) below its failures; the search never assumes the
    # second monotone and stops only when the analysis' own interval is at the resolution.
    fluke = 5
    oracle = {"k": lambda i: (i >= 3, i >= 30 or i == fluke)}
    search, rounds = _search({"k": LADDER}, oracle)
    probed = [i for r in rounds for _, i in r]
    assert len(probed) == len(set(probed)) and fluke in probed
    first, second = _intervals(search, "k", 0), _intervals(search, "k", 1)
    assert (first["low"], first["high"]) == (LADDER[2], LADDER[3])
    assert (second["low"], second["high"]) == (LADDER[29], LADDER[30])
    assert second["non_monotone"] and not first["non_monotone"]


def test_a_search_replayed_on_its_outcomes_makes_the_same_decisions():
    rng = np.random.default_rng(1)
    flips = {i: bool(rng.random() < 0.5) for i in range(len(LADDER))}  # noisy, not monotone
    oracle = {"a": lambda i: (flips[i],), "b": lambda i: (i >= 17,)}
    ladders = {"a": LADDER, "b": LADDER}
    first = _search(ladders, oracle)[1]
    assert _search(ladders, oracle)[1] == first


def test_a_failed_run_ends_its_conditions_search_and_decide_never_repeats_a_probe():
    assert decide(LADDER, {10: None}, 4.0) is None
    rng = np.random.default_rng(2)
    for _ in range(200):  # arbitrary outcome histories: the next probe is always new
        seen = {int(i): bool(rng.random() < 0.5) for i in rng.choice(len(LADDER), 6)}
        nxt = decide(LADDER, seen, 4.0)
        assert nxt is None or nxt not in seen


def test_each_probe_is_the_rung_nearest_its_target_in_log_scale():
    """Bisection (the next probe is the rung nearest the bracket's geometric middle) and the
    coarse steps (the rung nearest a factor ``coarse_ratio`` away), against a scan of every
    rung; ties go to the lower rung."""
    ladder = [2, 4, 6, 8, 12, 16, 18, 32, 64, 128]

    def nearest(target, lo, hi):
        return min(range(lo, hi + 1), key=lambda i: (abs(math.log(ladder[i] / target)), i))

    last = len(ladder) - 1
    assert decide(ladder, {}, 4.0) == nearest(math.sqrt(2 * 128), 0, last)
    for f in range(last):
        assert decide(ladder, {f: False}, 4.0) == nearest(ladder[f] * 4.0, f + 1, last)
        assert decide(ladder, {f + 1: True}, 4.0) == (
            None if f + 1 == 0 else nearest(ladder[f + 1] / 4.0, 0, f)
        )
        for s in range(f + 2, last + 1):
            middle = math.sqrt(ladder[f] * ladder[s])
            assert decide(ladder, {f: False, s: True}, 4.0) == nearest(middle, f + 1, s - 1)
    assert decide(ladder, {5: False, 7: True}, 4.0) == 6  # a one-rung bracket
    assert decide([2, 4, 8], {}, 4.0) == 1  # sqrt(2 * 8) = 4 exactly
    assert decide([2, 8], {}, 4.0) == 0  # 4 is as near 2 as 8 in log scale: the lower


def test_criteria_come_from_the_experiments_threshold_claims():
    found = criteria(ntk.CLAIMS, "m", None)  # width_threshold and _lambda share theirs
    assert [(c.quantity, c.level) for c in found] == [("ntk_margin", 1.0), ("fit_margin", 1.0)]
    assert criteria(ntk.CLAIMS, "m", ["fit_threshold"])[0].quantity == "fit_margin"
    with pytest.raises(ValueError, match="weight_movement"):
        criteria(ntk.CLAIMS, "m", ["weight_movement"])
    # A search of m*'s criterion does not bracket m_fit's; one of every criterion leaves none.
    assert list(unsearched(ntk.CLAIMS, "m", ["width_threshold"])) == ["fit_threshold"]
    assert list(unsearched(ntk.CLAIMS, "m", ["fit_threshold"])) == [
        "width_threshold",
        "width_threshold_lambda",
    ]
    assert unsearched(ntk.CLAIMS, "m", None) == {}


def test_with_an_anchor_the_first_round_also_probes_every_ladders_upper_bound():
    ladders = {"a": LADDER, "b": LADDER[:20]}
    search = Search(ladders, 1, 4.0, anchor=True)
    first = search.next_round()
    assert ("a", len(LADDER) - 1) in first and ("b", 19) in first and len(first) == 4
    # Both fail there: right-censored at once, one round.
    for key, i in first:
        search.observe(key, i, [False])
    assert search.next_round() == []
    assert estimate(ladders, 1, 4.0, anchor=True).rounds[0] == 1


def test_the_probe_bounds_hold_what_any_monotone_search_trains():
    ladders = {(n, 0): LADDER for n in (8, 128)}

    def weight(key, i):
        return key[0] * LADDER[i]  # a run costs like n m

    low, high = probe_bounds(ladders, 1, 4.0, False, weight)
    for key, ladder in ladders.items():
        spent, costs = set(), []
        for threshold in range(len(ladder) + 1):
            _, rounds = _search({key: ladder}, {key: lambda i, t=threshold: [i >= t]})
            probed = {i for probes in rounds for _, i in probes}
            costs.append(sum(weight(key, i) for i in probed))
            spent |= probed
        # Both bounds are what one search probes, and every search costs between them.
        assert min(costs) == sum(weight(key, i) for i in low[key])
        assert max(costs) == sum(weight(key, i) for i in high[key])
        assert set(high[key]) <= spent  # rungs some search probes, not the whole ladder
        assert len(high[key]) < len(ladder) / 3
        assert set(low[key]) != set(high[key])
    two_low, two = probe_bounds(ladders, 2, 4.0, False, weight)  # two criteria
    assert all(set(high[key]) < set(two[key]) for key in ladders)  # two positions' probes
    assert two_low == low  # both criteria may stop where one does
    key = (128, 0)  # every joint position of the two thresholds: the search itself, brute force
    costs = []
    for first in range(len(LADDER) + 1):
        for second in range(first, len(LADDER) + 1):
            oracle = {key: lambda i, a=first, b=second: [i >= a, i >= b]}
            _, rounds = _search({key: LADDER}, oracle)
            costs.append(sum(weight(key, i) for i in {i for probes in rounds for _, i in probes}))
    assert max(costs) == sum(weight(key, i) for i in two[key])


def test_given_recorded_rounds_the_bounds_hold_what_the_search_has_left():
    ladders = {(n, 0): LADDER for n in (8, 128)}

    def weight(key, i):
        return key[0] * LADDER[i]

    _, everything = probe_bounds(ladders, 1, 4.0, False, weight)
    for threshold in (3, 20, len(LADDER)):  # low, in the middle, above the ladder
        oracle = {key: lambda i, t=threshold: [i >= t] for key in ladders}
        _, rounds = _search(ladders, oracle)
        replay = Search(ladders, 1, 4.0)
        for r in range(len(rounds) + 1):
            known = {key: dict(seen) for key, seen in replay.seen.items()}
            low, high = probe_bounds(ladders, 1, 4.0, False, weight, known)
            for key in ladders:
                left = {i for probes in rounds[r:] for k, i in probes if k == key}
                cost = sum(weight(key, i) for i in left)
                assert sum(weight(key, i) for i in low[key]) <= cost
                assert cost <= sum(weight(key, i) for i in high[key])
                assert set(high[key]).isdisjoint(known.get(key, {}))  # read back, not trained
                if r:  # what the rounds saw rules threshold positions out
                    assert set(high[key]) != set(everything[key])
            fewest, most = replay.left()
            assert fewest <= sum(len(probes) for probes in rounds[r:]) <= most
            if r < len(rounds):
                assert replay.next_round() == rounds[r]
                for key, i in rounds[r]:
                    replay.observe(key, i, oracle[key](i))
        assert replay.left() == (0, 0)


def test_two_searches_of_one_ladder_are_two_plans():
    # grid.anchor, grid.claims and grid.coarse_ratio change what a search trains, not its
    # ladder: two such searches under one name were recorded as one sweep, the first's config.
    from sdyn.plan import plan
    from sdyn.tracking.sweeps import plan_digest

    base = ["+grid=threshold", "grid.seeds=1", "grid.n=[32,64]"]
    plans = [
        plan(base),
        plan([*base, "grid.anchor=false"]),
        plan([*base, "grid.coarse_ratio=8"]),
        plan([*base, "grid.claims=[fit_threshold]"]),
    ]
    assert all(p.hashes == plans[0].hashes for p in plans)  # one ladder
    assert len({plan_digest(p.hashes, p.probes) for p in plans}) == 4
    fixed = plan(["+grid=width", "grid.seeds=1"])
    assert fixed.probes == "" and plan_digest(fixed.hashes, fixed.probes) == plan_digest(
        fixed.hashes
    )


def test_a_search_plan_lists_the_claims_its_most_probes_could_never_decide(tmp_path, monkeypatch):
    # The plan judged the claims on the whole ladder (80 runs) while the search probes at most
    # 24: the bound claims, which need 36, were not listed, and the report then said so.
    from sdyn import preview
    from sdyn.plan import plan

    monkeypatch.chdir(tmp_path)  # no store here: nothing recorded
    p = plan(["+grid=threshold", "grid.seeds=1", "grid.n=[8,16]", "experiment.steps=200"])
    assert len(p.runs) == 80 and p.search.estimate().runs[1] == 24
    text = preview.show_plan(p)
    assert "weight_movement: 24 planned runs can never place the share above the bound" in text
    assert list(tmp_path.iterdir()) == []
