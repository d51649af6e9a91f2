#!/usr/bin/env python3
"""Per-frame cost of the node's pooling stage without ROS: the GPU half of the latency budget.

    python bench/frame_latency.py --backend cuda --precision fp16 fp8 \\
        --wire-dtype float16 float32 --out-dtype float16 float32 [--depth-input distribution image] \\
        [--payload host device] [--rate 0 30] [--frames 300] [--prefix h200_] [--profile]

Drives bevpool_node's own pooling stage (``PoolingWorker.process``: the set's cameras in rig
order, then ``backend.pool_cameras`` = each payload copied once into its pinned slot, one graph
replay (H2D, conversion and value checks on the device, kernel, epilogue, D2H), one sync, one
flag read) with synthetic nuScenes-rig frames, writing the grid into a message payload buffer
(``ReusableBuffer``) as the node does. One row per precision x wire dtype x published dtype:
p50/p99 of the stage, the cuda backend's split into host staging and replay + sync, and the
kernel alone (graph replay of the same launch). ``--depth-input image``: every camera sends a
640 x 480 16UC1 depth image instead of a distribution; the row adds ``convert_ms`` (the node's
input callbacks: decode + nearest resize of six images, on the host) and ``host_expand_ms`` (what
expanding them into distributions on the host would add; the backend expands them on its device).
``--payload device``: every camera's tensors are already on this GPU, as the input hand-off gives
them (``input.handoff``: views of the producer's ring): the backend's device-input path, gather
D2D instead of staging + H2D. ``--rate 30``: one set every 1/30 s, the thread asleep in between as
the node's pooling thread is (default 0: back to back, the stage with warm caches and clocks).
``--profile``: cProfile of the first row's measured sets (stderr).
Writes <out>/<prefix>frame_latency_<backend>.json.
The ROS half (DDS, message build, publish) is measured by bench/latency.py.
"""
from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import platform
import pstats
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bevpool_ros.backends import create_backend  # noqa: E402
from bevpool_ros.cameras.calibration import LiveCalibration  # noqa: E402
from bevpool_ros.cameras.sync import CameraSet  # noqa: E402
from bevpool_ros.io.depth_image import metres_at_grid  # noqa: E402
from bevpool_ros.io.tensor_codec import ReusableBuffer  # noqa: E402
from bevpool_ros.metric_depth import DepthBins, DepthSpec, MetricDepth, millimetre_image, most_likely_depth  # noqa: E402
from bevpool_ros.node.pooling import PoolingWorker  # noqa: E402
from bevpool_ros.synthetic import SyntheticScene  # noqa: E402
from bevpool_ros.workloads import base_rig  # noqa: E402


def pct(values_s) -> dict:
    v = np.asarray(values_s) * 1e3
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99))}


def on_device(frame):
    """(depth, feat) as per-camera device tensors, as the input hand-off gives them."""
    from bevpool_ros.device.driver import DeviceCopy

    return tuple([DeviceCopy(a[n]) for n in range(a.shape[0])] for a in frame)


def camera_set(rig, depth, feat, stamp_ns: int) -> CameraSet:
    frames = {cam.name: {"depth": (stamp_ns, depth[n]), "feat": (stamp_ns, feat[n])}
              for n, cam in enumerate(rig.cameras)}
    now = time.monotonic()
    return CameraSet(frames, tuple(frames), (), now, now, True)


E4M3_SCALE = 16.0


def wire_frame(frame, wire: str):
    """(depth, feat) as a producer would send them in ``wire``."""
    if wire == "float8_e4m3":
        from bevpool_ros.fp8 import encode

        return tuple(encode(a.astype(np.float64) * E4M3_SCALE) for a in frame)
    return tuple(a.astype(wire) for a in frame)


def cuda_split(backend, cameras, out, frames: int) -> dict:
    """The GPU backend's stage in two: host staging into the pinned slots; graph replay + sync."""
    frame = backend.frame
    stage, replay = [], []
    for _ in range(frames):
        t0 = time.perf_counter()
        wire = frame.staging.stage(cameras)
        t1 = time.perf_counter()
        graph, _ = frame._graph(wire, out)
        graph.replay()
        backend.rt.stream.synchronize()
        t2 = time.perf_counter()
        stage.append(t1 - t0)
        replay.append(t2 - t1)
    return {"staging_ms": pct(stage), "replay_sync_ms": pct(replay)}


IMAGE_SIZE = (480, 640)


def depth_images(rig, depth: np.ndarray) -> list[np.ndarray]:
    """The scene's depth as 640 x 480 16UC1 (mm) images, one per camera, as a depth camera sends them."""
    return [millimetre_image(m, *IMAGE_SIZE) for m in most_likely_depth(depth, DepthBins.of_rig(rig))]


def metric_cameras(rig, images, spec) -> list[MetricDepth]:
    """What the node's depth-image callbacks hand the pooling stage."""
    _, _, H, W = rig.depth_shape
    return [MetricDepth(metres_at_grid(img, "16UC1", H, W), spec) for img in images]


def measure(backend, rig, frames, out_dtype: str, n: int, warmup: int, profile=None, rate: float = 0.0) -> dict:
    payload = ReusableBuffer()
    # keep only the latest result, as the node does once it has published
    results, drops = deque(maxlen=1), []
    worker = PoolingWorker(backend, LiveCalibration(rig), results.append,
                           lambda reason, detail: drops.append((reason, detail)),
                           out_dtype=out_dtype, out_buffer=payload)
    worker.prepare()
    total, pool, convert, expand = [], [], [], []
    spec = DepthSpec(DepthBins.of_rig(rig))
    for i in range(warmup + n):
        depth, feat = frames[i % len(frames)]
        if isinstance(depth, list) and isinstance(depth[0], np.ndarray):  # depth images
            t0 = time.perf_counter()
            depth = metric_cameras(rig, depth, spec)
            t1 = time.perf_counter()
            for m in depth:
                m.distribution()
            if i >= warmup:
                convert.append(t1 - t0)
                expand.append(time.perf_counter() - t1)
        cs = camera_set(rig, depth, feat, i * 50_000_000)
        if rate > 0:
            time.sleep(1.0 / rate)
        if profile is not None and i == warmup:
            profile.enable()
        t0 = time.perf_counter()
        r = worker.process(cs)
        t1 = time.perf_counter()
        if r is None:
            raise SystemExit(f"frame {i} dropped: {drops[-1]}")
        if i >= warmup:
            total.append(t1 - t0)
            pool.append(r.pool_s)
    if profile is not None:
        profile.disable()
    row = {"process_ms": pct(total), "pool_ms": pct(pool), "lands_in_payload": bool(payload.holds(r.bev))}
    if convert:
        row.update(convert_ms=pct(convert), host_expand_ms=pct(expand))
    if backend.name == "cuda" and not isinstance(frames[0][1], list):  # host payloads: GpuFrame's split
        depth, feat = frames[0]
        if isinstance(depth, list):
            depth = metric_cameras(rig, depth, spec)
        cameras = [(depth[k], feat[k]) for k in range(len(depth))]
        row["split"] = cuda_split(backend, cameras, payload.view(r.bev.shape, out_dtype), n)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="cuda")
    p.add_argument("--precision", nargs="+", default=["fp16"])
    p.add_argument("--wire-dtype", nargs="+", default=["float16"], choices=("float16", "float32", "float8_e4m3"),
                   help="float8_e4m3: codes as a producer quantised them (scale 16, the rule's for [0, 1) / "
                        "[-1, 1) data), on backends that take them")
    p.add_argument("--out-dtype", nargs="+", default=["float16"], choices=("float16", "float32"))
    p.add_argument("--host-memory", default="auto", choices=("auto", "copy", "mapped"))
    p.add_argument("--depth-input", nargs="+", default=["distribution"], choices=("distribution", "image"),
                   help="image: 640 x 480 16UC1 depth images (input.depth_mode: image), expanded by the backend")
    p.add_argument("--payload", nargs="+", default=["host"], choices=("host", "device"),
                   help="device: each camera's tensors already on this GPU (the input hand-off's views)")
    p.add_argument("--rate", nargs="+", type=float, default=[0.0],
                   help="sets per second, the thread asleep in between (0: back to back)")
    p.add_argument("--profile", action="store_true", help="cProfile the first row's measured sets (stderr)")
    p.add_argument("--frames", type=int, default=300)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--prefix", default="")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args()

    rig = base_rig()
    scene = SyntheticScene(rig)
    raw = [scene.frame(i) for i in range(8)]
    rows = []
    for precision in args.precision:
        backend = create_backend(args.backend, precision, fallback=False, host_memory=args.host_memory)
        for wire in args.wire_dtype:
            if wire == "float8_e4m3" and np.dtype(np.uint8) not in backend.wire_dtypes:
                continue
            if wire == "float8_e4m3":
                backend.fp8_scales = (E4M3_SCALE, E4M3_SCALE)
            for depth_input, out_dtype, payload, rate in itertools.product(args.depth_input, args.out_dtype,
                                                                           args.payload, args.rate):
                if payload == "device" and (backend.name == "cpu" or depth_input == "image"):
                    continue  # device payloads: a GPU backend's; depth images arrive on the host
                frames = [wire_frame(f, wire) for f in raw]
                if depth_input == "image":
                    frames = [(depth_images(rig, f[0]), w[1]) for f, w in zip(raw, frames)]
                if payload == "device":
                    frames = [on_device(f) for f in frames]
                profile = cProfile.Profile() if args.profile and not rows else None
                row = {"backend": backend.name, "precision": None, "wire_dtype": wire, "output_dtype": out_dtype,
                       "depth_input": depth_input if depth_input == "distribution" else "image 16UC1 640x480",
                       "payload": payload, "rate_hz": rate, "frames": args.frames,
                       **measure(backend, rig, frames, out_dtype, args.frames, args.warmup, profile, rate)}
                if profile is not None:
                    pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)
                desc = backend.describe()
                timer = getattr(backend, "kernel_time_us", None)
                row.update(precision=desc.get("precision"), kernel=desc.get("kernel"), device=desc.get("device"),
                           host_memory=desc.get("host_memory"), kernel_us=float(timer()) if callable(timer) else None)
                print(json.dumps(row), flush=True)
                rows.append(row)
        backend.close()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{args.prefix}frame_latency_{args.backend}.json"
    meta = {"python": platform.python_version(), "command": "python bench/frame_latency.py " + " ".join(sys.argv[1:]),
            "stage": "PoolingWorker.process: payloads in -> BEV bytes in the message payload, checked"}
    path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
