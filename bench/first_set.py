#!/usr/bin/env python3
"""What bevpool_node's first hand-off set pays for its announcement templates, made at once or
after the set (``handoff/cdr_template.py``, ``defer``; the node passes ``PoolingWorker.after_set``).

    python bench/first_set.py [--rig config/rigs/...yaml] [--sets 3] [--json FILE]

Each mode runs in a fresh Python process, as a starting node is: rclpy has loaded no message type
support yet. Per mode: making the reader and writer (``load_type_support``), then per set the
announcement work of the node: one TensorHandoff datagram per camera stream read (``deserialize``),
one BevHandoff written (``serialize``); with ``after_set`` the queued jobs run after each set, one
per set, as the pooling thread runs them. No GPU, no DDS: the messages are built as a producer's
are (fixed fields per camera, stamp, slot, sequence and event handle per set).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _messages(rig, s: int):
    """(TensorHandoff per camera stream, BevHandoff builder) of set ``s``."""
    import numpy as np
    from bevpool_msgs.msg import BevHandoff, TensorHandoff

    n, d, h, w = rig.depth_shape
    tensors = []
    for cam in rig.cameras:
        for stream, shape, layout in (("depth", (d, h, w), "DHW"), ("feat", (h, w, rig.channels), "HWC")):
            m = TensorHandoff()
            m.header.stamp.sec, m.header.frame_id = 1000 + s, cam.name
            m.camera, m.stream, m.layout = cam.name, stream, layout
            m.socket_path, m.ring_id, m.ring_size = "/tmp/bevpool-0/ring.sock", 7, 3 * 2 * n
            m.slot, m.sequence = s % (3 * 2 * n), 1 + s
            m.nbytes, m.dtype, m.shape = int(np.prod(shape)) * 2, 8, list(shape)
            m.scale = 1.0
            m.event_handle = np.full(64, s, np.uint8)
            m.device_uuid = np.arange(16, dtype=np.uint8)
            m.boot_id = "0b5e1d2c-1111-2222-3333-444455556666"
            tensors.append(m)

    def grid():
        g = BevHandoff()
        g.header.frame_id = "ego"
        g.width, g.height, g.layers, g.channels = rig.grid_shape[2], rig.grid_shape[1], rig.grid_shape[0], rig.channels
        g.layout, g.socket_path, g.ring_id, g.ring_size = "ZYXC", "/tmp/bevpool-1/ring.sock", 5, 4
        g.shape = [*rig.grid_shape, rig.channels]
        g.backend, g.precision = "cuda", "fp16"
        return g
    return tensors, grid


def one_mode(mode: str, rig_path: str | None, sets: int) -> dict:
    """In this process: the node's announcement work for ``sets`` sets (``mode``: now | after_set)."""
    from bevpool_msgs.msg import BevHandoff, TensorHandoff
    from rclpy.serialization import serialize_message

    from bevpool_ros.handoff.cdr_template import TemplateReader, TemplateWriter
    from bevpool_ros.paths import default_rig_path
    from bevpool_ros.rig_yaml import load_rig

    rig = load_rig(rig_path or default_rig_path())
    jobs: list = []
    defer = jobs.append if mode == "after_set" else None
    t = time.perf_counter()
    reader, writer = TemplateReader(TensorHandoff, defer), TemplateWriter(BevHandoff, defer)
    out = {"mode": mode, "streams": 2 * len(rig.cameras), "make_ms": (time.perf_counter() - t) * 1e3,
           "set_ms": [], "after_set_ms": []}
    for s in range(sets):
        tensors, grid = _messages(rig, s)
        datagrams = [serialize_message(m) for m in tensors]  # the producer's bytes: not timed
        t = time.perf_counter()
        for data in datagrams:
            reader.deserialize(data)
        writer.serialize("ego", grid, (1000 + s, 0, s % 4, 1 + s, bytes([s]) * 64))
        out["set_ms"].append((time.perf_counter() - t) * 1e3)
        if jobs:
            t = time.perf_counter()
            jobs.pop(0)()  # one per set, as PoolingWorker.after_set runs them
            out["after_set_ms"].append((time.perf_counter() - t) * 1e3)
    out.update(templates_read=reader.learnt, reads_by_template=reader.hits, jobs_left=len(jobs))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rig", default=None, help="rig YAML (default: the shipped nuScenes rig)")
    ap.add_argument("--sets", type=int, default=16)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--one", choices=("now", "after_set"), help=argparse.SUPPRESS)  # the child
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_mode(args.one, args.rig, args.sets)))
        return 0
    results = []
    for mode in ("now", "after_set"):
        cmd = [sys.executable, __file__, "--one", mode, "--sets", str(args.sets)]
        cmd += ["--rig", args.rig] if args.rig else []
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
        if r.returncode != 0:
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        res = json.loads(r.stdout.strip().splitlines()[-1])
        results.append(res)
        sets = res["set_ms"]
        print(f"{mode:9s} make {res['make_ms']:6.1f} ms | first set {sets[0]:6.2f} ms, second {sets[1]:5.2f}, "
              f"median of the rest {sorted(sets[2:])[len(sets[2:]) // 2]:5.2f} | {len(res['after_set_ms'])} "
              f"after-set jobs, max {max(res['after_set_ms'], default=0):5.2f} ms | templates "
              f"{res['templates_read']} read of {res['streams']} streams, {res['jobs_left']} jobs left")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(sys.argv), "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
