"""One iteration of :func:`~.descent.gd_iteration` on a GPU as four Triton kernels that never
store the ``(n, m)`` logits: each kernel recomputes ``Z = X W`` where the compiled step writes Z
and the gradient factor G to memory and reads them back. The three products (``Z = X W``, the
outputs ``S a^T`` with the softmax's sums, and the gradient ``X^T G``) are ``tl.dot``: on an
A100, H100 or H200 (sm_80, sm_90) float64 matrix instructions (DMMA) on the tensor cores, which
also do the sums over neurons and over points (elsewhere, e.g. sm_89, Triton multiplies on the
FP64 vector units). The one reduction across threads left in a loop is the softmax's maximum.

The iteration, for every run b of a bundle at once (Claim 3.4, Def. 3.5):

1. :func:`_partials`, one program per (run, block of points, segment of neurons), looping
   over the segment in chunks of neurons (:class:`Blocks` gives their sizes): per point, the
   segment's ``sum_r phi(z_ir) a_lr`` and, for softmax, its maximum logit ``c_i`` and
   ``sum_r phi(z_ir)``, with ``phi(z) = exp(z - c_i)``.
2. :func:`_outputs`, one program per (run, block of points): the segments' partials summed into
   ``F = m S a^T``, the residual ``R = F - Y`` and ``<R, F>/m``; the block's share of the loss.
3. :func:`_status`, one program: the loss ``L(t)``, the run's status (as gd_iteration decides
   it) and its step size, 0 once it stopped; the step counter ``t`` advances.
4. :func:`_gradient_step`, one program per (run, block of neurons), looping over points in
   chunks: ``g_ir = m S_ir (sum_l R_il a_lr - <R_i, F_i>/m)``, ``grad_r = sum_i g_ir x_i``
   and ``w_r <- w_r - eta grad_r``.

The softmax as the online softmax computes it: _partials keeps each point's running maximum
over the chunks of its segment and rescales its sums when the maximum grows, _outputs merges
the segments at the row's maximum, and _gradient_step reads ``S_ir = exp(z_ir - lse_i)`` with
``lse_i`` the row's log-sum-exp, so no exponential exceeds 1 however far the logits move.

A packed bundle (:class:`~.network.Pack`) passes each run's width and sample size: a program
skips whole blocks of padded neurons or points, and padding inside a block adds zero (its
inputs, weights and residuals are loaded as 0), where gd_iteration masks instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import astuple, dataclass, fields

import triton
import triton.language as tl

from sdyn.experiments.ntk.bundling import FUSED_SEGMENT
from sdyn.experiments.ntk.config import ACTIVATIONS

# A tl.dot's inner dimension must be at least 16 (Triton 3.6), so d is padded with zeros to 16.
MIN_DOT = 16


@dataclass(frozen=True)
class Blocks:
    """The kernels' block shapes (not tuned on a GPU yet: benchmarks/graph_step.py
    --fused-blocks times others), written ``PxCxSxMxNxW`` in that order.

    ``points``: points per program of _partials and _outputs; ``chunk``: neurons per iteration
    of _partials's loop; ``segment``: neurons per program of _partials (a multiple of chunk);
    ``neurons``: neurons per program of _gradient_step; ``point_chunk``: points per iteration of
    its loop; ``warps``: per program of _partials and _gradient_step. Each a power of 2, the
    blocks' sides that a tl.dot reduces over (chunk, point_chunk) at least :data:`MIN_DOT`.
    """

    points: int = 64
    chunk: int = 64
    segment: int = FUSED_SEGMENT
    neurons: int = 64
    point_chunk: int = 32
    warps: int = 4

    def __str__(self) -> str:
        return "x".join(map(str, astuple(self)))

    @classmethod
    def parse(cls, text: str) -> Blocks:
        """The blocks written ``PxCxSxMxNxW`` (e.g. ``64x64x512x64x32x4``).

        Raises:
            ValueError: not six powers of 2 with chunk and point_chunk at least
                :data:`MIN_DOT` and segment a multiple of chunk.
        """
        parts = text.split("x")
        if len(parts) != len(fields(cls)) or not all(part.isdigit() for part in parts):
            raise ValueError(f"blocks {text!r}: expected PxCxSxMxNxW, six integers")
        blocks = cls(*map(int, parts))
        small = min(blocks.chunk, blocks.point_chunk) < MIN_DOT
        if small or any(v < 1 or v & (v - 1) for v in astuple(blocks)):
            raise ValueError(f"blocks {text!r}: each a power of 2, C and N at least {MIN_DOT}")
        if blocks.segment < blocks.chunk:
            raise ValueError(f"blocks {text!r}: the segment S is less than the chunk C")
        return blocks


BLOCKS = Blocks()
# The kernels' integer sizes, which Triton would otherwise compile a variant of each kernel for
# per divisibility by 16 (and equality to 1): a sweep's many shapes would each pay a compile.
SIZES = ("N", "M", "SEGS", "B", "CHUNKS")
# The kernels' ACT is the activation's index in ACTIVATIONS: 0 softmax, 1 relu, 2 exp.


@triton.jit(do_not_specialize=SIZES)
def _partials(W, A, X, sizes, widths, PMAX, PSUM, PF, N, M, SEGS,
              D: tl.constexpr, DP: tl.constexpr, D_OUT: tl.constexpr, VP: tl.constexpr,
              ACT: tl.constexpr, BP: tl.constexpr, BC: tl.constexpr,
              SEG: tl.constexpr):  # fmt: skip
    b, p, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    n_b, m_b = tl.load(sizes + b), tl.load(widths + b)
    rows = p * BP + tl.arange(0, BP)
    row_ok = rows < n_b
    k, outs = tl.arange(0, DP), tl.arange(0, VP)
    x = tl.load(X + (b * N + rows[:, None]) * D + k[None, :], row_ok[:, None] & (k[None, :] < D), 0)
    acc = tl.zeros((BP, VP), dtype=W.dtype.element_ty)
    zmax = tl.full((BP,), -float("inf"), dtype=W.dtype.element_ty)
    # Nothing to do for a block past the run's points or a segment past its width.
    end = tl.where(p * BP < n_b, tl.minimum(s * SEG + SEG, m_b), 0)
    for c0 in range(s * SEG, end, BC):
        cols = c0 + tl.arange(0, BC)
        col_ok = cols < m_b
        w = tl.load(
            W + (b * D + k[:, None]) * M + cols[None, :], (k[:, None] < D) & col_ok[None, :], 0
        )
        z = tl.dot(x, w, input_precision="ieee", out_dtype=x.dtype)  # (BP, BC)
        if ACT == 0:  # softmax, online: rescale the sums so far to the new maximum
            z = tl.where(col_ok[None, :], z, -float("inf"))
            new = tl.maximum(zmax, tl.max(z, axis=1))
            acc = acc * tl.exp(zmax - new)[:, None]
            zmax = new
            phi = tl.exp(z - zmax[:, None])
        elif ACT == 1:  # relu
            phi = tl.maximum(z, 0.0)
        else:  # exp
            phi = tl.exp(z)
        # v (BC, VP): a's rows, then (softmax) a column of ones that sums phi over neurons;
        # zero at a padded neuron, so its phi (of z = 0) adds nothing.
        v = tl.load(A + (b * D_OUT + outs[None, :]) * M + cols[:, None],
                    (outs[None, :] < D_OUT) & col_ok[:, None], 0)  # fmt: skip
        if ACT == 0:
            v = tl.where((outs[None, :] == D_OUT) & col_ok[:, None], 1.0, v)
        acc = tl.dot(phi, v, acc, input_precision="ieee", out_dtype=acc.dtype)
    at = (b * SEGS + s) * N + rows
    tl.store(
        PF + at[:, None] * D_OUT + outs[None, :], acc, row_ok[:, None] & (outs[None, :] < D_OUT)
    )
    if ACT == 0:
        tl.store(PMAX + at, zmax, row_ok)
        tl.store(PSUM + at, tl.sum(tl.where(outs[None, :] == D_OUT, acc, 0.0), axis=1), row_ok)


@triton.jit(do_not_specialize=SIZES)
def _outputs(Y, sizes, widths, PMAX, PSUM, PF, LSE, SCALE, R, C, LPART, N, SEGS,
             D_OUT: tl.constexpr, DOP: tl.constexpr, ACT: tl.constexpr, BP: tl.constexpr,
             SEG: tl.constexpr):  # fmt: skip
    b, p = tl.program_id(0), tl.program_id(1)
    n_b, m_b = tl.load(sizes + b), tl.load(widths + b)
    mf = m_b.to(SCALE.dtype.element_ty)
    rows = p * BP + tl.arange(0, BP)
    row_ok = rows < n_b
    outs = tl.arange(0, DOP)
    f_ok = row_ok[:, None] & (outs[None, :] < D_OUT)
    segments = tl.cdiv(m_b, SEG)
    F = tl.zeros((BP, DOP), dtype=SCALE.dtype.element_ty)
    if ACT == 0:  # the segments' sums merged at the row maximum (the online-softmax rule)
        zmax = tl.full((BP,), -float("inf"), dtype=F.dtype)
        for s in range(0, segments):
            zmax = tl.maximum(zmax, tl.load(PMAX + (b * SEGS + s) * N + rows, row_ok, 0))
        total = tl.zeros((BP,), dtype=F.dtype)
        for s in range(0, segments):
            at = (b * SEGS + s) * N + rows
            rescale = tl.exp(tl.load(PMAX + at, row_ok, 0) - zmax)
            total += rescale * tl.load(PSUM + at, row_ok, 0)
            F += rescale[:, None] * tl.load(PF + at[:, None] * D_OUT + outs[None, :], f_ok, 0)
        total = tl.where(row_ok, total, 1.0)  # padded points have no softmax
        scale = tl.zeros((BP,), dtype=F.dtype) + mf
        F = F * (mf / total)[:, None]
        # The gradient's S = exp(z - log-sum-exp) of these logits, no larger than 1.
        tl.store(LSE + b * N + rows, zmax + tl.log(total), row_ok)
    else:
        for s in range(0, segments):
            F += tl.load(PF + ((b * SEGS + s) * N + rows[:, None]) * D_OUT + outs[None, :], f_ok, 0)
        scale = tl.zeros((BP,), dtype=F.dtype) + 1.0 / tl.sqrt(mf)
        F = F * scale[:, None]
    y = tl.load(Y + (b * N + rows[:, None]) * D_OUT + outs[None, :], f_ok, 0)
    res = tl.where(f_ok, F - y, 0.0)
    c = tl.zeros((BP,), dtype=F.dtype)
    if ACT == 0:
        c = tl.sum(res * F, axis=1) / mf
    tl.store(R + (b * N + rows[:, None]) * D_OUT + outs[None, :], res, f_ok)
    tl.store(C + b * N + rows, c, row_ok)
    tl.store(SCALE + b * N + rows, scale, row_ok)
    tl.store(LPART + b * tl.num_programs(1) + p, 0.5 * tl.sum(tl.sum(res * res, axis=1), axis=0))


@triton.jit(do_not_specialize=SIZES)
def _status(LPART, L0, eta, eps, L, active, diverged, hit, STEP, T, B, CHUNKS, divergence,
            BB: tl.constexpr):  # fmt: skip
    runs = tl.arange(0, BB)
    ok = runs < B
    loss = tl.zeros((BB,), dtype=L.dtype.element_ty)
    for p in range(0, CHUNKS):  # in a fixed order: the loss is bitwise reproducible
        loss += tl.load(LPART + runs * CHUNKS + p, ok, 0)
    t = tl.load(T)
    rel = loss / tl.load(L0 + runs, ok, 1)
    bad = (loss != loss) | (loss == float("inf")) | (rel > divergence)
    reached = (rel <= tl.load(eps + runs, ok, 0)) & (bad == 0)
    was_active = tl.load(active + runs, ok, 0) != 0
    old_hit = tl.load(hit + runs, ok, 0)
    now_active = was_active & (reached == 0) & (bad == 0)
    tl.store(hit + runs, tl.where(was_active & reached & (old_hit < 0), t, old_hit), ok)
    tl.store(diverged + runs, (tl.load(diverged + runs, ok, 0) != 0) | (was_active & bad), ok)
    tl.store(active + runs, now_active, ok)
    tl.store(L + runs, loss, ok)
    tl.store(STEP + runs, tl.where(now_active, tl.load(eta + runs, ok, 0), 0.0), ok)
    tl.store(T, t + 1)


@triton.jit(do_not_specialize=SIZES)
def _gradient_step(W, A, X, sizes, widths, LSE, SCALE, R, C, STEP, N, M,
                   D: tl.constexpr, DP: tl.constexpr, D_OUT: tl.constexpr, ACT: tl.constexpr,
                   BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
    b, j = tl.program_id(0), tl.program_id(1)
    n_b, m_b = tl.load(sizes + b), tl.load(widths + b)
    cols = j * BM + tl.arange(0, BM)
    col_ok = cols < m_b
    k = tl.arange(0, DP)
    w_at = W + (b * D + k[None, :]) * M + cols[:, None]  # (BM, DP): w_r as rows
    w_ok = (k[None, :] < D) & col_ok[:, None]
    w = tl.load(w_at, w_ok, 0)
    grad = tl.zeros((BM, DP), dtype=W.dtype.element_ty)
    # Nothing to do for a block past the run's width.
    for i0 in range(0, tl.where(j * BM < m_b, n_b, 0), BN):
        rows = i0 + tl.arange(0, BN)
        row_ok = rows < n_b
        x = tl.load(
            X + (b * N + rows[:, None]) * D + k[None, :], row_ok[:, None] & (k[None, :] < D), 0
        )
        # z_ir transposed, (BM, BN)
        z = tl.dot(w, tl.trans(x), input_precision="ieee", out_dtype=w.dtype)
        ra = tl.zeros((BM, BN), dtype=W.dtype.element_ty)  # sum_l R_il a_lr
        for l in tl.static_range(D_OUT):
            a_l = tl.load(A + (b * D_OUT + l) * M + cols, col_ok, 0)
            ra += a_l[:, None] * tl.load(R + (b * N + rows) * D_OUT + l, row_ok, 0)[None, :]
        scale = tl.load(SCALE + b * N + rows, row_ok, 0)
        if ACT == 0:  # softmax: m S (ra - <R, F>/m), S = exp(z - the row's log-sum-exp)
            c = tl.load(C + b * N + rows, row_ok, 0)
            g = tl.exp(z - tl.load(LSE + b * N + rows, row_ok, 0)[None, :]) * (ra - c[None, :])
        elif ACT == 1:  # relu: m^-1/2 1[z > 0] ra
            g = tl.where(z > 0, ra, 0.0)
        else:  # exp: m^-1/2 exp(z) ra
            g = tl.exp(z) * ra
        # At a padded point x, R, c and scale are 0, so g is; a padded neuron's is not stored.
        g = g * scale[None, :]
        # sum_i g_ir x_i, (BM, DP)
        grad = tl.dot(g, x, grad, input_precision="ieee", out_dtype=grad.dtype)
    tl.store(w_at, w - tl.load(STEP + b) * grad, w_ok)


def kernel_constants(d: int, d_out: int, activation: str, blocks: Blocks) -> dict[str, dict]:
    """The compile-time constants (``tl.constexpr``) of ``_partials``, ``_outputs`` and
    ``_gradient_step`` for inputs of dimension d, d_out outputs and ``activation`` with
    ``blocks``, by kernel name: what :func:`iteration` launches them with.

    Raises:
        ValueError: an unknown activation.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")
    code = ACTIVATIONS.index(activation)
    shape = {"D": d, "DP": max(MIN_DOT, triton.next_power_of_2(d)), "D_OUT": d_out, "ACT": code}
    sums = d_out + (code == 0)  # the outputs' columns, and (softmax) the sum of phi
    return {
        "_partials": shape | {"VP": triton.next_power_of_2(sums), "BP": blocks.points,
                              "BC": blocks.chunk, "SEG": blocks.segment},
        "_outputs": {"D_OUT": d_out, "DOP": triton.next_power_of_2(d_out), "ACT": code,
                     "BP": blocks.points, "SEG": blocks.segment},
        "_gradient_step": shape | {"BM": blocks.neurons, "BN": blocks.point_chunk},
    }  # fmt: skip


def iteration(
    W, a, X, Y, eta, eps, L0, L, active, diverged, hit, t, activation, sizes, widths, divergence
) -> Callable[[], None]:
    """The fused iteration of a bundle, in place: one call steps every run from ``t`` to
    ``t + 1`` as :func:`~.descent.gd_iteration` does (to rounding: the sums run in another
    order), launching four kernels and no host synchronisation (so CUDA graphs can capture
    it).

    Shapes: W ``(B, d, M)`` (stepped in place), a ``(B, d_out, M)``, X ``(B, N, d)``,
    Y ``(B, N, d_out)``, all contiguous, on one CUDA device (or the CPU under
    ``TRITON_INTERPRET=1``); eta, eps, L0, L ``(B,)`` in W's dtype; active, diverged ``(B,)``
    bool, hit ``(B,)`` long, t a 0-d long tensor: written in place. ``sizes``, ``widths``
    ``(B,)`` int32: each run's n and m (<= N, M; the rest is padding). ``divergence``: the
    relative loss above which a run diverged. Returns the call; its scratch lives as long as it.

    Raises:
        ValueError: an unknown activation.
    """
    (B, d, M), N, d_out = W.shape, X.shape[1], a.shape[1]
    constants = kernel_constants(d, d_out, activation, BLOCKS)
    segments = triton.cdiv(M, BLOCKS.segment)
    points, neurons = triton.cdiv(N, BLOCKS.points), triton.cdiv(M, BLOCKS.neurons)
    scratch = W.new_empty
    pmax, psum, pf = (scratch(B, segments, N, *k) for k in ((), (), (d_out,)))
    lse, scale, res, c = scratch(B, N), scratch(B, N), scratch(B, N, d_out), scratch(B, N)
    lpart, step = scratch(B, points), scratch(B)

    def call() -> None:
        _partials[(B, points, segments)](
            W, a, X, sizes, widths, pmax, psum, pf, N, M, segments,
            **constants["_partials"], num_warps=BLOCKS.warps,
        )  # fmt: skip
        _outputs[(B, points)](
            Y, sizes, widths, pmax, psum, pf, lse, scale, res, c, lpart, N, segments,
            **constants["_outputs"],
        )  # fmt: skip
        _status[(1,)](
            lpart, L0, eta, eps, L, active, diverged, hit, step, t, B, points, divergence,
            BB=triton.next_power_of_2(B),
        )  # fmt: skip
        _gradient_step[(B, neurons)](
            W, a, X, sizes, widths, lse, scale, res, c, step, N, M,
            **constants["_gradient_step"], num_warps=BLOCKS.warps,
        )  # fmt: skip

    return call
