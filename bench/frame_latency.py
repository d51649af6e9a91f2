#!/usr/bin/env python3
"""Per-frame cost of the node's pooling path without ROS: the GPU half of the latency budget.

    python bench/frame_latency.py --backend cuda --precision fp16 [--frames 300] [--out DIR]

Drives bevpool_node's own pooling stage (``PoolingWorker.process``: stack the six cameras'
tensors, ``backend.pool`` = validate + H2D + CUDA-graph replay + D2H + sync, finiteness check)
with synthetic nuScenes-rig frames at the wire dtype a GPU deployment sends (float16), and
reports p50/p99 of each stage plus the kernel alone (graph replay of the same launch). The
ROS half (DDS transport, message decode/encode, publish) is measured by bench/latency.py on
the machine that has rclpy; the H200 has none (README.md, "Benchmarks", says how they combine).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bevpool_ros.backends import create_backend  # noqa: E402
from bevpool_ros.node.calibration import LiveCalibration  # noqa: E402
from bevpool_ros.node.pooling import PoolingWorker  # noqa: E402
from bevpool_ros.node.sync import CameraSet  # noqa: E402
from bevpool_ros.synthetic import SyntheticScene  # noqa: E402
from bevpool_ros.workloads import base_rig  # noqa: E402


def pct(values, q) -> float:
    return float(np.percentile(np.asarray(values) * 1e3, q))


def camera_set(rig, depth, feat, stamp_ns: int) -> CameraSet:
    frames = {cam.name: {"depth": (stamp_ns, depth[n]), "feat": (stamp_ns, feat[n])}
              for n, cam in enumerate(rig.cameras)}
    now = time.monotonic()
    return CameraSet(frames, tuple(frames), (), now, now, True)


def cuda_breakdown(backend, depth, feat, frames: int) -> dict:
    """Split CudaBackend.pool into host staging, graph replay + sync (H2D, kernel, D2H), result copy."""
    from bevpool_ros.backends.staging import stage_fp16

    stage, replay, copy = [], [], []
    for _ in range(frames):
        t0 = time.perf_counter()
        stage_fp16(backend.smap, depth, feat, backend.h_depth.array, backend.h_feat.array)
        t1 = time.perf_counter()
        backend.graph.replay()
        backend.rt.stream.synchronize()
        t2 = time.perf_counter()
        backend.h_out.array.copy()
        t3 = time.perf_counter()
        stage.append(t1 - t0)
        replay.append(t2 - t1)
        copy.append(t3 - t2)
    return {k: {"p50": pct(v, 50), "p99": pct(v, 99)} for k, v in
            (("stage_ms", stage), ("replay_sync_ms", replay), ("result_copy_ms", copy))}


def kernel_only_us(backend) -> float | None:
    """Graph-replay median of the backend's own launch, when the backend can say (cuda)."""
    timer = getattr(backend, "kernel_time_us", None)
    return float(timer()) if callable(timer) else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="cuda")
    p.add_argument("--precision", default="fp16")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--wire-dtype", default="float16", choices=("float16", "float32"))
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()

    rig = base_rig()
    backend = create_backend(args.backend, args.precision, fallback=False)
    # keep only the latest result, as the node does once it has published (retaining every grid
    # would grow the heap by 5 MB a frame and time page faults instead of the pooling path)
    results, drops = deque(maxlen=1), []
    worker = PoolingWorker(backend, LiveCalibration(rig), results.append,
                           lambda reason, detail: drops.append((reason, detail)))
    worker.prepare()
    scene = SyntheticScene(rig)
    frames = [tuple(a.astype(args.wire_dtype) for a in scene.frame(i)) for i in range(8)]

    total, pool, assemble = [], [], []
    for i in range(args.warmup + args.frames):
        depth, feat = frames[i % len(frames)]
        t0 = time.perf_counter()
        r = worker.process(camera_set(rig, depth, feat, i * 50_000_000))
        t1 = time.perf_counter()
        if r is None:
            raise SystemExit(f"frame {i} dropped: {drops[-1]}")
        if i >= args.warmup:
            total.append(t1 - t0)
            pool.append(r.pool_s)
            assemble.append(r.assemble_s)
    results.clear()

    kernel_us = kernel_only_us(backend)
    desc = backend.describe()
    row = {
        "backend": desc.get("backend"), "precision": desc.get("precision"), "kernel": desc.get("kernel"),
        "device": desc.get("device"), "wire_dtype": args.wire_dtype, "frames": args.frames,
        "process_ms": {"p50": pct(total, 50), "p99": pct(total, 99)},
        "pool_ms": {"p50": pct(pool, 50), "p99": pct(pool, 99)},
        "assemble_ms": {"p50": pct(assemble, 50), "p99": pct(assemble, 99)},
        "kernel_us": kernel_us,
    }
    if row["backend"] == "cuda" and row["precision"] == "fp16":
        row["pool_breakdown"] = cuda_breakdown(backend, *frames[0], args.frames)
    k_ms = (kernel_us or 0.0) / 1e3
    row["overhead_beyond_kernel_ms"] = {q: row["process_ms"][q] - k_ms for q in ("p50", "p99")}
    print(json.dumps(row, indent=1))
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"frame_latency_{row['backend']}_{row['precision']}"
    (args.out / f"{name}.json").write_text(json.dumps(
        {"meta": {"python": platform.python_version(), "command": " ".join(sys.argv)}, "row": row}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
