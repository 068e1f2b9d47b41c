"""The synthetic referee: one battery of cases with known answers, run against any claim kind.

As scikit-learn's ``check_estimator`` runs one battery against any estimator, :func:`check_kind`
runs these against a claim kind, sdyn's or a plugin's. The kind supplies a claim on synthetic
columns and a true value its theory allows and one it does not
(:meth:`~sdyn.api.Claim.example`), and draws sweeps with a given true value
(:meth:`~sdyn.api.Claim.synthetic`); the referee judges them and says what it would strike:

* **decides**: ample evidence with the true value well inside reads "consistent", well
  outside "violated";
* **no value resolves**: a quantity that is NaN in every run reads "not measured", never a
  ``nan`` row;
* **outside assumptions**, **a figure's statement outside its setting**: runs that miss an
  assumption, or the figure's setting, read "outside assumptions" (the figure named);
* **derived**: a claim restating another's evidence reads "derived", never a second verdict;
* **exact data**: noise-free runs give an interval no one may call a 95% CI: where it is
  narrower than float64's resolution it is named exact (or a bracket, or a count);
* **too few runs to ever decide**: one seed at two values is named by ``--plan``'s
  :func:`~sdyn.analysis.claims.limits` and never reads consistent or violated;
* **coverage at the least evidence**: sweeps whose true value is the theory's own bound, each
  with the fewest seeds that ``--plan`` accepts, decide (consistent or violated) about as
  often as a 95% interval excludes its true value: in at most :data:`COVERAGE_LIMIT` of
  :data:`TRIALS` trials, or the interval is narrower than the data allow;
* **the plot**: draws the claim's points, names every interval by what it is, and draws the
  theory.

Example::

    from sdyn.analysis import referee
    from sdyn.analysis.kinds import PowerLaw

    referee.check_kind(PowerLaw)  # raises AssertionError listing what a referee would strike
"""

from __future__ import annotations

import dataclasses
import math

import matplotlib

matplotlib.use("Agg")  # the referee draws to memory, also on machines without a display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from sdyn.analysis.claims import ClaimResult, evaluate, limits  # noqa: E402
from sdyn.analysis.verdict import RESOLUTION  # noqa: E402
from sdyn.api import Assumption, Claim, PaperFigure  # noqa: E402

# The column every synthetic run gets, which the referee's assumptions test (its value: 0).
FLAG = "experiment.referee_flag"
# The cases' sizes: ample evidence (48 runs: enough for a bound with delta = 0.1), and too
# little to ever decide (a kind on curves draws one run per seed, whatever the levels).
AMPLE = {"seeds": 8, "levels": 6}
TOO_FEW = {"seeds": 1, "levels": 2}
NOISE = 0.05
# The coverage case: trials at the theory's bound with the least evidence (the fewest seeds
# at LEAST_LEVELS values that --plan accepts). A 95% interval excludes the truth in about 5%
# of them (binomial: more than 8 of 80 has probability 0.02); more is struck.
TRIALS = 80
COVERAGE_LIMIT = 0.1
LEAST_LEVELS = 4


def check_kind(kind: type[Claim], *, seed: int = 0, trials: int = TRIALS) -> None:
    """Run the battery against ``kind`` (module docstring); ``trials`` sweeps for the
    coverage case.

    Raises:
        AssertionError: one line per case a referee would strike, naming the case, the
            verdicts the kind gave and the reasons.
        NotImplementedError: the kind does not implement ``example`` or ``synthetic``.
    """
    claim, inside, outside = kind.example()
    rng = np.random.default_rng(seed)
    struck: list[str] = []

    def judged(claim: Claim, truth: float, *, noise=NOISE, size=AMPLE, edit=None):
        runs, curves = claim.synthetic(truth, noise=noise, rng=rng, **size)
        runs = runs.assign(**{FLAG: 0})
        if edit is not None:
            runs, curves = edit(runs, curves)
        results = evaluate(claim, runs, curves)
        struck.extend(_invariants(claim, results))
        return runs, results

    def expect(case: str, results: list[ClaimResult], allowed: set[str], words: str = ""):
        for r in results:
            if r.verdict not in allowed or words not in r.reason:
                struck.append(
                    f"{kind.kind}: {case}: {r.label} reads {r.verdict!r} ({r.reason}); a "
                    f"referee expects {' or '.join(sorted(allowed))}"
                    + (f" naming {words!r}" if words else "")
                )

    expect("true value inside the theory", judged(claim, inside)[1], {"consistent"})
    expect("true value outside the theory", judged(claim, outside)[1], {"violated"})
    expect("no value resolves", judged(claim, inside, edit=_unresolved(claim))[1], {"not measured"})
    assumed = Assumption(FLAG, "==", 1, "the referee's setting has flag 1")
    runs, results = judged(dataclasses.replace(claim, assumptions=(assumed,)), inside)
    expect("runs outside its assumptions", results, {"outside assumptions"})
    figure = PaperFigure("Fig. 9", (Assumption(FLAG, "==", 1, "Fig. 9 has flag = 1"),))
    results = judged(dataclasses.replace(claim, figure=figure), inside)[1]
    expect("a figure's statement outside its setting", results, {"outside assumptions"}, "Fig. 9")
    results = judged(dataclasses.replace(claim, derived_from="another"), inside)[1]
    expect("a quantity derived from another claim's", results, {"derived"})
    expect("exact data", judged(claim, inside, noise=0.0)[1], {"consistent"})
    runs, results = judged(claim, inside, size=TOO_FEW)
    expect(
        "too few runs to ever decide",
        results,
        {"inconclusive", "not measured"},
    )
    if not limits([claim], _planned(runs), grid=""):
        struck.append(f"{kind.kind}: too few runs to ever decide: --plan does not say so")
    for r in judged(claim, inside)[1]:
        struck.extend(_plot(claim, r))
    size = _least_evidence(claim, inside, rng)
    if size is None:
        struck.append(f"{kind.kind}: --plan accepts no sweep of up to 64 seeds: none can decide")
    else:
        # A claim with a tolerance may read consistent at its bound; only violated is wrong.
        wrong = {"violated"} if claim.tolerance else {"consistent", "violated"}
        verdicts = [
            r.verdict for _ in range(trials) for r in judged(claim, claim.theory, size=size)[1]
        ]
        decided = sum(v in wrong for v in verdicts) / len(verdicts)
        if decided > COVERAGE_LIMIT:
            struck.append(
                f"{kind.kind}: true value at the theory's bound {claim.theory:g}, the least "
                f"evidence ({size['seeds']} seeds at {size['levels']} values): {decided:.0%} of "
                f"{len(verdicts)} verdicts read {' or '.join(sorted(wrong))}, where a 95% "
                "interval excludes its truth in about 5%: the interval is narrower than the "
                "data allow"
            )
    if struck:
        raise AssertionError("\n".join(struck))


def _least_evidence(claim: Claim, truth: float, rng) -> dict[str, int] | None:
    """The fewest seeds at :data:`LEAST_LEVELS` values whose plan ``--plan`` accepts."""
    for seeds in range(2, 65):
        size = {"seeds": seeds, "levels": LEAST_LEVELS}
        runs, _ = claim.synthetic(truth, noise=NOISE, rng=rng, **size)
        if not limits([claim], _planned(runs), grid=""):
            return size
    return None


def _planned(runs: pd.DataFrame) -> pd.DataFrame:
    """What ``--plan`` sees of synthetic runs: their config columns and seeds, no outcome."""
    return runs[[c for c in runs if c.startswith(("experiment.", "data.")) or c == "seed"]]


def _unresolved(claim: Claim):
    """An edit that makes the claim's quantity NaN in every run and curve."""

    def edit(runs: pd.DataFrame, curves: pd.DataFrame | None):
        if claim.quantity in runs:
            runs = runs.assign(**{claim.quantity: math.nan})
        if curves is not None and claim.quantity in curves:
            curves = curves.assign(**{claim.quantity: math.nan})
        return runs, curves

    return edit


def _invariants(claim: Claim, results: list[ClaimResult]) -> list[str]:
    """What must hold of every result: no row without a value but "not measured"; no interval
    narrower than float64 resolution called a confidence interval."""
    out = []
    for r in results:
        fit = r.fit
        ends = [b for b in (fit.value, fit.ci_low, fit.ci_high) if math.isfinite(b)]
        if not ends and r.verdict != "not measured":
            out.append(f"{claim.kind}: {r.label} has no value but reads {r.verdict!r}")
        narrow = len(ends) == 3 and fit.ci_high - fit.ci_low <= RESOLUTION * max(map(abs, ends))
        if narrow and r.interval.endswith("CI"):
            out.append(
                f"{claim.kind}: {r.label}'s interval [{fit.ci_low}, {fit.ci_high}] is "
                f"below float64 resolution and called a {r.interval}"
            )
    return out


def _plot(claim: Claim, result: ClaimResult) -> list[str]:
    """The claim's plot draws data, names each interval by what it is, and draws the theory."""
    fig, ax = plt.subplots()
    try:
        claim.draw(ax, [(None, result)])
        labels = ax.get_legend_handles_labels()[1]
    finally:
        plt.close(fig)
    out = []
    if not ax.has_data():
        out.append(f"{claim.kind}: the plot of {result.label} draws nothing")
    if result.interval != "95% CI" and any("95% CI [" in label for label in labels):
        out.append(f"{claim.kind}: the plot calls a {result.interval} interval a 95% CI")
    if not any(label.startswith(("theory", "the bound")) for label in labels):
        out.append(f"{claim.kind}: the plot of {result.label} does not draw the theory")
    return out
