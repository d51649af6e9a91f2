"""Prebuild engines into the engine cache (``bevpool-trt-build``), so the node starts without building.

    bevpool-trt-build --workload canonical --arch sm_89 --precision fp8        # TensorRT-RTX, no GPU
    bevpool-trt-build --rig my_rig.yaml --precision fp8 --tune                # full TensorRT, on the target

TensorRT-RTX builds ahead of time for ``--arch`` on any machine. Full TensorRT (JetPack/DriveOS
on DRIVE Thor, a desktop install) builds for the GPU it runs on: there the command runs the
node's own TensorRTBackend.prepare once (optionally tuning the launch on the live GPU), so the
engine and the tuned choice land under exactly the keys the node looks up. Either way the engine
serves every calibration of the rig (the map is an engine input).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys

from ...errors import BackendUnavailable
from ...kernels.planning import FP8_KERNEL_OUT_SCALE
from ...progress import run_with_progress
from .builder import build_engine, engine_key, plugin_config_for
from .engine_cache import EngineCache
from .network import onnx_model_bytes
from .targets import Target, TargetError, known_target
from .trt_import import TensorRTMissing, load_tensorrt


def map_or_none(args, prog: str):
    """The scatter map of ``--rig`` or ``--workload``; None after one line on stderr when the rig
    file is bad (the user's input: the tools exit 2)."""
    from ...rig import RigError

    try:
        if args.rig:
            from ...rig_yaml import load_rig
            from ...scatter_map import build_scatter_map

            return build_scatter_map(load_rig(args.rig))
        from ...workloads import get_workload

        return get_workload(args.workload)
    except RigError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--rig", help="rig YAML (config/rigs/...)")
    src.add_argument("--workload", help="named workload (bevpool_ros.workloads)")
    ap.add_argument("--arch", help="target compute capability, e.g. sm_89 (TensorRT-RTX: required; "
                                   "full TensorRT: the live GPU's, checked if given)")
    ap.add_argument("--precision", default="fp16", choices=("fp16", "fp8"))
    ap.add_argument("--l2-mib", type=float, help="target L2 size (default: regime.KNOWN_GPUS for --arch)")
    ap.add_argument("--tune", action="store_true", help="full TensorRT: tune the launch on this GPU first "
                                                         "(as the node's autotune would)")
    ap.add_argument("--cache-dir", help="engine cache folder (default: BEVPOOL_ENGINE_CACHE or ~/.cache/...)")
    ap.add_argument("--onnx", help="also write the one-node ONNX graph here (for inspection, e.g. Netron)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    smap = map_or_none(args, "bevpool-trt-build")
    if smap is None:
        return 2
    try:
        lib = load_tensorrt()
        report = _build_rtx(lib, smap, args) if lib.is_rtx else _build_on_gpu(smap, args)
    except (TensorRTMissing, TargetError, BackendUnavailable, RuntimeError, ValueError, OSError) as e:
        print(f"prebuild failed: {e}", file=sys.stderr)
        return 1
    print(json.dumps(report))
    return 0 if report.get("engine") else 1


def _out_scale(args) -> float:
    """As TensorRTBackend builds: fp8 kernels write with the core's fixed scale (input scales live on
    the device), so one fp8 engine serves every input scale."""
    return FP8_KERNEL_OUT_SCALE if args.precision == "fp8" else 1.0


def _build_rtx(lib, smap, args) -> dict:
    """TensorRT-RTX: AOT for --arch, no GPU needed."""
    if not args.arch:
        raise TargetError("TensorRT-RTX builds ahead of time: pass --arch (e.g. sm_89)")
    target = (Target(args.arch, int(args.l2_mib * 2**20), f"L2 {args.l2_mib} MiB") if args.l2_mib
              else known_target(args.arch))
    cfg, _ = plugin_config_for(smap, args.precision, target, out_scale=_out_scale(args))
    built = run_with_progress("TensorRT engine build", build_engine, lib, cfg, target)
    if args.onnx:
        with open(args.onnx, "wb") as f:
            f.write(onnx_model_bytes(cfg))
    path = EngineCache(args.cache_dir).store(engine_key(lib, cfg, target), built.data)
    return {"engine": str(path) if path else None, "bytes": len(built.data), "arch": target.arch,
            "precision": args.precision, "kernel": cfg.plan.kernel, "block": cfg.plan.block,
            "tensorrt": lib.tag, "build_s": round(built.build_s, 3)}


def _build_on_gpu(smap, args) -> dict:
    """Full TensorRT: the node's own prepare on this GPU (tuning if asked), engine into the cache."""
    from .backend import TensorRTBackend

    backend = TensorRTBackend(args.precision, cache_dir=args.cache_dir, autotune=args.tune)
    if args.arch and args.arch != backend.target.arch:
        raise TargetError(f"{backend.lib.tag} builds for this GPU ({backend.target.arch}), not {args.arch}")
    try:
        backend.prepare(smap)
        d = backend.describe()
        key, runner = backend.runners[backend.precision]
        path = backend.cache.path(key)
        if args.onnx:
            with open(args.onnx, "wb") as f:
                f.write(onnx_model_bytes(runner.cfg))
    finally:
        backend.close()
    return {"engine": str(path) if path and path.is_file() else None, "arch": d["arch"], "gpu": d["device"],
            "precision": d["precision"], "kernel": d.get("kernel"), "block": d.get("block"),
            "tensorrt": d["tensorrt"], "tuned": bool(args.tune), "engine_cache": d["engine_cache"]}


if __name__ == "__main__":
    sys.exit(main())
