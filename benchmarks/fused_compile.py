"""The fused NTK step's Triton kernels (``sdyn/experiments/ntk/fused.py``) compiled for a GPU
architecture on a machine without one: Triton's ahead-of-time compile to a cubin (its bundled
ptxas), then each kernel's registers per thread, local memory (register spills) and shared
memory, read from the cubin (its bundled cuobjdump).

A kernel that does not compile for the GPU fails here, before any GPU is lent; a block choice
that spills, or that holds so many registers that few warps fit on a multiprocessor, shows here
too. It measures no time.

    python benchmarks/fused_compile.py                          # sm_90 (H100, H200), the defaults
    python benchmarks/fused_compile.py --blocks 64x64x512x64x16x4    # other fused.Blocks
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
from collections import Counter

if os.environ.get("TRITON_INTERPRET") == "1":  # the kernels must be decorated for compiling
    sys.exit("fused_compile.py: unset TRITON_INTERPRET (it makes the kernels interpreted)")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from sdyn.experiments.ntk import fused  # noqa: E402

CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
# The kernels' non-float arguments; every other non-constexpr argument is a pointer to floats.
TYPES = {"sizes": "*i32", "widths": "*i32", "hit": "*i64", "T": "*i64", "active": "*i1"}
TYPES |= {"diverged": "*i1", "divergence": "fp32"}
TYPES |= dict.fromkeys(("N", "M", "SEGS", "B", "CHUNKS"), "i32")


def usage(kernel, constexprs: dict, real: str, arch: int, num_warps: int, pairs: int = 0) -> dict:
    """Compile ``kernel`` with ``constexprs`` (name: value) for ``sm_<arch>``; its registers per
    thread, local memory (bytes per thread: spills) and shared memory (bytes per block). With
    ``pairs``, the (point, neuron) pairs one iteration of the kernel's loop covers: the
    instructions of that loop (the longest backward branch of its machine code) per pair, all
    threads together, and those of them on the FP64 vector units (DFMA, DMUL, DADD; the tensor
    cores' DMMA not counted). An H100 multiprocessor issues 128 thread-instructions a cycle and
    does 64 FP64 vector operations, so these bound a loop's pairs per cycle (static counts:
    neither stalls nor the exponential's rare slow path are in them)."""
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
        out, sass = (
            subprocess.run(
                [CUOBJDUMP, flag, cubin.name], capture_output=True, text=True, check=True
            ).stdout
            for flag in ("--dump-resource-usage", "--dump-sass")
        )
    found = {k: int(re.search(rf"{k}:(\d+)", out).group(1)) for k in ("REG", "LOCAL", "SHARED")}
    r = {
        "registers": found["REG"],
        "local_bytes": found["LOCAL"],
        "shared_bytes": found["SHARED"],
    }
    if pairs:
        ops = _loop(sass)
        threads = 32 * num_warps / pairs
        r["instructions_per_pair"] = round(sum(ops.values()) * threads, 1)
        r["fp64_vector_per_pair"] = round(sum(ops[op] for op in FP64_VECTOR) * threads, 1)
    return r


FP64_VECTOR = ("DFMA", "DMUL", "DADD")
_INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+ )?([A-Z][A-Z0-9]*)([^;]*)")


def _loop(sass: str) -> Counter:
    """Opcode counts of the longest loop of a kernel's SASS (``cuobjdump --dump-sass``): the
    instructions from a backward branch's target to the branch."""
    code = [(int(m[1], 16), m[2], m[3]) for m in map(_INSTRUCTION.match, sass.splitlines()) if m]
    loops = [
        (int(target[1], 16), at)
        for at, op, rest in code
        if op == "BRA" and (target := re.search(r"0x([0-9a-f]+)", rest)) and int(target[1], 16) < at
    ]
    start, end = max(loops, key=lambda loop: loop[1] - loop[0])
    return Counter(op for at, op, _ in code if start <= at <= end)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90)")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--d", type=int, default=8, help="input dimension (8)")
    parser.add_argument("--d-out", type=int, default=1, help="output dimension (1)")
    parser.add_argument("--activations", default="softmax", help="comma-separated (softmax)")
    default = str(fused.BLOCKS)
    parser.add_argument("--blocks", default=default, help=f"PxCxSxMxNxW,... (default {default})")
    args = parser.parse_args()
    real = {"float64": "fp64", "float32": "fp32"}[args.dtype]
    d, d_out = args.d, args.d_out
    print(f"Triton {triton.__version__}, sm_{args.arch}, {args.dtype}, d {d}, d_out {d_out}")
    spills = 0
    for activation in args.activations.split(","):
        for text in args.blocks.split(","):
            b = fused.Blocks.parse(text)
            constants = fused.kernel_constants(d, d_out, activation, b)
            at = (real, args.arch, b.warps)
            rows = {
                "_partials": usage(
                    fused._partials, constants["_partials"], *at, b.points * b.chunk
                ),
                "_outputs": usage(fused._outputs, constants["_outputs"], real, args.arch, 4),
                "_gradient_step": usage(
                    fused._gradient_step, constants["_gradient_step"], *at,
                    b.neurons * b.point_chunk,
                ),
            }  # fmt: skip
            for name, r in rows.items():
                spills += r["local_bytes"] > 0
                print(f"{activation} {text}: {name}: {r}")
    r = usage(fused._status, {"BB": 8}, real, args.arch, 4)
    spills += r["local_bytes"] > 0
    print(f"_status (8 runs): {r}")
    return 1 if spills else 0


if __name__ == "__main__":
    sys.exit(main())
