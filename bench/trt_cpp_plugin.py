#!/usr/bin/env python3
"""The TensorRT C++ plugin library on a real GPU, without TensorRT: enqueue checked and timed.

    python bench/trt_cpp_plugin.py [--build-dir DIR] [--headers INCLUDE_DIR] [--iters 300]
                                   [--out DIR]

Builds libbevpool_trt_plugin.so for this GPU (scripts/build_trt_plugin.sh) unless --build-dir
already holds it, then for the nuScenes rig (two calibrations through one plugin config) and two
rig variants (C=17 on the narrow kernels, C=64 with two height layers), FP16 and FP8 (SM89+):
the driver program (plugin/trt/test/plugin_driver.cpp) plays TensorRT's part (creator, build
phase, serialize, runtime plugin, clone, onShapeChange, attachToContext) and enqueues over a
NaN-poisoned output, eagerly and captured in a CUDA graph, against the FP64 reference, with the
host time per enqueue call. Each output is also compared with the NVRTC build's (the Python
plugin's enqueue through backends/tensorrt/standin.py on the same inputs): identical bits, and
so is the graph replay. A static V2 plan (memset + the atomic baseline kernel) runs once at FP16
against the reference only (atomics sum in no fixed order).
Writes trt_cpp_plugin_h200.json (trt_cpp_plugin.json on another GPU) with all_ok under --out.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "test")]

import rig_variants as V  # noqa: E402
import trt_cpp_cases as T  # noqa: E402
from tensorrt_helpers import recalibrated  # noqa: E402

from bevpool_ros.backends.tensorrt import standin  # noqa: E402
from bevpool_ros.backends.tensorrt.plugin_config import map_inputs  # noqa: E402
from bevpool_ros.backends.tensorrt.targets import Target  # noqa: E402
from bevpool_ros.device.runtime import get_runtime  # noqa: E402
from bevpool_ros.scatter_map import build_scatter_map  # noqa: E402
from bevpool_ros.workloads import base_rig  # noqa: E402

SEED = 40


def rig_maps() -> dict:
    rig = base_rig()
    return {
        "nuscenes": [build_scatter_map(rig), build_scatter_map(recalibrated(rig))],
        "tri_c17": [build_scatter_map(V.rig("tri_c17"))],
        "quad_c64_d40_z2": [build_scatter_map(V.rig("quad_c64_d40_z2"))],
    }


def nvrtc_outputs(rt, cfg, maps, scheds) -> list[np.ndarray]:
    """The Python plugin (NVRTC kernels) on the inputs the case holds, one output per run."""
    ctx = standin.ExecutionContext(rt, cfg)
    try:
        outs = []
        for k, (smap, sched) in enumerate(zip(maps, scheds)):
            ctx.set_map(map_inputs(cfg, smap, sched))
            _, _, d_in, f_in = T.random_inputs(smap, cfg.precision, SEED + k)
            ctx.upload(d_in, f_in)
            outs.append(np.asarray(ctx.result(replay=False)))
        return outs
    finally:
        ctx.close()


def run_case(lib, driver, name, maps, configured, iters, work: Path, rt, bitwise=True) -> dict:
    """One case: ``configured`` = (plugin config, schedules); ``bitwise``: compare with the NVRTC
    build bit for bit (V3: no atomics; the V2 baseline's atomics may sum in another order)."""
    cfg, scheds = configured
    precision = cfg.precision
    case = T.write_case(work / name, cfg, maps, scheds, with_data=True, seed=SEED)
    res = T.run_driver(driver, lib, case, gpu=True, iters=iters)
    rec = {
        "kernel": cfg.plan.kernel,
        "block": cfg.plan.block[0],
        "channels": cfg.channels,
        "points": [m.num_points for m in maps],
        "driver_ok": bool(res.get("ok")),
        "runs": res.get("runs", []),
        "failed_steps": [s for s, ok in res.get("steps", {}).items() if not ok],
    }
    if not res.get("ok"):
        rec["error"] = res.get("error") or res.get("stderr", "")[-600:]
    try:
        if not bitwise:
            raise LookupError("not compared: atomics")
        reference = nvrtc_outputs(rt, cfg, maps, scheds)
        ours = [T.read_output(case, k, precision, cfg.output_shape) for k in range(len(maps))]
        rec["equals_nvrtc_build"] = [
            bool(np.array_equal(a, b, equal_nan=True)) for a, b in zip(ours, reference)
        ]
    except LookupError:
        rec["equals_nvrtc_build"] = "not compared (atomics)"
    except Exception as e:  # report, never hide the driver's own results
        rec["equals_nvrtc_build"] = [False]
        rec["nvrtc_error"] = f"{type(e).__name__}: {e}"[:400]
    same = rec["equals_nvrtc_build"]
    replays = all(r.get("graph_equals_eager") for r in rec["runs"])
    rec["ok"] = (
        rec["driver_ok"]
        and len(rec["runs"]) == len(maps)
        and (not bitwise or (all(same) and replays))
    )
    print(f"{name}: {json.dumps(rec)}", flush=True)
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build" / "trt_plugin_gpu")
    ap.add_argument(
        "--headers", type=Path, default=None, help="TensorRT include folder (default 10.13 set)"
    )
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("."))
    args = ap.parse_args(argv)
    rt = get_runtime(0)
    dev = rt.device
    sm = dev.major * 10 + dev.minor
    lib, driver = (
        args.build_dir / "libbevpool_trt_plugin.so",
        args.build_dir / "bevpool_trt_plugin_driver",
    )
    build_s = 0.0
    if not (lib.is_file() and driver.is_file()):
        headers = args.headers or T.headers("10.13")
        if headers is None:
            print("no TensorRT headers: pass --headers or set BEVPOOL_TRT_HEADERS", file=sys.stderr)
            return 2
        t0 = time.monotonic()
        try:
            lib, driver, _ = T.build(args.build_dir, headers, f"{sm}-real")
        except (RuntimeError, OSError) as e:  # the report says why, with the build log's tail
            print(f"build failed: {e}", file=sys.stderr)
            return 1
        build_s = time.monotonic() - t0
    target = Target(dev.arch, int(dev.l2_bytes), dev.name)
    precisions = ["fp16"] + (["fp8"] if sm >= 89 else [])
    results = {}
    with tempfile.TemporaryDirectory(prefix="bevpool_trt_cpp_") as work:
        for name, maps in rig_maps().items():
            for p in precisions:
                configured = T.config(maps, p, target)
                results[f"{name}_{p}"] = run_case(
                    lib, driver, f"{name}_{p}", maps, configured, args.iters, Path(work), rt
                )
        # the static-plan path (a V2 plan: memset, then the baseline kernel), reference only
        nuscenes = rig_maps()["nuscenes"][:1]
        results["nuscenes_v2_fp16"] = run_case(
            lib,
            driver,
            "nuscenes_v2_fp16",
            nuscenes,
            T.v2_config(nuscenes[0], target),
            args.iters,
            Path(work),
            rt,
            bitwise=False,
        )
    report = {
        "device": dev.name,
        "arch": dev.arch,
        "python": platform.python_version(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "build_s": round(build_s, 1),
        "iters": args.iters,
        "what": "libbevpool_trt_plugin.so driven as TensorRT would (no TensorRT): creator -> "
        "build phase -> serialize -> runtime plugin -> clone -> onShapeChange -> attachToContext "
        "-> enqueue "
        "(eager and CUDA graph) over NaN-poisoned outputs vs the FP64 reference, and bitwise "
        "vs the NVRTC build (Python plugin) on the same inputs; host time per enqueue call",
        "results": results,
        "all_ok": all(r["ok"] for r in results.values()),
    }
    name = "trt_cpp_plugin_h200.json" if "H200" in dev.name else "trt_cpp_plugin.json"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / name).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out / name}; all_ok={report['all_ok']}")
    return 0 if report["all_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
