"""Inputs and shape flags for running the BEVPoolV3 op under trtexec (C++ plugin library).

    python -m bevpool_ros.backends.tensorrt.trtexec_inputs --rig RIG.yaml --precision fp16 \\
        --arch sm_110 --out DIR [--onnx DIR/bevpool_op.onnx]

The map inputs (slots, pidx, empty_cells) are the V3 schedule of one calibration: trtexec's
random inputs would be random indices, and the kernel would read out of bounds. This writes them,
and valid depth/feat inputs, as raw files in the engine's dtypes (DIR/<input>.bin), prints the
trtexec flags (build: the map inputs' optimisation profile; run: their shapes and --loadInputs)
and, with --onnx, the one-node ONNX model of the op (what bevpool-onnx-insert puts into a
network, for the same --rig/--precision/--arch: the schedule fits both).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def shape_flag(shapes: dict) -> str:
    return ",".join(f"{n}:{'x'.join(str(int(v)) for v in s)}" for n, s in shapes.items())


def write_inputs(smap, cfg, sched, out: Path, seed: int = 0) -> dict:
    """{input name: file} for every plugin input: depth in [0, 1), features in [-1, 1)."""
    from ...kernels import fp8
    from .plugin_config import map_inputs

    rng = np.random.default_rng(seed)
    depth = rng.random(smap.depth_shape).astype(np.float32)
    feat = rng.uniform(-1, 1, smap.feat_shape).astype(np.float32)
    if cfg.precision == "fp16":
        arrays = {"depth": depth.astype(np.float16), "feat": feat.astype(np.float16)}
    else:
        arrays = {"depth": fp8.quantize(depth, 1.0), "feat": fp8.quantize(feat, 1.0)}
    arrays.update(map_inputs(cfg, smap, sched))
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, arr in arrays.items():
        files[name] = out / f"{name}.bin"
        files[name].write_bytes(np.ascontiguousarray(arr).tobytes())
    return {"files": files, "shapes": {n: a.shape for n, a in arrays.items()}}


def trtexec_flags(cfg, written: dict) -> dict:
    maps = cfg.inputs[2:]
    profile = {n: cfg.profile(n) for n in maps}
    return {
        "build": " ".join(
            f"--{k}Shapes={shape_flag({n: profile[n][i] for n in maps})}"
            for i, k in enumerate(("min", "opt", "max"))
        ),
        "run": f"--shapes={shape_flag({n: written['shapes'][n] for n in maps})} --loadInputs="
        + ",".join(f"{n}:{f}" for n, f in written["files"].items()),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--rig", help="rig YAML (config/rigs/...): shapes, grid, one calibration")
    src.add_argument("--workload", help="named workload (bevpool_ros.workloads)")
    ap.add_argument("--precision", default="fp16", choices=("fp16", "fp8"))
    ap.add_argument("--arch", default="sm_89", help="target compute capability (kernel choice)")
    ap.add_argument("--out", required=True, type=Path, help="folder for the input files")
    ap.add_argument("--onnx", type=Path, help="also write the one-node ONNX model of the op here")
    args = ap.parse_args(argv)
    try:
        from .builder import plugin_config_for
        from .prebuild import map_or_none
        from .targets import known_target

        smap = map_or_none(args, "bevpool-trtexec-inputs")
        if smap is None:
            return 2
        cfg, sched = plugin_config_for(smap, args.precision, known_target(args.arch))
        written = write_inputs(smap, cfg, sched, args.out)
        report = {"kernel": cfg.plan.kernel, **trtexec_flags(cfg, written)}
        if args.onnx:
            from .network import onnx_model_bytes

            args.onnx.write_bytes(onnx_model_bytes(cfg))
            report["onnx"] = str(args.onnx)
    except (ImportError, OSError, RuntimeError, ValueError, KeyError) as e:
        print(f"trtexec_inputs failed: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
