"""The bindings of ntk_step.cpp, the NTK experiment's C++ CPU kernel (:mod:`sdyn.native`):
its GD loop (used by :func:`~.descent.gd`), output Jacobian (:func:`~.network.ntk_gram`) and
outputs (:func:`~.network.forward`)."""

from __future__ import annotations

import ctypes

import torch

from sdyn import native
from sdyn.experiments.ntk.config import ACTIVATIONS

_KERNEL_SOURCE = native.SOURCES / "ntk_step.cpp"
_KERNEL_MAX_D = 64  # ntk_step.cpp keeps a block's inputs on the stack


def cpp_function(W: torch.Tensor, name: str = "gd"):
    """The C++ function ``ntk_<name>_<dtype>`` of ntk_step.cpp (``gd``: the GD loop,
    ``jacobian``: the output Jacobian, ``forward``: the outputs) for W's dtype, or None where it
    does not apply (GPU, d > 64, no build)."""
    real = {torch.float64: ctypes.c_double, torch.float32: ctypes.c_float}.get(W.dtype)
    if W.device.type != "cpu" or W.shape[-2] > _KERNEL_MAX_D or real is None:
        return None
    suffix = "f64" if W.dtype == torch.float64 else "f32"
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    per_block = [i64] * 5 + [ctypes.c_int] + [ptr] * 4 + [i64]  # jacobian, forward
    argtypes = {
        "gd": [i64] * 5 + [ctypes.c_int] + [ptr] * 7 + [real, i64, i64] + [ptr] * 4 + [i64],
        "jacobian": per_block,
        "forward": per_block,
    }[name]
    return native.function(_KERNEL_SOURCE, f"ntk_{name}_{suffix}", argtypes)


def bundle_kernel(name: str, W, a, X, activation: str, shape: tuple[int, ...]):
    """The output, ``(B, *shape)``, of ntk_step.cpp's ``name`` (``forward`` or ``jacobian``) on a
    bundle: W ``(B, d, m)``, a ``(B, d_out, m)``, X ``(B, n, d)``, none requiring grad. None where
    the kernel does not apply (other shapes, autograd, or see :func:`cpp_function`)."""
    bundle = W.dim() == a.dim() == X.dim() == 3 and W.shape[0] == a.shape[0] == X.shape[0]
    plain = not (W.requires_grad or a.requires_grad or X.requires_grad)
    kernel = cpp_function(W, name) if bundle and plain and activation in ACTIVATIONS else None
    if kernel is None:
        return None
    W, a, X = (t.to(W.dtype).contiguous() for t in (W, a, X))
    out = W.new_empty(W.shape[0], *shape)
    ptrs = (t.data_ptr() for t in (W, a, X, out))
    code = ACTIVATIONS.index(activation)
    (B, d, m), n, d_out = W.shape, X.shape[1], a.shape[1]
    kernel(B, n, d, m, d_out, code, *ptrs, torch.get_num_threads())
    return out
