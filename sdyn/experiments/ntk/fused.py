"""One iteration of :func:`~.descent.gd_iteration` on a GPU as four Triton kernels that never
store the ``(n, m)`` logits: each kernel recomputes ``Z = X W`` (d ~ 8 multiply-adds per entry)
where the compiled step writes Z and the gradient factor G to memory and reads them back.

The iteration, for every run b of a bundle at once (Claim 3.4, Def. 3.5; for softmax
``S_ir = exp(z_ir - max_r z_ir) / sum_r exp(...)``):

1. :func:`_partials`, one program per (run, block of BLOCK_M neurons): per point, the block's
   logit maximum, its sum of ``exp(z - max)`` and its ``sum_r exp(z - max) a_lr``.
2. :func:`_outputs`, one program per (run, block of points): the blocks' partials merged into
   ``F = m S a^T``, the residual ``R = F - Y`` and ``<R, F>/m``; the block's share of the loss.
3. :func:`_status`, one program: the loss ``L(t)``, the run's status (as gd_iteration decides
   it) and its step size, 0 once it stopped; the step counter ``t`` advances.
4. :func:`_gradient_step`, one program per (run, block of neurons): ``g_ir = m S_ir
   (sum_l R_il a_lr - <R_i, F_i>/m)``, ``grad_r = sum_i g_ir x_i`` and ``w_r <- w_r - eta grad_r``.

A packed bundle (:class:`~.network.Pack`) passes each run's width and sample size: a program
skips the padded neurons and points, which gd_iteration masks instead.
"""

from __future__ import annotations

from collections.abc import Callable

import triton
import triton.language as tl

from sdyn.experiments.ntk.config import ACTIVATIONS

# Neurons per program of the two (run, neuron block) kernels, points per chunk of their loop
# over points, and warps per program of those two; points per program of _outputs. Not tuned
# on a GPU yet (benchmarks/graph_step.py --fused-blocks times other choices).
BLOCK_M = 64
BLOCK_N = 8
NUM_WARPS = 4
BLOCK_POINTS = 64
# The kernels' ACT is the activation's index in ACTIVATIONS: 0 softmax, 1 relu, 2 exp.


@triton.jit
def _logits(X, W, b, rows, row_ok, cols, col_ok, N, M, D: tl.constexpr, DP: tl.constexpr):
    """z ``(BLOCK_N, BLOCK_M)``: the logits of run b's points ``rows`` at neurons ``cols``."""
    k = tl.arange(0, DP)
    x = tl.load(X + (b * N + rows[:, None]) * D + k[None, :], row_ok[:, None] & (k[None, :] < D), 0)
    w = tl.load(W + (b * D + k[:, None]) * M + cols[None, :], (k[:, None] < D) & col_ok[None, :], 0)
    return tl.sum(x[:, :, None] * w[None, :, :], axis=1), x


@triton.jit
def _neuron_block(A, sizes, widths, M, D_OUT: tl.constexpr, DOP: tl.constexpr, BM: tl.constexpr):
    """A (run b, neuron block j) program's set-up: b, j, the run's n, the block's neurons
    ``cols`` and which are the run's, its second-layer weights ``a`` ``(DOP, BM)``, and the
    points to loop over: n, or none for a block past the run's width (nothing to do there;
    _outputs skips its partials)."""
    b, j = tl.program_id(0), tl.program_id(1)
    n_b, m_b = tl.load(sizes + b), tl.load(widths + b)
    cols = j * BM + tl.arange(0, BM)
    col_ok = cols < m_b
    outs = tl.arange(0, DOP)
    a_ok = (outs[:, None] < D_OUT) & col_ok[None, :]
    a = tl.load(A + (b * D_OUT + outs[:, None]) * M + cols[None, :], a_ok, 0)
    return b, j, n_b, cols, col_ok, a, tl.where(j * BM < m_b, n_b, 0)


@triton.jit
def _partials(W, A, X, sizes, widths, PMAX, PSUM, PF, N, M, NBLK,
              D: tl.constexpr, DP: tl.constexpr, D_OUT: tl.constexpr, DOP: tl.constexpr,
              ACT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
    b, j, n_b, cols, col_ok, a, n_here = _neuron_block(A, sizes, widths, M, D_OUT, DOP, BM)
    outs = tl.arange(0, DOP)
    for i0 in range(0, n_here, BN):
        rows = i0 + tl.arange(0, BN)
        row_ok = rows < n_b
        z, x = _logits(X, W, b, rows, row_ok, cols, col_ok, N, M, D, DP)
        at = (b * NBLK + j) * N + rows
        if ACT == 0:  # softmax
            z = tl.where(col_ok[None, :], z, -float("inf"))
            zmax = tl.max(z, axis=1)
            phi = tl.exp(z - zmax[:, None])
            tl.store(PMAX + at, zmax, row_ok)
            tl.store(PSUM + at, tl.sum(phi, axis=1), row_ok)
        elif ACT == 1:  # relu
            phi = tl.maximum(z, 0.0)
        else:  # exp
            phi = tl.where(col_ok[None, :], tl.exp(z), 0.0)
        f = tl.sum(phi[:, None, :] * a[None, :, :], axis=2)  # (BN, DOP)
        f_ok = row_ok[:, None] & (outs[None, :] < D_OUT)
        tl.store(PF + at[:, None] * D_OUT + outs[None, :], f, f_ok)


@triton.jit
def _outputs(Y, sizes, widths, PMAX, PSUM, PF, ROWMAX, SCALE, R, C, LPART, N, NBLK,
             D_OUT: tl.constexpr, DOP: tl.constexpr, ACT: tl.constexpr, BM: tl.constexpr,
             BP: tl.constexpr):  # fmt: skip
    b, p = tl.program_id(0), tl.program_id(1)
    n_b, m_b = tl.load(sizes + b), tl.load(widths + b)
    mf = m_b.to(ROWMAX.dtype.element_ty)
    rows = p * BP + tl.arange(0, BP)
    row_ok = rows < n_b
    outs = tl.arange(0, DOP)
    f_ok = row_ok[:, None] & (outs[None, :] < D_OUT)
    blocks = tl.cdiv(m_b, BM)
    F = tl.zeros((BP, DOP), dtype=ROWMAX.dtype.element_ty)
    zmax = tl.zeros((BP,), dtype=ROWMAX.dtype.element_ty)
    if ACT == 0:  # merge the blocks' softmax partials (the online-softmax rule)
        zmax = zmax - float("inf")
        for j in range(0, blocks):
            zmax = tl.maximum(zmax, tl.load(PMAX + (b * NBLK + j) * N + rows, row_ok, 0))
        total = tl.zeros((BP,), dtype=ROWMAX.dtype.element_ty)
        for j in range(0, blocks):
            at = (b * NBLK + j) * N + rows
            rescale = tl.exp(tl.load(PMAX + at, row_ok, 0) - zmax)
            total += rescale * tl.load(PSUM + at, row_ok, 0)
            F += rescale[:, None] * tl.load(PF + at[:, None] * D_OUT + outs[None, :], f_ok, 0)
        scale = mf / tl.where(row_ok, total, 1.0)  # padded points have no softmax
    else:
        for j in range(0, blocks):
            at = (b * NBLK + j) * N + rows
            F += tl.load(PF + at[:, None] * D_OUT + outs[None, :], f_ok, 0)
        scale = tl.zeros((BP,), dtype=ROWMAX.dtype.element_ty) + 1.0 / tl.sqrt(mf)
    F = F * scale[:, None]
    y = tl.load(Y + (b * N + rows[:, None]) * D_OUT + outs[None, :], f_ok, 0)
    res = tl.where(f_ok, F - y, 0.0)
    c = tl.zeros((BP,), dtype=F.dtype)
    if ACT == 0:
        c = tl.sum(res * F, axis=1) / mf
    tl.store(R + (b * N + rows[:, None]) * D_OUT + outs[None, :], res, f_ok)
    tl.store(C + b * N + rows, c, row_ok)
    tl.store(ROWMAX + b * N + rows, zmax, row_ok)
    tl.store(SCALE + b * N + rows, scale, row_ok)
    tl.store(LPART + b * tl.num_programs(1) + p, 0.5 * tl.sum(tl.sum(res * res, axis=1), axis=0))


@triton.jit
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


@triton.jit
def _gradient_step(W, A, X, sizes, widths, ROWMAX, SCALE, R, C, STEP, N, M,
                   D: tl.constexpr, DP: tl.constexpr, D_OUT: tl.constexpr, DOP: tl.constexpr,
                   ACT: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
    b, _, n_b, cols, col_ok, a, n_here = _neuron_block(A, sizes, widths, M, D_OUT, DOP, BM)
    outs = tl.arange(0, DOP)
    grad = tl.zeros((DP, BM), dtype=W.dtype.element_ty)
    for i0 in range(0, n_here, BN):
        rows = i0 + tl.arange(0, BN)
        row_ok = rows < n_b
        z, x = _logits(X, W, b, rows, row_ok, cols, col_ok, N, M, D, DP)
        r_ok = row_ok[:, None] & (outs[None, :] < D_OUT)
        res = tl.load(R + (b * N + rows[:, None]) * D_OUT + outs[None, :], r_ok, 0)  # (BN, DOP)
        ra = tl.sum(res[:, :, None] * a[None, :, :], axis=1)  # sum_l R_il a_lr, (BN, BM)
        scale = tl.load(SCALE + b * N + rows, row_ok, 0)
        if ACT == 0:  # softmax: m S (ra - <R, F>/m), S from the merged maximum and sum
            zmax = tl.load(ROWMAX + b * N + rows, row_ok, 0)
            c = tl.load(C + b * N + rows, row_ok, 0)
            g = tl.exp(z - zmax[:, None]) * (ra - c[:, None])
        elif ACT == 1:  # relu: m^-1/2 1[z > 0] ra
            g = tl.where(z > 0, ra, 0.0)
        else:  # exp: m^-1/2 exp(z) ra
            g = tl.exp(z) * ra
        g = tl.where(row_ok[:, None] & col_ok[None, :], g * scale[:, None], 0.0)
        grad += tl.sum(x[:, :, None] * g[:, None, :], axis=0)  # sum_i x_ik g_ir, (DP, BM)
    k = tl.arange(0, DP)
    at = W + (b * D + k[:, None]) * M + cols[None, :]
    w_ok = (k[:, None] < D) & col_ok[None, :]
    tl.store(at, tl.load(at, w_ok, 0) - tl.load(STEP + b) * grad, w_ok)


def step_cost(B: int, N: int, M: int, d: int, d_out: int, itemsize: int) -> tuple[float, float]:
    """FLOP and bytes of device memory traffic of one :func:`iteration` of a bundle of B runs
    padded to (N, M), as :func:`~.bundling.step_cost` states them for the compiled step.

    FLOP per run: ``6NMd`` (``Z = X W`` in two kernels and ``X^T G``), ``4NM d_out`` (the
    partial outputs and ``sum_l R_l a_l``) and ``12NM`` (two exponentials and the elementwise
    terms). Bytes: W, a and X read by two kernels and W written, Y read, and the partials
    (``2 + d_out`` per point and block of :data:`BLOCK_M` neurons) written once and read once.
    """
    partials = N * triton.cdiv(M, BLOCK_M) * (2 + d_out)
    flops = 6 * N * M * d + 4 * N * M * d_out + 12 * N * M
    elements = 3 * d * M + 2 * d_out * M + 2 * N * d + N * d_out + 2 * partials
    return B * float(flops), B * float(elements * itemsize)


def iteration(
    W, a, X, Y, eta, eps, L0, L, active, diverged, hit, t, activation, sizes, widths, divergence
) -> Callable[[], None]:
    """The fused iteration of a bundle, in place: one call steps every run from ``t`` to
    ``t + 1`` exactly as :func:`~.descent.gd_iteration` does, launching four kernels and no
    host synchronisation (so CUDA graphs can capture it).

    Shapes: W ``(B, d, M)`` (stepped in place), a ``(B, d_out, M)``, X ``(B, N, d)``,
    Y ``(B, N, d_out)``, all contiguous, on one CUDA device (or the CPU under
    ``TRITON_INTERPRET=1``); eta, eps, L0, L ``(B,)`` in W's dtype; active, diverged ``(B,)``
    bool, hit ``(B,)`` long, t a 0-d long tensor: written in place. ``sizes``, ``widths``
    ``(B,)`` int32: each run's n and m (<= N, M; the rest is padding). ``divergence``: the
    relative loss above which a run diverged. Returns the call; its scratch lives as long as it.

    Raises:
        ValueError: an unknown activation.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {ACTIVATIONS}")
    (B, d, M), N, d_out = W.shape, X.shape[1], a.shape[1]
    blocks, chunks = triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_POINTS)
    scratch = W.new_empty
    pmax, psum, pf = scratch(B, blocks, N), scratch(B, blocks, N), scratch(B, blocks, N, d_out)
    rowmax, scale, res, c = scratch(B, N), scratch(B, N), scratch(B, N, d_out), scratch(B, N)
    lpart, step = scratch(B, chunks), scratch(B)
    shape = {
        "D": d,
        "DP": triton.next_power_of_2(d),
        "D_OUT": d_out,
        "DOP": triton.next_power_of_2(d_out),
    }
    code = ACTIVATIONS.index(activation)

    def call() -> None:
        _partials[(B, blocks)](
            W, a, X, sizes, widths, pmax, psum, pf, N, M, blocks,
            **shape, ACT=code, BM=BLOCK_M, BN=BLOCK_N, num_warps=NUM_WARPS,
        )  # fmt: skip
        _outputs[(B, chunks)](
            Y, sizes, widths, pmax, psum, pf, rowmax, scale, res, c, lpart, N, blocks,
            D_OUT=d_out, DOP=shape["DOP"], ACT=code, BM=BLOCK_M, BP=BLOCK_POINTS,
        )  # fmt: skip
        _status[(1,)](
            lpart, L0, eta, eps, L, active, diverged, hit, step, t, B, chunks, divergence,
            BB=triton.next_power_of_2(B),
        )  # fmt: skip
        _gradient_step[(B, blocks)](
            W, a, X, sizes, widths, rowmax, scale, res, c, step, N, M,
            **shape, ACT=code, BM=BLOCK_M, BN=BLOCK_N, num_warps=NUM_WARPS,
        )  # fmt: skip

    return call
