"""Build the hand-off core, libbevpool_handoff.so, beside its sources (or into ``--out``).

    python -m bevpool_ros.handoff.native.build        # what setup.py and scripts/gpu_check.sh run

It needs a C++17 compiler only (``$CXX``, else c++ or g++): the CUDA driver is opened at run time
(cuda_driver.h declares the few calls), Python is reached through ctypes. The library carries a
digest of its sources; core.py refuses a library built from other sources than those beside it.
Standard library only: setup.py loads this file by path, before any dependency is installed.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIBRARY = "libbevpool_handoff.so"
FLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra", "-pthread")


class BuildError(RuntimeError):
    """The core could not be built here (no compiler, a compile error)."""


def sources(folder: Path = HERE) -> list[Path]:
    return sorted(folder.glob("*.cpp"))


def digest(folder: Path = HERE) -> str:
    """What a library built from ``folder``'s sources reports (bp_source_digest); "" without sources."""
    files = sorted([*folder.glob("*.cpp"), *folder.glob("*.h")])
    if not files:
        return ""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++"):
        if name and shutil.which(name):
            return name
    raise BuildError("no C++ compiler (c++, g++ or $CXX) on PATH")


def build(out_dir: Path = HERE, src_dir: Path = HERE) -> Path:
    """Compile and link the core of ``src_dir`` into ``out_dir``/libbevpool_handoff.so (replaced
    atomically)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIBRARY
    cxx = compiler()
    fd, tmp = tempfile.mkstemp(prefix=".libbevpool_handoff.", suffix=".so", dir=out_dir)
    os.close(fd)
    cmd = [cxx, *FLAGS, f'-DBP_SOURCE_DIGEST="{digest(src_dir)}"', *map(str, sources(src_dir)), "-o", tmp, "-ldl"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"{cmd[0]} failed:\n{proc.stderr.strip()[-3000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=HERE, help="folder for the library (default: beside its sources)")
    args = ap.parse_args(argv)
    try:
        print(f"built {build(args.out)}")
    except BuildError as e:
        print(f"the hand-off core was not built: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
