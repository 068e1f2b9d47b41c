"""The fused NTK step's Triton kernels (``sdyn/experiments/ntk/fused.py``) compiled for a GPU
architecture on a machine without one: Triton's ahead-of-time compile to a cubin (its bundled
ptxas), then each kernel's registers per thread, local memory (register spills) and shared
memory, read from the cubin (its bundled cuobjdump).

A kernel that does not compile for the GPU fails here, before any GPU is lent; a block choice
that spills, or that holds so many registers that few warps fit on a multiprocessor, shows here
too. It measures no time.

    python benchmarks/fused_compile.py                          # sm_90 (H100, H200), the defaults
    python benchmarks/fused_compile.py --blocks 64x8x4,128x4x4  # other BLOCK_M x BLOCK_N x warps
    python benchmarks/fused_compile.py --arch 80 --dtype float32

Exit status 1 if a kernel spills (local memory > 0); a compile error raises.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import subprocess
import sys
import tempfile

if os.environ.get("TRITON_INTERPRET") == "1":  # the kernels must be decorated for compiling
    sys.exit("fused_compile.py: unset TRITON_INTERPRET (it makes the kernels interpreted)")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from sdyn.experiments.ntk import fused  # noqa: E402
from sdyn.experiments.ntk.config import ACTIVATIONS  # noqa: E402

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
# The kernels' non-float arguments; every other non-constexpr argument is a pointer to floats.
TYPES = {"sizes": "*i32", "widths": "*i32", "hit": "*i64", "T": "*i64", "active": "*i1"}
TYPES |= {"diverged": "*i1", "divergence": "fp32"}
TYPES |= dict.fromkeys(("N", "M", "NBLK", "B", "CHUNKS"), "i32")


def usage(kernel, constexprs: dict, real: str, arch: int, num_warps: int) -> dict:
    """Compile ``kernel`` with ``constexprs`` (name: value) for ``sm_<arch>``; its registers per
    thread, local memory (bytes per thread: spills) and shared memory (bytes per block)."""
    names = list(inspect.signature(kernel.fn).parameters)
    signature = {p: "constexpr" if p in constexprs else TYPES.get(p, f"*{real}") for p in names}
    fixed = {(i,): constexprs[p] for i, p in enumerate(names) if p in constexprs}
    compiled = triton.compile(
        ASTSource(fn=kernel, signature=signature, constexprs=fixed),
        target=GPUTarget("cuda", arch, 32),
        options={"num_warps": num_warps},
    )
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        out = subprocess.run(
            [CUOBJDUMP, "--dump-resource-usage", cubin.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    found = {k: int(re.search(rf"{k}:(\d+)", out).group(1)) for k in ("REG", "LOCAL", "SHARED")}
    return {
        "registers": found["REG"],
        "local_bytes": found["LOCAL"],
        "shared_bytes": found["SHARED"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90)")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--d", type=int, default=8, help="input dimension (8)")
    parser.add_argument("--d-out", type=int, default=1, help="output dimension (1)")
    parser.add_argument("--activations", default="softmax", help="comma-separated (softmax)")
    default = f"{fused.BLOCK_M}x{fused.BLOCK_N}x{fused.NUM_WARPS}"
    parser.add_argument("--blocks", default=default, help=f"MxNxW,... (default {default})")
    args = parser.parse_args()
    real = {"float64": "fp64", "float32": "fp32"}[args.dtype]
    d, d_out = args.d, args.d_out
    shape = {"D": d, "DP": triton.next_power_of_2(d), "D_OUT": d_out}
    shape["DOP"] = triton.next_power_of_2(d_out)
    print(f"Triton {triton.__version__}, sm_{args.arch}, {args.dtype}, d {d}, d_out {d_out}")
    spills = 0
    for activation in args.activations.split(","):
        code = ACTIVATIONS.index(activation)
        for blocks in args.blocks.split(","):
            bm, bn, warps = map(int, blocks.split("x"))
            per_block = shape | {"ACT": code, "BM": bm, "BN": bn}
            rows = {
                "_partials": usage(fused._partials, per_block, real, args.arch, warps),
                "_gradient_step": usage(fused._gradient_step, per_block, real, args.arch, warps),
            }
            for name, r in rows.items():
                spills += r["local_bytes"] > 0
                print(f"{activation} {blocks}: {name}: {r}")
        per_point = {"D_OUT": d_out, "DOP": shape["DOP"], "ACT": code, "BM": fused.BLOCK_M}
        per_point["BP"] = fused.BLOCK_POINTS
        r = usage(fused._outputs, per_point, real, args.arch, 4)
        spills += r["local_bytes"] > 0
        print(f"{activation}: _outputs: {r}")
    r = usage(fused._status, {"BB": 8}, real, args.arch, 4)
    spills += r["local_bytes"] > 0
    print(f"_status (8 runs): {r}")
    return 1 if spills else 0


if __name__ == "__main__":
    sys.exit(main())
