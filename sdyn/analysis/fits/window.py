"""The fit window of :func:`sdyn.analysis.fits.rate.fit_geometric_rate`: the longest stretch of
the curves on which ``log y`` is linear in ``t``, with no bend at its ends."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

# Standard errors by which a window's ends may depart from its line (_WindowSums.looks_linear).
ENDS_Z = 1.96
# How much a window's slope of log y may change from its first step to its last (relative) and
# still be read as one rate, where no window without drift falls enough (select_window's
# min_fall): a noise-free curve (full-batch GD) resolves any drift of its rate. 10% bounds the
# fitted rate's bias from such a drift to about 5% of its slope.
RATE_DRIFT = 0.1


def noise_std(t: np.ndarray, log_y: np.ndarray, codes: np.ndarray) -> float:
    """Robust std of the noise in log y, from the curves' local curvature.

    Pseudo-residuals (Gasser, Sroka & Jennen-Steinmetz, Biometrika 1986): each point's
    deviation from the straight line through its two neighbours in t on the same curve, scaled
    to the noise std. A smooth trend (linear or slowly bending) cancels out, so this measures
    noise without knowing the window; the MAD makes the few points at sharp bends harmless.
    Repeated (group, t) rows are averaged first, and their mean's smaller variance is allowed
    for. Returns NaN when no curve has 3 distinct t.
    """
    curves = pd.Series(log_y).groupby([codes, t]).agg(["mean", "size"])
    group = curves.index.get_level_values(0).to_numpy()
    tt = curves.index.get_level_values(1).to_numpy(dtype=float)
    yy, size = curves["mean"].to_numpy(), curves["size"].to_numpy(dtype=float)
    same = (group[:-2] == group[1:-1]) & (group[1:-1] == group[2:])
    if not same.any():
        return math.nan
    left, right = (tt[1:-1] - tt[:-2])[same], (tt[2:] - tt[1:-1])[same]
    w_prev, w_next = right / (left + right), left / (left + right)
    pseudo = yy[1:-1][same] - w_prev * yy[:-2][same] - w_next * yy[2:][same]
    pseudo /= np.sqrt(
        1.0 / size[1:-1][same] + w_prev**2 / size[:-2][same] + w_next**2 / size[2:][same]
    )
    return float(np.median(np.abs(pseudo)) / stats.norm.ppf(0.75))


def select_window(
    t: np.ndarray,
    log_y: np.ndarray,
    codes: np.ndarray,
    min_points: int,
    r2_min: float,
    notes: list[str],
    min_fall: float | None = None,
) -> tuple[float, float, float] | None:
    """Choose the fit window of ``fit_geometric_rate`` (see its docstring): ``(t_start, t_end,
    drift)``, or None when ``log y`` is constant on every window.

    With ``min_fall``, a window over which y falls by less than that factor (on its fitted
    line) is chosen again with the rate allowed to drift by :data:`RATE_DRIFT` of itself across
    it (``drift``; noted): a noise-free curve shows any drift of its rate, and its window
    without drift may be its last few steps. Where a window without drift falls by
    ``min_fall``, it stands (``drift`` 0): an exact geometric tail is read exactly.

    Sums over every window (and over parts of it) come from cumulative sums per distinct t, so
    each start costs one vectorised pass over the possible ends.
    """
    distinct, index = np.unique(t, return_inverse=True)
    u = (distinct - distinct.mean()) / distinct.std()  # conditioning only: slopes just rescale
    y = log_y - log_y.mean()
    count = np.bincount(index).astype(float)
    sum_y = np.bincount(index, y)
    sums = _WindowSums(
        distinct,
        u,
        sum_y / count,
        count,
        [
            np.concatenate([[0.0], np.cumsum(a)])
            for a in (
                count,
                count * u,
                count * u * u,
                count * u**3,
                sum_y,
                np.bincount(index, y * y),
                u * sum_y,
            )
        ],
    )
    sigma = noise_std(t, log_y, codes)
    if not np.isfinite(sigma):
        notes.append("noise level not estimable: window chosen on R^2 alone")
    # A window whose log y varies less than this (relative) is flat: R^2 is rounding noise.
    flat = 1e-12 * float(y @ y)
    said: list[str] = []
    chosen, drift = _longest(sums, sigma, flat, min_points, r2_min, 0.0, said), 0.0
    if chosen is not None and min_fall is not None:
        fall = abs(sums.of(*chosen).slope) * (u[chosen[1]] - u[chosen[0]])
        if fall < math.log(min_fall):
            drifting: list[str] = []
            wider = _longest(sums, sigma, flat, min_points, r2_min, RATE_DRIFT, drifting)
            if wider != chosen:
                chosen, drift, said = wider, RATE_DRIFT, drifting
                said.append(
                    f"no window without drift falls by {min_fall:g}: the rate may drift by "
                    f"{RATE_DRIFT:.0%} across this one"
                )
    notes += said
    if chosen is None:
        return None
    return float(sums.t[chosen[0]]), float(sums.t[chosen[1]]), drift


def _longest(
    sums: _WindowSums,
    sigma: float,
    flat: float,
    min_points: int,
    r2_min: float,
    drift: float,
    notes: list[str],
) -> tuple[int, int] | None:
    """The window :func:`select_window` chooses, as (start, end) indices into the distinct t:
    the longest with a credible R^2 and no bend at its ends (a slope drifting by ``drift`` of
    itself across the window counting as none where the noise is smaller), else the longest
    without a bend, else the best R^2 (``notes`` says which); None when log y is flat on every
    window."""
    size = sums.u.size
    # Expected residual sum of squares per residual degree of freedom (0: use R^2 as is).
    noise_variance = sigma**2 if np.isfinite(sigma) else 0.0
    # Per criterion, the best window so far as (span, start index, end index).
    longest = {"r2 and linear": None, "linear": None}
    best_r2 = None  # (r2, start index, end index)
    for i in range(size - 1):
        ends = np.arange(i + 1, size)
        window = sums.of(i, ends)
        with np.errstate(divide="ignore", invalid="ignore"):
            explained = window.s_xy**2 / window.s_xx
            r2 = explained / window.s_yy
            # At least 3 distinct t: a line through two values of t shows no decay law.
            r2[(window.n < min_points) | (ends - i < 2) | (window.s_yy <= flat)] = np.nan
            # R^2 with the residual variance never below the noise level, so that a short
            # window whose few points happen to line up does not pass by luck.
            residual = np.maximum(window.s_yy - explained, (window.n - 2) * noise_variance)
            credible_r2 = np.where(np.isnan(r2), np.nan, explained / (explained + residual))
            linear = sums.looks_linear(i, ends, window, sigma, drift)
        if np.isnan(r2).all():
            continue
        j = int(np.nanargmax(r2))
        if best_r2 is None or r2[j] > best_r2[0]:
            best_r2 = (r2[j], i, ends[j])
        for key, good in (
            ("r2 and linear", (credible_r2 >= r2_min) & linear),
            ("linear", ~np.isnan(r2) & linear),
        ):
            good = np.flatnonzero(good)
            if good.size:
                end = ends[good[-1]]
                span = sums.t[end] - sums.t[i]
                # ">=": on equal spans the later start wins.
                if longest[key] is None or span >= longest[key][0]:
                    longest[key] = (span, i, end)
    if longest["r2 and linear"] is not None:
        _, i, j = longest["r2 and linear"]
    elif longest["linear"] is not None:
        _, i, j = longest["linear"]
        notes.append(
            f"no window reached R^2 >= {r2_min}; used the longest without a detectable bend"
        )
    elif best_r2 is not None:
        _, i, j = best_r2
        notes.append(f"no window reached R^2 >= {r2_min} or looked linear; used the best R^2")
    else:
        return None
    return int(i), int(j)


@dataclass(frozen=True)
class _Moments:
    """Centred sums of the rows of some windows (arrays over the windows)."""

    n: np.ndarray
    u_bar: np.ndarray
    y_bar: np.ndarray
    s_xx: np.ndarray
    s_xxx: np.ndarray
    s_xy: np.ndarray
    s_yy: np.ndarray

    @property
    def slope(self) -> np.ndarray:
        return self.s_xy / self.s_xx

    @property
    def square_slope(self) -> np.ndarray:
        """The OLS slope of u^2 on u over the rows: what a log y of ``u^2`` fits as its slope."""
        return 2 * self.u_bar + self.s_xxx / self.s_xx


@dataclass(frozen=True)
class _WindowSums:
    """Cumulative sums over the distinct t values, for O(1) window statistics."""

    t: np.ndarray  # distinct t
    u: np.ndarray  # distinct t, centred and scaled
    y_mean: np.ndarray  # mean log y at each distinct t
    count: np.ndarray  # rows at each distinct t
    # n, sum u, sum u^2, sum u^3, sum y, sum y^2, sum u*y; each with a leading 0
    cumulative: list[np.ndarray]

    def of(self, first: np.ndarray | int, last: np.ndarray | int) -> _Moments:
        """Moments of the rows whose distinct-t index lies in [first, last]."""
        n, s_u, s_uu, s_uuu, s_y, s_yy, s_uy = (c[last + 1] - c[first] for c in self.cumulative)
        u_bar = s_u / n
        return _Moments(
            n,
            u_bar,
            s_y / n,
            s_uu - s_u * u_bar,
            s_uuu - 3 * u_bar * s_uu + 2 * u_bar**2 * s_u,
            s_uy - s_u * s_y / n,
            s_yy - s_y * s_y / n,
        )

    def looks_linear(
        self, start: int, ends: np.ndarray, window: _Moments, sigma: float, drift: float
    ) -> np.ndarray:
        """Whether windows [start, end] show no bend at their ends, given noise std ``sigma``.

        Two checks, each at ``ENDS_Z`` standard errors (computed from ``sigma``) or, where
        that is less, at what a slope drifting steadily by ``drift`` of itself across the
        window would show (log y quadratic in t), plus a relative slack for rounding:

        * edges (3 or more distinct t): the mean log y at the first and at the last t lies on
          the window's line. A window running even one step into a plateau puts a whole step's
          drop there, while the slope error that step causes is a fraction of it;
        * thirds (6 or more distinct t): the slopes of the first and last thirds (L // 3
          distinct t each) agree with that of the middle rest. This catches smooth bends whose
          deviation is spread over many steps, also when both ends bend the same way.

        Shorter windows, or a NaN ``sigma``, pass untested.
        """
        size = ends - start + 1
        agree = np.ones(ends.size, dtype=bool)
        if not np.isfinite(sigma):
            return agree
        slack = 1e-8 * (np.abs(window.slope) + np.abs(window.y_bar) + 1.0)
        # log y = curvature * u^2 + line: its slope changes by drift |slope| across.
        curvature = drift * np.abs(window.slope) / (2 * (self.u[ends] - self.u[start]))
        for edge in (np.full(ends.size, start), ends):
            offset = self.u[edge] - window.u_bar
            residual = self.y_mean[edge] - window.y_bar - window.slope * offset
            variance = 1 / self.count[edge] - 1 / window.n - offset**2 / window.s_xx
            bound = ENDS_Z * sigma * np.sqrt(np.maximum(variance, 0))
            if drift:  # the residual of u^2 at the edge from its OLS line through the window
                bend = offset**2 - window.s_xx / window.n - window.s_xxx / window.s_xx * offset
                bound = np.maximum(bound, curvature * np.abs(bend))
            agree &= (size < 3) | (np.abs(residual) <= bound + slack)
        third = size // 3
        parts = [
            self.of(start, start + third - 1),
            self.of(start + third, ends - third),
            self.of(ends - third + 1, ends),
        ]
        head, middle, tail = parts
        for outer in (head, tail):
            bound = ENDS_Z * sigma * np.sqrt(1.0 / outer.s_xx + 1.0 / middle.s_xx)
            if drift:
                bend = np.abs(outer.square_slope - middle.square_slope)
                bound = np.maximum(bound, curvature * bend)
            agree &= (third < 2) | (np.abs(outer.slope - middle.slope) <= bound + slack)
        return agree
