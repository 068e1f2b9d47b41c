"""The step's loss and closed-form gradients (:func:`loss_and_gradients`): the fused C++
kernel ``attention_step.cpp`` on a CPU, PyTorch elsewhere (a GPU, other dtypes, no build)."""

from __future__ import annotations

import ctypes

import torch

from sdyn import native

# loss_and_gradients on a CPU (see there); one C++ file, built once per machine by sdyn.native.
_KERNEL_SOURCE = native.SOURCES / "attention_step.cpp"


def _kernel(V: torch.Tensor):
    """The C++ loss and gradients for V's dtype, or None (GPU, other dtypes, no build)."""
    name = {torch.float64: "attention_grad_f64", torch.float32: "attention_grad_f32"}.get(V.dtype)
    if V.device.type != "cpu" or name is None:
        return None
    i64 = ctypes.c_int64
    return native.function(_KERNEL_SOURCE, name, [i64] * 5 + [ctypes.c_void_p] * 8 + [i64])


def loss_and_gradients(V, K, X_context, X_query, Y_query):
    """:func:`empirical_loss` and its closed-form gradients, sharing one forward pass.

    With scores ``Z_ij = x_j^T K x_i``, weights ``P = softmax(Z)``, context means ``m_i = sum_j
    P_ij x_j``, second moments ``C_i = sum_j P_ij x_j x_j^T``, ``G = 2 (V m_i - y_i) / q`` and
    ``g_i = V^T G_i``: ``grad_V = G^T M`` and, from ``dL/dZ_ij = P_ij g_i^T (x_j - m_i)``,
    ``grad_K = sum_ij dL/dZ_ij x_j x_i^T = sum_i (C_i g_i - (g_i^T m_i) m_i) x_i^T``. Both moments
    come from one product of P with ``[x_j, vec(x_j x_j^T)]``, so the ``(q, c)`` weights are read
    once (the step's cost is three passes over them).

    On a CPU this runs in the fused C++ kernel ``attention_step.cpp``, which never forms the
    ``(q, c)`` weights: per query, ``h_i = C_i g_i - (g_i^T m_i) m_i = sum_j dL/dZ_ij x_j`` over one
    cache-resident row (4d multiply-adds and one exp per (i, j)); elsewhere, or where it cannot
    be built, in PyTorch as above. The inputs are plain tensors (no autograd).

    Shapes: V ``(..., k, d)``, K ``(..., d, d)``, X_context ``(..., c, d)``, X_query ``(..., q,
    d)``, Y_query ``(..., q, k)`` (leading dimensions broadcast) -> loss ``(...)``, grad_V
    ``(..., k, d)``, grad_K ``(..., d, d)``, in V's dtype.
    """
    kernel = _kernel(V)
    if kernel is None:
        return _loss_and_gradients_torch(V, K, X_context, X_query, Y_query)
    (k, d), c, q = V.shape[-2:], X_context.shape[-2], X_query.shape[-2]
    batch = torch.broadcast_shapes(*(t.shape[:-2] for t in (V, K, X_context, X_query, Y_query)))
    inputs = [
        t.to(V.dtype).expand(*batch, *shape).contiguous()
        for t, shape in (
            (V, (k, d)),
            (K, (d, d)),
            (X_context, (c, d)),
            (X_query, (q, d)),
            (Y_query, (q, k)),
        )
    ]
    loss = V.new_empty(batch)
    grad_V, grad_K = V.new_empty(*batch, k, d), V.new_empty(*batch, d, d)
    pointers = [t.data_ptr() for t in (*inputs, loss, grad_V, grad_K)]
    kernel(loss.numel(), c, q, d, k, *pointers, torch.get_num_threads())
    return loss, grad_V, grad_K


def _loss_and_gradients_torch(V, K, X_context, X_query, Y_query):
    d = X_context.shape[-1]
    P = torch.softmax(X_query @ K.transpose(-1, -2) @ X_context.transpose(-1, -2), dim=-1)
    outer = (X_context[..., :, None] * X_context[..., None, :]).flatten(-2)
    moments = P @ torch.cat([X_context, outer], dim=-1)
    M, C = moments[..., :d], moments[..., d:].unflatten(-1, (d, d))
    R = M @ V.transpose(-1, -2) - Y_query
    q = X_query.shape[-2]
    G = 2.0 * R / q
    grad_V = G.transpose(-1, -2) @ M
    g = G @ V
    h = (C @ g[..., None]).squeeze(-1) - (g * M).sum(dim=-1, keepdim=True) * M
    grad_K = h.transpose(-1, -2) @ X_query
    return R.square().sum(dim=(-2, -1)) / q, grad_V, grad_K
