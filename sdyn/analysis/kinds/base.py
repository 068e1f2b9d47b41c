"""The base of sdyn's claim kinds: the standard selection, judgment, slack and interval naming
that a kind overrides only where its measurement differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sdyn.api import Claim

if TYPE_CHECKING:
    import pandas as pd

    from sdyn.analysis.fits import Fit
    from sdyn.analysis.verdict import Slack


@dataclass(frozen=True, kw_only=True)
class KindBase(Claim):
    """:class:`sdyn.api.Claim` with the standard rules: the runs meeting ``where`` (at the
    middle of ``at_middle``, the largest of ``at_largest``), judged by
    :func:`sdyn.analysis.verdict.judge` (the kind's evidence rule, an interval at float64's
    resolution read as exact, the interval against the theory), the slack as a difference in
    the units of ``theory``, the interval named by :func:`sdyn.analysis.verdict.interval_name`.
    A kind subclasses it and implements ``measure`` and ``draw`` (and ``example`` and
    ``synthetic`` to be held to the referee).

    ``RESOLUTION_FLOOR``: the magnitude below which the value's float64 resolution is absolute
    (1 for an exponent, whose value near 0 is resolved to about 1e-9, not relatively; 0 for a
    rate or a ratio, resolved relative to their size)."""

    RESOLUTION_FLOOR: ClassVar[float] = 0.0

    def select(self, runs: pd.DataFrame) -> pd.DataFrame:
        from sdyn.analysis import rows

        chosen = rows.select(runs, self.where, self.at_middle)
        if self.at_largest and not chosen.empty:
            chosen = chosen[chosen[self.at_largest] == chosen[self.at_largest].max()]
        return chosen

    def judge(self, fit: Fit, theory: float, points, *, notes) -> tuple[str, str]:
        from sdyn.analysis import verdict

        return verdict.judge(self, fit, theory)

    def slack(self, fit: Fit, theory: float) -> Slack | None:
        from sdyn.analysis import verdict

        return verdict.slack(fit, theory, self.direction, self.RESOLUTION_FLOOR)

    def interval_name(self, fit: Fit) -> str:
        from sdyn.analysis import verdict

        return verdict.interval_name(fit, self.RESOLUTION_FLOOR)
