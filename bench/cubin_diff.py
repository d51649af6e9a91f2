"""Kernel machine code of two checkouts, compared per kernel (NVRTC, no GPU needed).

    python bench/cubin_diff.py OLD_CHECKOUT [NEW_CHECKOUT] [--arch sm_90 sm_110] [--json OUT]

Each checkout compiles its own plugin/ with its own bevpool_ros (a private kernel cache per tree);
every kernel's .text section is compared byte for byte. Identical machine code means a refactor
cannot have changed what the kernels compute or how fast they run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "test"))
from cubin_elf import parse  # noqa: E402


def kernel_image(tree: Path, arch: str, cache: Path) -> bytes:
    # the NVRTC build moved from backends/cuda/ to device/: each tree compiles with its own
    module = "device" if (tree / "bevpool_ros" / "device").is_dir() else "backends.cuda"
    code = (f"import sys, bevpool_ros; assert bevpool_ros.__file__.startswith({str(tree)!r}); "
            f"from bevpool_ros.{module}.nvrtc_build import get_kernel_image; "
            f"sys.stdout.buffer.write(get_kernel_image({arch!r}))")
    env = dict(os.environ, BEVPOOL_KERNEL_CACHE=str(cache), PYTHONPATH=str(tree))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True, cwd=tree).stdout


def compare(old: Path, new: Path, arch: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        a = parse(kernel_image(old, arch, Path(tmp) / "old"))
        b = parse(kernel_image(new, arch, Path(tmp) / "new"))
    both = sorted(set(a.code) & set(b.code))
    return {"arch": arch, "kernels_old": len(a.code), "kernels_new": len(b.code),
            "identical": sum(a.code[k] == b.code[k] for k in both),
            "different": [k for k in both if a.code[k] != b.code[k]],
            "only_new": sorted(set(b.code) - set(a.code)), "only_old": sorted(set(a.code) - set(b.code))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path, nargs="?", default=ROOT)
    ap.add_argument("--arch", nargs="+", default=["sm_90", "sm_110"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = [compare(args.old.resolve(), args.new.resolve(), arch) for arch in args.arch]
    for r in rows:
        print(json.dumps(r))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if all(not r["different"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
