#!/usr/bin/env python3
"""What one per-set Python step costs warm (back to back) and at a camera rate (cache-cold).

    python bench/cold_path.py [--rate 30] [--calls 200] [--json FILE]

The hand-off path runs a few short Python steps per camera set in three processes: (de)serialise
an announcement, open a view, launch a graph. Timed in a loop they cost microseconds; run once
every 1/rate seconds, the thread asleep in between as a node's threads are, each one starts with
cold caches (and a CPU that may have dropped its clock or entered a deep sleep state) and costs
several times more. This measures the gap for the steps every set pays:

    deserialize_tensor_handoff   a camera tensor's announcement (the node, 12 per set)
    deserialize_bev_handoff      the grid's announcement (each hand-off consumer)
    serialize_bev_handoff        the node's announcement of the grid
    patch_template               rebuilding an announcement from a cached one (header, slot,
                                 sequence, event handle set on a copy through the setters)
    encode_bev_template          what the node and the camera producer do instead of serialising:
                                 the varying fields packed into a template's bytes
                                 (handoff/cdr_template.py)
    decode_tensor_template,      what the node and each consumer do instead of deserialising:
    decode_bev_template          the datagram matched to a learnt template, a copy of its message
                                 with the varying fields read from the bytes
    bevpool_pool                 (``--pool``, needs a GPU) one ``BevPooler.pool`` call on device
                                 tensors of the shipped rig (float16, FP16): the in-process API's
                                 host cost, which is its latency (the device idles meanwhile)
    graph_launch                 (``--pool``) the floor under it: replaying the pooler's captured
                                 graph by itself (one cuGraphLaunch through cuda-python)
    graph_launch_ctypes          the same launch called through ctypes (no cuda-python layer)
    python_call                  the floor of any Python step: a call that sums range(64)

With ``--pool`` and PyTorch present it also times the pool call's work on the device alone
(``pool_on_device``: the stream held behind a GPU sleep while the host enqueues, so the events
around the call see the graph's own duration, node-to-node gaps included).

Per step: median and p99 in microseconds, warm (``--calls`` back to back after a warm-up) and
paced (one call per 1/rate s, the thread in time.sleep between them), and the ratio.

``--awake spin,nap`` adds paced rows where the thread keeps its core awake for ``--lead-ms``
before each call, as a thread expecting the next set could: ``spin`` polls the clock, ``nap``
sleeps 50 us at a time (a short sleep lets the core idle only in a shallow state, whose caches
survive; a deep one, chosen for a long sleep, may lose them). Whether the cold cost is the
caches and clocks of a core that slept deeply, or is paid anyway, shows in these rows.
"""
from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def messages():
    from bevpool_msgs.msg import BevHandoff, TensorHandoff
    from std_msgs.msg import Header

    grid = BevHandoff()
    grid.header = Header(frame_id="ego")
    grid.socket_path, grid.layout, grid.backend, grid.precision = "/tmp/bevpool-x/ring.sock", "ZYXC", "cuda", "fp16"
    grid.shape = [1, 128, 128, 80]
    grid.event_handle = np.arange(64, dtype=np.uint8)
    grid.device_uuid = np.arange(16, dtype=np.uint8)
    cam = TensorHandoff()
    cam.camera, cam.stream, cam.layout = "CAM_FRONT", "depth", "DHW"
    cam.socket_path = "/tmp/bevpool-x/ring.sock"
    cam.shape = [118, 16, 44]
    cam.event_handle = np.arange(64, dtype=np.uint8)
    return grid, cam


def steps() -> dict:
    from builtin_interfaces.msg import Time
    from rclpy.serialization import deserialize_message, serialize_message

    grid, cam = messages()
    grid_bytes, cam_bytes = serialize_message(grid), serialize_message(cam)
    handle = np.arange(64, dtype=np.uint8)

    def patch_template():
        m = copy.copy(grid)
        h = type(grid.header)()
        h.stamp, h.frame_id = Time(sec=5, nanosec=6), grid.header.frame_id
        m.header, m.slot, m.sequence, m.event_handle = h, 3, 12345, handle
        return m

    from bevpool_ros.handoff.cdr_template import CdrTemplate, TemplateReader

    bev_template = CdrTemplate(grid)
    readers = {type(grid): TemplateReader(type(grid)), type(cam): TemplateReader(type(cam))}
    for m, data in ((grid, grid_bytes), (cam, cam_bytes)):
        readers[type(m)].deserialize(data)  # learnt here: the steps below are hits
    values = (5, 6, 3, 12345, bytes(64))

    steps = {
        "python_call": lambda: sum(range(64)),
        "deserialize_tensor_handoff": lambda: deserialize_message(cam_bytes, type(cam)),
        "deserialize_bev_handoff": lambda: deserialize_message(grid_bytes, type(grid)),
        "serialize_bev_handoff": lambda: serialize_message(grid),
        "patch_template": patch_template,
        "encode_bev_template": lambda: bev_template.encode(values),
        "decode_tensor_template": lambda: readers[type(cam)].deserialize(cam_bytes),
        "decode_bev_template": lambda: readers[type(grid)].deserialize(grid_bytes),
    }
    return steps


def pool_steps() -> tuple[dict, object, object]:
    """``BevPooler.pool`` on driver allocations (no framework), its grid dropped at once; the
    replay of its graph alone; a function timing the call's device work by itself; and one that
    releases the pooler's memory (before the driver that made it is gone: a test's stand-in)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from inprocess_latency import _Framework, inputs

    from bevpool_ros.errors import BackendUnavailable
    from bevpool_ros.inprocess import BevPooler
    from bevpool_ros.paths import default_rig_path
    from bevpool_ros.rig_yaml import load_rig

    rig = load_rig(default_rig_path())
    try:
        pooler = BevPooler(rig, precision="fp16", grid_dtype="float16", backend="cuda", fallback=False)
    except BackendUnavailable as e:
        raise SystemExit(f"cold_path.py --pool: {e}") from None
    fw = _Framework("driver")
    sets, _ = inputs(rig, "float16", 1)
    depth, feat = fw.upload(sets[0][0]), fw.upload(sets[0][1])
    fw.synchronize()

    def pool():
        pooler.pool(depth, feat, stream=fw.handle)  # the grid is dropped here: its memory comes back

    for _ in range(3):  # the binding seen twice is captured: a graph to replay alone
        pool()
    graph = next(iter(pooler._device._graphs.values()))
    steps = {"bevpool_pool": pool, "graph_launch": lambda: graph.replay(fw.stream)}
    from bevpool_ros.device.driver import api

    # the real driver only: under a test's stand-in (test/fake_cuda.py) handles are made up, and
    # neither libcuda nor PyTorch may be handed them
    real = type(api()).__name__ == "module"
    launch = _ctypes_graph_launch() if real else None
    if launch is not None:
        exec_handle, stream_handle = int(graph.exec), int(fw.handle)
        steps["graph_launch_ctypes"] = lambda: launch(exec_handle, stream_handle)
    return steps, ((lambda calls: on_device(pool, fw, calls)) if real else None), pooler.close


def _ctypes_graph_launch():
    """libcuda's cuGraphLaunch as a ctypes function, or None (no driver library: a test's fake)."""
    import ctypes

    try:
        launch = ctypes.CDLL("libcuda.so.1").cuGraphLaunch
    except (OSError, AttributeError):
        return None
    launch.argtypes, launch.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    return launch


def on_device(pool, fw, calls: int) -> dict | None:
    """Device-only duration of one pool call (us): a GPU sleep holds the stream while the host
    enqueues, so the events around the call time the graph alone. None without PyTorch."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from bevpool_ros.device.driver import EventTimer

    timer, out = EventTimer(), []
    with torch.cuda.stream(torch.cuda.ExternalStream(fw.handle)):
        for _ in range(calls):
            torch.cuda._sleep(2_000_000)  # ~1 ms at GPU clocks: longer than the host's enqueue
            timer.record_start(fw.stream)
            pool()
            timer.record_end(fw.stream)
            out.append(timer.elapsed_ms() * 1e3)
    return stats(np.asarray(out) * 1e-6)


def warm(f, calls: int) -> list[float]:
    for _ in range(max(50, calls // 10)):
        f()
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return out


def paced(f, calls: int, rate: float, awake: str = "none", lead_s: float = 0.0) -> list[float]:
    """One call per 1/rate s. ``awake``: how the thread spends the last ``lead_s`` before each
    call (none: asleep throughout; spin: polling the clock; nap: 50 us sleeps)."""
    out, period = [], 1.0 / rate
    f()
    due = time.perf_counter()
    for _ in range(calls):
        due += period
        time.sleep(max(0.0, due - (lead_s if awake != "none" else 0.0) - time.perf_counter()))
        while awake != "none" and time.perf_counter() < due:
            if awake == "nap":
                time.sleep(50e-6)
        t0 = time.perf_counter()
        f()
        out.append(time.perf_counter() - t0)
    return out


def stats(samples) -> dict:
    us = np.asarray(samples) * 1e6
    return {"p50_us": round(float(np.median(us)), 1), "p99_us": round(float(np.percentile(us, 99)), 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--pool", action="store_true", help="also time BevPooler.pool (needs a GPU)")
    ap.add_argument("--awake", default="", help="comma-separated: spin, nap (paced rows with the "
                    "core kept awake for --lead-ms before each call)")
    ap.add_argument("--lead-ms", type=float, default=1.0)
    ap.add_argument("--steps", default="", help="comma-separated step names (default: all)")
    args = ap.parse_args(argv)
    awake = [a for a in args.awake.split(",") if a]
    if any(a not in ("spin", "nap") for a in awake):
        ap.error(f"--awake: spin or nap, not {args.awake}")
    rows, todo, device, close = [], steps(), None, (lambda: None)
    if args.pool:
        more, device, close = pool_steps()
        todo.update(more)
    if args.steps:
        todo = {k: todo[k] for k in args.steps.split(",") if k in todo}
    for name, f in todo.items():
        w, p = stats(warm(f, args.calls * 10)), stats(paced(f, args.calls, args.rate))
        rows.append({"step": name, "warm": w, f"paced_{args.rate:g}hz": p,
                     "ratio_p50": round(p["p50_us"] / max(w["p50_us"], 1e-3), 1)})
        line = (f"{name:28s} warm {w['p50_us']:7.1f} / {w['p99_us']:7.1f} us   "
                f"{args.rate:g} Hz {p['p50_us']:7.1f} / {p['p99_us']:7.1f} us   x{rows[-1]['ratio_p50']}")
        for a in awake:
            k = stats(paced(f, args.calls, args.rate, a, args.lead_ms * 1e-3))
            rows[-1][f"paced_{args.rate:g}hz_{a}_{args.lead_ms:g}ms"] = k
            line += f"   {a} {k['p50_us']:7.1f} / {k['p99_us']:7.1f}"
        print(line)
    device_us = device(args.calls) if device is not None else None
    close()
    if device_us is not None:
        print(f"{'pool_on_device':28s} {device_us['p50_us']:7.1f} / {device_us['p99_us']:7.1f} us")
    if args.json:
        args.json.write_text(json.dumps({"pool_on_device_us": device_us,
            "command": "python bench/cold_path.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
