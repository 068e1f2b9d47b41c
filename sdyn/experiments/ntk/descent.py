"""Full-batch GD on the first layer (Def. 3.5), batched over runs: :func:`gd` and its one
iteration :func:`gd_iteration`, on the C++ kernel on a CPU and torch.compile'd elsewhere."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sdyn import native
from sdyn.experiments.ntk.bundling import fused_selected
from sdyn.experiments.ntk.config import ACTIVATIONS
from sdyn.experiments.ntk.kernel import cpp_function
from sdyn.experiments.ntk.network import Pack, loss, loss_and_gradient

STATUSES = ("converged", "budget_exhausted", "diverged")
# A run whose loss grows by this factor over its start has left any regime the theory covers.
DIVERGENCE_FACTOR = 1e6


def gd_iteration(
    W, a, X, Y, eta, eps, L0, active, diverged, hit, t, activation: str = "softmax", pack=None
):
    """One iteration of :func:`gd` for a bundle of B runs: loss at W(t), bookkeeping, GD step.

    A run's status is decided on ``L(t)`` before it steps: it reaches eps (recorded in ``hit``
    and frozen), or diverges (NaN/Inf, or ``L(t)/L(0) > DIVERGENCE_FACTOR``; frozen), or steps
    ``W <- W - eta grad`` (Def. 3.5). Pure tensor code, so ``torch.compile`` can fuse it.

    Shapes: W ``(B, d, m)``, a ``(B, d_out, m)``, X ``(B, n, d)``, Y ``(B, n, d_out)``; eta, eps,
    L0 ``(B,)``; active, diverged ``(B,)`` bool; hit ``(B,)`` long; t a 0-d long tensor;
    pack: a :class:`Pack` for a packed bundle. Returns ``(W_next, L, active, diverged, hit)``.
    Its FLOP and bytes: :func:`~.bundling.compiled_step_cost`.
    """
    L, grad = loss_and_gradient(W, a, X, Y, activation, pack)
    rel = L / L0
    bad = ~torch.isfinite(L) | (rel > DIVERGENCE_FACTOR)
    reached = (rel <= eps) & ~bad
    hit = torch.where(active & reached & (hit < 0), t, hit)
    diverged = diverged | (active & bad)
    active = active & ~reached & ~bad
    return W - torch.where(active, eta, 0.0)[:, None, None] * grad, L, active, diverged, hit


# The step loop is where a sweep spends its time. On a CPU it runs in a fused C++ kernel
# (ntk_step.cpp: every iteration of a run in one cache-resident pass, no Python per step); on a
# GPU, or where the kernel cannot be built, gd_iteration runs torch.compile'd (fused loops, and
# dynamic shapes, so one compilation serves every width and n), or eager where torch.compile
# cannot work (e.g. no C++ compiler), with a warning. SDYN_COMPILE=0 keeps the eager path.
_COMPILED = {"fn": None, "failed": not native.ENABLED}


def _iteration(*args):
    if not _COMPILED["failed"]:
        if _COMPILED["fn"] is None:
            _COMPILED["fn"] = torch.compile(gd_iteration, dynamic=True)
        try:
            return _COMPILED["fn"](*args)
        except Exception as exc:  # any compiler failure: the eager path is always correct
            _COMPILED["failed"] = True
            warnings.warn(
                f"torch.compile unavailable ({type(exc).__name__}); eager GD step", stacklevel=2
            )
    return gd_iteration(*args)


# On a GPU the step is replayed from CUDA graphs: no Python, guard checks or kernel launches per
# iteration, where the compiled step spends ~0.5 ms of Python per iteration at the grids' shapes.
# One graph holds GRAPH_ITERATIONS iterations, another one; a stretch between two record steps
# replays the first as often as it fits and the second for the rest. SDYN_CUDA_GRAPHS=0 keeps
# the compiled step; a CPU ignores it (its C++ kernel launches nothing).
CUDA_GRAPHS = os.environ.get("SDYN_CUDA_GRAPHS", "1") == "1"
GRAPH_ITERATIONS = 32


@dataclass
class _GDState:
    """The bundle's state between iterations; see :func:`gd_iteration` for the fields."""

    W: torch.Tensor
    L: torch.Tensor
    active: torch.Tensor
    diverged: torch.Tensor
    hit: torch.Tensor


def _fused_here(device: torch.device) -> bool:
    """Whether the fused step (:func:`~.bundling.fused_selected`) applies on ``device``: a GPU,
    or a CPU under Triton's interpreter (``TRITON_INTERPRET=1``, its debugging mode)."""
    return fused_selected() and (device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1")


def _stepper(state: _GDState, inputs: tuple, t: torch.Tensor) -> Callable[[], None]:
    """One :func:`gd_iteration` of the bundle, in place, as CUDA graphs capture it: the call
    steps ``state`` and adds 1 to the step counter ``t`` (a 0-d long tensor on the bundle's
    device). ``inputs``: ``(a, X, Y, eta, eps, L0, activation, pack)`` as gd_iteration takes
    them. Where :func:`_fused_here`, fused.py's kernels; else :func:`_iteration`."""
    a, X, Y, eta, eps, L0, activation, pack = inputs
    if _fused_here(X.device):
        # Triton: CUDA builds of torch ship it; an import here keeps CPU installs without it.
        from sdyn.experiments.ntk.fused import iteration as fused_iteration

        B, N, M = X.shape[0], X.shape[1], state.W.shape[-1]
        if pack is None:
            sizes, widths = torch.full((B,), N), torch.full((B,), M)
        else:
            sizes, widths = pack.point_weight.sum(dim=(1, 2)), pack.m.flatten()
        a, X, Y = (x.contiguous() for x in (a, X, Y))
        flags = (state.active, state.diverged, state.hit, t, activation)
        counts = (x.to(device=X.device, dtype=torch.int32) for x in (sizes, widths))
        args = (state.W, a, X, Y, eta, eps, L0, state.L, *flags, *counts, DIVERGENCE_FACTOR)
        return fused_iteration(*args)
    fields = (state.W, state.L, state.active, state.diverged, state.hit)

    def iteration() -> None:
        flags = (state.active, state.diverged, state.hit, t)
        out = _iteration(state.W, a, X, Y, eta, eps, L0, *flags, activation, pack)
        for field, value in zip(fields, out, strict=True):
            field.copy_(value)
        t.add_(1)

    return iteration


def _graphed(iteration: Callable[[], None], state: _GDState, t: torch.Tensor) -> tuple:
    """``iteration`` (from :func:`_stepper`) captured as two CUDA graphs
    (``torch.cuda.graph``) that share one memory pool: replaying the first runs it
    :data:`GRAPH_ITERATIONS` times, the second once.

    Three warm-up iterations on a side stream (compilation, autotuning) come first, as capture
    requires; they are undone on ``state`` and ``t``. Returns the two graphs' ``replay``.
    """
    tensors = (state.W, state.L, state.active, state.diverged, state.hit, t)
    saved = [x.clone() for x in tensors]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            iteration()
    torch.cuda.current_stream().wait_stream(side)
    for x, before in zip(tensors, saved, strict=True):
        x.copy_(before)
    # Shared: the graphs replay one after the other and hold no tensor between replays.
    pool = torch.cuda.graph_pool_handle()
    replays = []
    for iterations in (GRAPH_ITERATIONS, 1):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            for _ in range(iterations):
                iteration()
        replays.append(graph.replay)
    return replays[0], replays[1]


def gd(
    W0,
    a,
    X,
    Y,
    eta,
    eps,
    steps: int,
    record: list[int],
    activation="softmax",
    observe=None,
    pack: Pack | None = None,
):
    """Full-batch GD on W (Def. 3.5), batched over runs; a run is frozen once it fits or diverges.

    Run k stops moving at the first step where its relative loss ``L(t)/L(0)`` (with ``L(0)`` the
    loss of the zero output, the symmetric init's) is at most ``eps[k]``, or where its loss is
    NaN/Inf or has grown by :data:`DIVERGENCE_FACTOR`. The only host synchronisations are at the
    ``record`` steps. Every iteration is :func:`gd_iteration`; on a CPU the C++ kernel
    ``ntk_step.cpp`` runs the iterations between two record steps; on a GPU with
    :data:`CUDA_GRAPHS` (the default), replays of captured graphs run them (:func:`_graphed`),
    and with ``SDYN_FUSED=1`` each iteration is fused.py's Triton kernels (:func:`_stepper`).

    Args:
        W0: initial first layers ``(B, d, m)``; a: fixed second layers ``(B, d_out, m)``.
        X: inputs ``(B, n, d)``; Y: labels ``(B, n, d_out)``.
        eta: per-run step sizes ``(B,)``; eps: per-run target relative losses ``(B,)`` (0: train
            for the whole budget).
        steps: the GD budget (iterations).
        record: increasing steps in ``[0, steps]`` (non-empty) at which ``observe`` is called.
        activation: see :func:`forward`.
        observe: ``observe(W, L) -> (B, k)`` metrics of the current weights ``W`` ``(B, d, m)``
            whose loss is ``L`` ``(B,)``, called at ``record[0], record[1], ...`` in order; None
            records nothing.
        pack: a :class:`Pack` when the bundle holds runs of different widths or sample sizes,
            padded (it takes the PyTorch step: the C++ kernel knows no padding).

    Returns:
        ``(W, hit, statuses, curves)``: the final weights ``(B, d, m)``, those of the last
        observation (``record[-1]``, or the step where every run had stopped); ``hit`` ``(B,)``, the
        first step with relative loss <= eps (-1 if never); ``statuses``, per run one of
        :data:`STATUSES` (converged: reached eps; diverged: NaN/Inf or blown-up loss;
        budget_exhausted: neither); ``curves`` ``(B, k_rec, k)`` on the CPU, the observations at
        ``record[:k_rec]`` (``k_rec < len(record)`` when every run stopped early).
    """
    a, X, Y, eta, eps = (t.to(W0.dtype) for t in (a, X, Y, eta, eps))
    L0 = loss(torch.zeros_like(Y), Y)
    active = torch.ones(W0.shape[0], dtype=torch.bool, device=W0.device)
    state = _GDState(
        W=W0.clone(memory_format=torch.contiguous_format),  # the kernel steps it in place
        L=torch.full_like(L0, math.nan),
        active=active,
        diverged=torch.zeros_like(active),
        hit=torch.full(active.shape, -1, dtype=torch.long, device=W0.device),
    )
    kernel = cpp_function(state.W) if pack is None else None
    if kernel is not None:
        a, X, Y, eta, eps = (t.contiguous() for t in (a, X, Y, eta, eps))
        code = ACTIVATIONS.index(activation)
        B, d, m = state.W.shape

        def advance(t0: int, t1: int) -> None:  # iterations t0 <= t < t1, in place
            p = [t.data_ptr() for t in (state.W, a, X, Y, eta, eps, L0)]
            out = [t.data_ptr() for t in (state.L, state.active, state.diverged, state.hit)]
            shape = (B, X.shape[-2], d, m, a.shape[-2], code)
            # As many threads as torch's own ops use (1 in a sweep's Ray tasks).
            kernel(*shape, *p, DIVERGENCE_FACTOR, t0, t1, *out, torch.get_num_threads())
    elif (graphs := CUDA_GRAPHS and X.device.type == "cuda") or _fused_here(X.device):
        counter = torch.zeros((), dtype=torch.long, device=X.device)
        iteration = _stepper(state, (a, X, Y, eta, eps, L0, activation, pack), counter)
        many, one = _graphed(iteration, state, counter) if graphs else (None, iteration)

        def advance(t0: int, t1: int) -> None:
            counter.fill_(t0)
            runs_of_many, rest = divmod(t1 - t0, GRAPH_ITERATIONS) if many else (0, t1 - t0)
            for _ in range(runs_of_many):
                many()
            for _ in range(rest):
                one()
    else:
        # The step counter lives on the device: ticks[t] is a view, no host-to-device copy.
        ticks = torch.arange(steps + 1, device=X.device)

        def advance(t0: int, t1: int) -> None:
            for t in range(t0, t1):
                flags = (state.active, state.diverged, state.hit, ticks[t])
                args = (state.W, a, X, Y, eta, eps, L0, *flags, activation, pack)
                state.W, state.L, state.active, state.diverged, state.hit = _iteration(*args)

    curves, t = None, 0
    for k_rec, step in enumerate(record):
        advance(t, step)
        W_rec = state.W.clone()  # W(step): the next iteration computes L(step), then steps
        advance(step, step + 1)
        row = observe(W_rec, state.L) if observe else state.L.new_zeros(len(state.L), 0)
        if curves is None:  # preallocated on the device once the number of metrics is known
            shape = (len(row), len(record), row.shape[-1])
            curves = torch.full(shape, math.nan, dtype=row.dtype, device=row.device)
        curves[:, k_rec] = row
        t = step + 1
        if not bool(state.active.any()):  # the only host synchronisation, at record steps
            break
    statuses = [
        "diverged" if bad_k else ("converged" if hit_k >= 0 else "budget_exhausted")
        for bad_k, hit_k in zip(state.diverged.tolist(), state.hit.tolist(), strict=True)
    ]
    return W_rec, state.hit, statuses, curves[:, : k_rec + 1].cpu()  # one copy to the host
