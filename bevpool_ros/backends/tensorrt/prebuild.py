"""Prebuild TensorRT-RTX engines into the engine cache, ahead of time, on a machine without a GPU.

    python -m bevpool_ros.backends.tensorrt.prebuild --workload canonical --arch sm_89 --precision fp8
    python -m bevpool_ros.backends.tensorrt.prebuild --rig my_rig.yaml --arch sm_120 --cache-dir DIR

The engine lands under the same key the node's TensorRTBackend looks up (builder.engine_key), so
a desktop RTX machine starts without building. Full TensorRT cannot prebuild: it builds on the GPU.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from ...progress import run_with_progress
from .builder import build_engine, engine_key, plugin_config_for
from .engine_cache import EngineCache
from .targets import Target, TargetError, known_target
from .trt_import import TensorRTMissing, load_tensorrt


def _map(args):
    if args.rig:
        from ...rig import load_rig
        from ...scatter_map import build_scatter_map

        return build_scatter_map(load_rig(args.rig))
    from ...workloads import get_workload

    return get_workload(args.workload)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--rig", help="rig YAML (config/rigs/...)")
    src.add_argument("--workload", help="named workload (bevpool_ros.workloads)")
    ap.add_argument("--arch", required=True, help="target compute capability, e.g. sm_89")
    ap.add_argument("--precision", default="fp16", choices=("fp16", "fp8"))
    ap.add_argument("--l2-mib", type=float, help="target L2 size (default: regime.KNOWN_GPUS for --arch)")
    ap.add_argument("--fp8-scales", type=float, nargs=2, default=(1.0, 1.0), metavar=("DEPTH", "FEAT"),
                    help="FP8 input scales the engine is built for (TensorRTBackend fp8_scales)")
    ap.add_argument("--cache-dir", help="engine cache folder (default: BEVPOOL_ENGINE_CACHE or ~/.cache/...)")
    ap.add_argument("--onnx", help="also write the one-node ONNX graph here (for inspection, e.g. Netron)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        lib = load_tensorrt()
        if not lib.is_rtx:
            raise TargetError(f"{lib.tag} builds on the GPU it runs on; prebuild needs TensorRT-RTX")
        target = (Target(args.arch, int(args.l2_mib * 2**20), f"L2 {args.l2_mib} MiB") if args.l2_mib
                  else known_target(args.arch))
        smap = _map(args)
        opts = {"out_scale": 1.0 / (args.fp8_scales[0] * args.fp8_scales[1]) if args.precision == "fp8" else 1.0}
        cfg, sched = plugin_config_for(smap, args.precision, target, **opts)
        key = engine_key(lib, smap, target, args.precision, cfg, sched)
        built = run_with_progress("TensorRT engine build", build_engine, lib, smap, args.precision, target, **opts)
    except (TensorRTMissing, TargetError, RuntimeError, ValueError, OSError) as e:
        print(f"prebuild failed: {e}", file=sys.stderr)
        return 1
    if args.onnx:
        from .network import onnx_model_bytes
        from .plugin_config import constant_arrays

        with open(args.onnx, "wb") as f:
            f.write(onnx_model_bytes(cfg, constant_arrays(cfg, smap, sched)))
    path = EngineCache(args.cache_dir).store(key, built.data)
    print(json.dumps({"engine": str(path), "bytes": len(built.data), "arch": target.arch,
                      "precision": args.precision, "kernel": cfg.plan.kernel, "grid": cfg.plan.grid,
                      "block": cfg.plan.block, "tensorrt": lib.tag, "build_s": round(built.build_s, 3)}))
    return 0 if path else 1


if __name__ == "__main__":
    sys.exit(main())
