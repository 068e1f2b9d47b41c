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
) -> tuple[float, float] | None:
    """Choose the fit window of ``fit_geometric_rate`` (see its docstring): ``(t_start, t_end)``,
    or None when ``log y`` is constant on every window.

    Sums over every window (and over parts of it) come from cumulative sums per distinct t, so
    each start costs one vectorised pass over the possible ends.
    """
    distinct, index = np.unique(t, return_inverse=True)
    u = (distinct - distinct.mean()) / distinct.std()  # conditioning only: slopes just rescale
    y = log_y - log_y.mean()
    count = np.bincount(index).astype(float)
    sum_y = np.bincount(index, y)
    sums = _WindowSums(
        u,
        sum_y / count,
        count,
        [
            np.concatenate([[0.0], np.cumsum(a)])
            for a in (count, count * u, count * u * u, sum_y, np.bincount(index, y * y), u * sum_y)
        ],
    )
    sigma = noise_std(t, log_y, codes)
    if not np.isfinite(sigma):
        notes.append("noise level not estimable: window chosen on R^2 alone")
    # Expected residual sum of squares per residual degree of freedom (0: use R^2 as is).
    noise_variance = sigma**2 if np.isfinite(sigma) else 0.0
    # A window whose log y varies less than this (relative) is flat: R^2 is rounding noise.
    flat = 1e-12 * float(y @ y)
    # Per criterion, the best window so far as (span, start index, end index).
    longest = {"r2 and linear": None, "linear": None}
    best_r2 = None  # (r2, start index, end index)
    for i in range(distinct.size - 1):
        ends = np.arange(i + 1, distinct.size)
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
            linear = sums.looks_linear(i, ends, window, sigma)
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
                span = distinct[end] - distinct[i]
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
    return float(distinct[i]), float(distinct[j])


@dataclass(frozen=True)
class _Moments:
    """Centred sums of the rows of some windows (arrays over the windows)."""

    n: np.ndarray
    u_bar: np.ndarray
    y_bar: np.ndarray
    s_xx: np.ndarray
    s_xy: np.ndarray
    s_yy: np.ndarray

    @property
    def slope(self) -> np.ndarray:
        return self.s_xy / self.s_xx


@dataclass(frozen=True)
class _WindowSums:
    """Cumulative sums over the distinct t values, for O(1) window statistics."""

    u: np.ndarray  # distinct t, centred and scaled
    y_mean: np.ndarray  # mean log y at each distinct t
    count: np.ndarray  # rows at each distinct t
    cumulative: list[np.ndarray]  # n, sum u, sum u^2, sum y, sum y^2, sum u*y; leading 0

    def of(self, first: np.ndarray | int, last: np.ndarray | int) -> _Moments:
        """Moments of the rows whose distinct-t index lies in [first, last]."""
        n, s_u, s_uu, s_y, s_yy, s_uy = (c[last + 1] - c[first] for c in self.cumulative)
        return _Moments(
            n, s_u / n, s_y / n, s_uu - s_u * s_u / n, s_uy - s_u * s_y / n, s_yy - s_y * s_y / n
        )

    def looks_linear(
        self, start: int, ends: np.ndarray, window: _Moments, sigma: float
    ) -> np.ndarray:
        """Whether windows [start, end] show no bend at their ends, given noise std ``sigma``.

        Two checks, each at ``ENDS_Z`` standard errors (computed from ``sigma``), plus a
        relative slack for rounding:

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
        for edge in (np.full(ends.size, start), ends):
            residual = (
                self.y_mean[edge] - window.y_bar - window.slope * (self.u[edge] - window.u_bar)
            )
            variance = (
                1 / self.count[edge]
                - 1 / window.n
                - (self.u[edge] - window.u_bar) ** 2 / window.s_xx
            )
            within = np.abs(residual) <= ENDS_Z * sigma * np.sqrt(np.maximum(variance, 0)) + slack
            agree &= (size < 3) | within
        third = size // 3
        parts = [
            self.of(start, start + third - 1),
            self.of(start + third, ends - third),
            self.of(ends - third + 1, ends),
        ]
        head, middle, tail = parts
        for outer in (head, tail):
            error = sigma * np.sqrt(1.0 / outer.s_xx + 1.0 / middle.s_xx)
            within = np.abs(outer.slope - middle.slope) <= ENDS_Z * error + slack
            agree &= (third < 2) | within
        return agree
