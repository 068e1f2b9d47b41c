"""The wheelhouse a GPU machine needs to run a sweep end to end, built here into ``.whl/``.

The GPU machines this project is lent (one H100 or H200, Python 3.12, CUDA torch) have no Ray,
MLflow or Hydra, reach no package registry, and take at most 64 MiB of files per call, the
working tree included. On a machine that reaches PyPI, this script:

1. downloads the cp312 manylinux wheels of Ray, mlflow-skinny (sdyn uses MLflow's client and
   its SQLAlchemy store, not the server's web UI that the full ``mlflow`` wheel adds), Hydra,
   OmegaConf, SQLAlchemy and Alembic (the SQLite store's schema) and of everything they need,
   at the versions installed here (those sdyn's tests pass with);
2. leaves out what the GPU machines' image already has (``gpu_image_packages.txt``);
3. repacks Ray without :data:`RAY_UNUSED` (Java, the dashboard's web pages, and libraries of
   Ray that sdyn never imports) and with its binaries' symbol tables stripped (``strip
   --strip-unneeded``: Ray ships them unstripped), its ``RECORD`` rewritten so that pip
   accepts it;
4. builds the wheels PyPI has only as source (:data:`SOURCE_ONLY`, pure Python) and sdyn's own
   (its entry points register the experiments);
5. with ``--baseline REF``, puts the code of git ref REF into ``OUT/baseline/`` (for
   ``throughput.py --baseline``: the GPU machine has the working tree, not ``.git``);
6. prints every file's size and the total, and exits 1 if the total is over :data:`LIMIT`.

    python benchmarks/gpu_wheelhouse.py --baseline 15688a7      # into .whl/ (.gitignore has it)

A GPU session then carries ``.whl`` and runs ``benchmarks/gpu_e2e.sh``, which installs the
wheels with ``pip install --no-index --no-deps --target /tmp/site .whl/*.whl``.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.metadata
import io
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
IMAGE = Path(__file__).with_name("gpu_image_packages.txt")
# What sdyn needs on the GPU machine beyond its image; the closure of their requirements follows.
TOP = ("ray", "mlflow-skinny", "hydra-core", "omegaconf", "sqlalchemy", "alembic")
SOURCE_ONLY = ("antlr4-python3-runtime",)  # Hydra's and OmegaConf's parser: no wheel on PyPI
# Parts of Ray's wheel that sdyn never loads: Java (ray.cross_language only names it), the
# dashboard's web pages (sdyn starts Ray with include_dashboard=False) and Ray's libraries (sdyn
# uses Ray core alone: tasks, actors, ray.wait).
RAY_UNUSED = (
    "ray/jars/",
    "ray/dashboard/client/build/",
    *(f"ray/{library}/" for library in ("data", "llm", "rllib", "serve", "train", "tune")),
)
# pip download's manylinux tags for the machine's glibc (Python 3.12, x86-64).
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
MIB = 2**20
# The call's 64 MiB hold the working tree (about 4 MiB) and what is carried.
LIMIT = 58 * MIB


def normalise(name: str) -> str:
    """A distribution's name as PEP 503 compares them: ``PyYAML`` -> ``pyyaml``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> set[str]:
    """The GPU image's packages (``gpu_image_packages.txt``), normalised."""
    lines = IMAGE.read_text().splitlines()
    return {normalise(line) for line in lines if line and not line.startswith("#")}


def wheel_name(path: Path) -> str:
    """The normalised distribution name of a wheel file (``PyYAML-6.0-...whl`` -> ``pyyaml``)."""
    return normalise(path.name.split("-")[0])


def pip(*args: str) -> None:
    """Run this interpreter's pip; raises CalledProcessError (its output shown) on failure."""
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def constraints(folder: Path) -> Path:
    """A pip constraints file pinning every distribution installed here to its version."""
    pins = sorted(
        {
            f"{normalise(d.metadata['Name'])}=={d.version}"
            for d in importlib.metadata.distributions()
            if d.metadata["Name"] and "+" not in d.version  # local builds (torch+cpu) unpinned
        }
    )
    path = folder / "constraints.txt"
    path.write_text("\n".join(pins) + "\n")
    return path


def record_line(name: str, data: bytes) -> list[str]:
    """A RECORD row (PEP 376/427): path, urlsafe-base64 sha256 without padding, size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def stripped(data: bytes, work: Path) -> bytes:
    """An ELF binary (executable or shared library) without its symbol table and debugging
    sections (``strip --strip-unneeded``: the dynamic symbols that loading needs stay);
    anything else unchanged.

    Raises:
        CalledProcessError: ``strip`` failed; FileNotFoundError: no ``strip`` (binutils).
    """
    if not data.startswith(b"\x7fELF"):
        return data
    path = work / "binary"
    path.write_bytes(data)
    subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
    return path.read_bytes()


def repack(wheel: Path, unused: tuple[str, ...], out: Path, work: Path) -> Path:
    """``wheel`` without the members under the prefixes ``unused``, its binaries
    :func:`stripped` (``work``: a scratch folder), its RECORD rewritten (each kept member's
    hash and size, RECORD itself unhashed), deflated at the highest level.

    Returns the new wheel's path (same file name, in ``out``).
    """
    target = out / wheel.name
    with zipfile.ZipFile(wheel) as source:
        members = [i for i in source.infolist() if not i.filename.startswith(unused)]
        record = next(i.filename for i in members if i.filename.endswith(".dist-info/RECORD"))
        rows = []
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as sink:
            for info in members:
                if info.filename == record:
                    continue
                data = stripped(source.read(info), work)
                sink.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                if not info.is_dir():
                    rows.append(record_line(info.filename, data))
            text = io.StringIO()
            csv.writer(text, lineterminator="\n").writerows([*rows, [record, "", ""]])
            sink.writestr(record, text.getvalue(), compress_type=zipfile.ZIP_DEFLATED)
    return target


def download(work: Path) -> list[Path]:
    """The cp312 wheels of :data:`TOP` and their requirements, into ``work`` (pins: the
    versions installed here; :data:`SOURCE_ONLY` built here from their source)."""
    pinned = [f"{name}=={importlib.metadata.version(name)}" for name in TOP]
    built = [f"{name}=={importlib.metadata.version(name)}" for name in SOURCE_ONLY]
    pip("wheel", "--no-deps", "--quiet", "-w", str(work), *built)
    tags = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    pip(
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--implementation",
        "cp",
        *tags,
        "-c",
        str(constraints(work)),
        "--find-links",
        str(work),
        "-d",
        str(work),
        *pinned,
    )
    return sorted(work.glob("*.whl"))


def build_sdyn(work: Path, out: Path) -> Path:
    """sdyn's wheel, built from a copy of the checkout's sources in ``work`` (building writes
    ``build/`` and ``*.egg-info`` beside them), into ``out``."""
    source = work / "sdyn-source"
    skip = shutil.ignore_patterns("__pycache__")
    for name in ("pyproject.toml", "README.md", "LICENSE", "sdyn"):
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=skip)
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    pip("wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out), str(source))
    return next(out.glob("sdyn-*.whl"))


def baseline(ref: str, out: Path) -> Path:
    """The ``sdyn`` package of git ref ``ref`` under ``out/baseline/`` (replacing any there),
    its commit in ``out/baseline/COMMIT``.

    Raises:
        SystemExit: ``ref`` is not a commit of this repository.
    """
    found = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if found.returncode:
        raise SystemExit(f"gpu_wheelhouse.py: --baseline {ref}: not a commit of {REPO}")
    target = out / "baseline"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", ref, "sdyn"], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    (target / "COMMIT").write_text(found.stdout)
    return target


def size(path: Path) -> int:
    """Bytes of a file, or of every file under a folder."""
    return path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(REPO / ".whl"), help="the wheelhouse (.whl/)")
    parser.add_argument("--baseline", metavar="REF", help="also put REF's sdyn in OUT/baseline/")
    args = parser.parse_args()
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    present = image_packages()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for wheel in download(work):
            name = wheel_name(wheel)
            if name == "ray":
                repack(wheel, RAY_UNUSED, out, work)
            elif name not in present:
                shutil.copy2(wheel, out)
        build_sdyn(work, out)
    if args.baseline:
        baseline(args.baseline, out)
    entries = sorted(out.iterdir(), key=size, reverse=True)
    total = sum(map(size, entries))
    for entry in entries:
        print(f"{size(entry) / MIB:8.2f} MiB  {entry.name}")
    limit = f"limit {LIMIT / MIB:.0f} MiB"
    print(f"{total / MIB:8.2f} MiB  in all, {len(entries)} entries in {out} ({limit})")
    if total > LIMIT:
        raise SystemExit(f"gpu_wheelhouse.py: {total / MIB:.1f} MiB, over the {limit}")


if __name__ == "__main__":
    main()
