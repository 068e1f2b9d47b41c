"""sdyn's C++ CPU kernels, and their loader: build with the machine's C++ compiler, once per
machine, and load.

The kernels live beside this file (:data:`SOURCES`): ``ntk_step.cpp`` (the NTK experiment's GD
loop, output Jacobian and outputs), ``attention_step.cpp`` (attention regression's loss and
gradients) and ``kernel.h`` (the vectorised exp and OpenMP helpers both use). Each experiment has
one step function that takes its kernel on a CPU and its PyTorch path elsewhere (a GPU, or where
no kernel builds): ``ntk.gd``, ``attention_regression.loss_and_gradients``.

A kernel is one C++ file with an ``extern "C"`` interface (it may include the headers next to
it), loaded with :mod:`ctypes`. It is compiled for the host CPU (``-march=native``), so the cached
library is keyed by the source and its headers, the flags, the compiler and the CPU's feature
flags: nodes of a cluster that share a home directory but differ in CPU each build their own.
Builds are atomic (compile to a temporary file, then rename), so concurrent Ray workers on one
machine never load a half-written library. Where no compiler works, :func:`load` warns once and
returns None, and the caller keeps its pure-PyTorch path, the same torch.compile itself needs.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

from sdyn import cache_dir

# SDYN_COMPILE=0 turns every compiled path off: these kernels, and torch.compile in the experiments.
ENABLED = os.environ.get("SDYN_COMPILE", "1") != "0"
FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-std=c++17", "-shared", "-fPIC")
# Built with OpenMP, a kernel shares a bundle's runs among threads. A compiler without it (e.g.
# Apple's clang) builds the same source single-threaded: its parallel pragmas are then ignored.
THREADING = (("-fopenmp",), ("-fopenmp-simd",))


SOURCES = Path(__file__).parent  # the .cpp and .h files, package data (pyproject.toml)


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.machine() + platform.processor()


@functools.cache
def load(source: Path) -> ctypes.CDLL | None:
    """The shared library built from ``source``, compiling it on first use on this machine.

    Compiler: ``$CXX``, else ``c++``. Compilation takes a few seconds, once: with OpenMP, or
    without where the compiler has none (see :data:`THREADING`).

    Returns:
        The loaded library, or None (with a ``RuntimeWarning``) when no compiler is found or
        the build fails.
    """
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        warnings.warn(f"no C++ compiler; {source.name} not built", RuntimeWarning, stacklevel=2)
        return None
    try:
        version = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, check=True
        ).stdout
        texts = [p.read_text() for p in [source, *sorted(source.parent.glob("*.h"))]]
        builds = []
        for threading in THREADING:
            flags = (*FLAGS, *threading)
            key = "\0".join([*texts, *flags, version, _cpu_flags()])
            digest = hashlib.sha256(key.encode()).hexdigest()[:16]
            builds.append((cache_dir() / f"{source.stem}-{digest}.so", flags))
        cached = [target for target, _ in builds if target.exists()]
        if cached:
            return ctypes.CDLL(str(cached[0]))
        for target, flags in builds:
            try:
                _build(compiler, flags, source, target)
                return ctypes.CDLL(str(target))
            except subprocess.CalledProcessError as exc:
                failure = exc  # the last one's error is reported
        raise failure
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        warnings.warn(
            f"could not build {source.name} ({detail.strip()[:200]})", RuntimeWarning, stacklevel=2
        )
        return None


def _build(compiler: str, flags: tuple[str, ...], source: Path, target: Path) -> None:
    """Compile ``source`` to ``target`` atomically (a temporary file, then a rename)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        subprocess.run(
            [compiler, *flags, str(source), "-o", str(built)],
            capture_output=True,
            text=True,
            check=True,
        )
        os.replace(built, target)


def function(source: Path, name: str, argtypes: list) -> Callable | None:
    """The ``extern "C"`` function ``name`` of the kernel built from ``source``, typed with
    ``argtypes`` (ctypes types), or None where the kernel cannot be built (see :func:`load`) or
    ``SDYN_COMPILE=0``."""
    lib = load(source) if ENABLED else None
    if lib is None:
        return None
    fn = getattr(lib, name)
    fn.argtypes, fn.restype = argtypes, None
    return fn
