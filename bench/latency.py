#!/usr/bin/env python3
"""End-to-end latency of bevpool_node with the synthetic 6-camera nuScenes rig at 20 Hz.

    .venv/bin/python bench/latency.py [--backend cpu] [--frames 400] [--rate 20] [--bev-dtype float32]

Measures, per camera set:
  e2e       last input message of the set published -> its BEV message received (one clock:
            publisher and consumer share this process; the node runs in its own process)
  node      the node's own view: last input message received -> BEV message published
  pool      backend.pool() inside the node (the kernel)
  overhead  node - pool: synchronisation, stacking, message build, publish, queueing
plus the stage split of the overhead and the kernel alone (backend.pool() on the same inputs
in this process, no ROS). Writes bench/results/latency_<backend>.json and .md.
A benchmark, not a timed test: numbers depend on the machine and on what else runs there.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def kernel_only(backend_name: str, precision: str, rig, frames: int = 50) -> dict:
    """backend.pool() alone on the synthetic inputs: the floor the node's latency sits on."""
    from bevpool_ros.backends import create_backend
    from bevpool_ros.scatter_map import build_scatter_map
    from bevpool_ros.synthetic import SyntheticScene

    backend = create_backend(backend_name, precision)
    backend.prepare(build_scatter_map(rig))
    depth, feat = SyntheticScene(rig).frame(0)
    backend.pool(depth, feat)
    times = []
    for _ in range(frames):
        t0 = time.perf_counter()
        backend.pool(depth, feat)
        times.append((time.perf_counter() - t0) * 1e3)
    return {"backend": backend.name, "p50_ms": float(np.percentile(times, 50)),
            "p99_ms": float(np.percentile(times, 99)), "frames": frames}


def machine() -> dict:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg_at_start": os.getloadavg()}


def render_md(res: dict) -> str:
    e, n = res["e2e_ms"], res["node_ms"]
    lines = [
        f"# bevpool_node latency: {res['backend']} backend, {res['cameras']} cameras at {res['rate_hz']:g} Hz",
        "",
        f"Command: `{res['command']}`  ",
        f"Machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, Python {res['machine']['python']} "
        f"(load average at start {', '.join(f'{x:.2f}' for x in res['machine']['load_avg_at_start'])})  ",
        f"Sets: {res['sent']} sent, {res['received']} received, {res['measured']} measured after "
        f"{res['warmup']} warm-up sets; BEV message dtype {res['bev_dtype']}.",
        "",
        "| measure (ms) | p50 | p95 | p99 |",
        "|---|---|---|---|",
        f"| end to end: last input published -> BEV received | {e['p50']:.2f} | {e['p95']:.2f} | {e['p99']:.2f} |",
        f"| in the node: last input received -> BEV published | {n['p50']:.2f} | {n['p95']:.2f} | {n['p99']:.2f} |",
        f"| kernel in the node: backend.pool() | {res['pool_ms']['p50']:.2f} | | {res['pool_ms']['p99']:.2f} |",
        f"| **overhead beyond the kernel** (node - pool, per set) | **{res['overhead_ms']['p50']:.2f}** | | "
        f"**{res['overhead_ms']['p99']:.2f}** |",
        f"| kernel alone, no ROS, same inputs | {res['kernel_only']['p50_ms']:.2f} | | {res['kernel_only']['p99_ms']:.2f} |",
        "",
        "Overhead split (p50 / p99 ms): " + ", ".join(
            f"{k} {v['p50']:.2f} / {v['p99']:.2f}" for k, v in res["stages_ms"].items()) + ".",
        "",
        f"Drops: {res['drops'] or 'none'}.",
        "",
        "The end-to-end figure also holds DDS transport of the 12 input tensors (2.3 MB per set) and of the "
        "BEV message (5.2 MB at float32), and the consumer's decode; publisher, consumer and node share "
        "the machine's cores.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=("best", "tensorrt", "cuda", "cpu"))
    ap.add_argument("--precision", default="fp16", choices=("fp32", "fp16", "fp8", "auto"))
    ap.add_argument("--frames", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--bev-dtype", default="float32", choices=("float32", "float16"))
    ap.add_argument("--out", default=None, help="output prefix (default bench/results/latency_<backend>)")
    args = ap.parse_args(argv)

    from bevpool_ros.demo.session import PipelineSession

    info = machine()
    session = PipelineSession(None, {"backend": args.backend, "precision": args.precision,
                                     "output.bev_dtype": args.bev_dtype, "output.publish_image": False,
                                     "diagnostics.period_s": 0.5,
                                     "diagnostics.latency_window": args.frames + args.warmup + 10})
    try:
        if not session.wait_ready(30.0):
            print("bevpool_node did not come up", file=sys.stderr)
            return 1
        result = session.run(args.frames + args.warmup, args.rate, warmup=args.warmup)
    finally:
        rc, log = session.close()
    d = result.diagnostics
    f = lambda k: float(d.get(k, "nan"))  # noqa: E731
    e2e = result.percentiles()
    backend = d.get("backend", args.backend)
    res = {
        "backend": backend, "backend_requested": args.backend, "precision": d.get("precision"),
        "cameras": session.rig.num_cameras, "rate_hz": args.rate, "bev_dtype": args.bev_dtype,
        "sent": result.sent, "received": result.received, "warmup": args.warmup, "measured": len(result.e2e_ms),
        "e2e_ms": {"p50": e2e[50], "p95": e2e[95], "p99": e2e[99]},
        "node_ms": {"p50": f("latency_p50_ms"), "p95": f("latency_p95_ms"), "p99": f("latency_p99_ms")},
        "pool_ms": {"p50": f("pool_p50_ms"), "p99": f("pool_p99_ms")},
        "overhead_ms": {"p50": f("overhead_p50_ms"), "p99": f("overhead_p99_ms")},
        "stages_ms": {k: {"p50": f(f"{k}_p50_ms"), "p99": f(f"{k}_p99_ms")}
                      for k in ("queue_wait", "assemble", "message", "publish")},
        "drops": {k: int(v) for k, v in d.items() if k.startswith("dropped_")
                  or k in ("sync_incomplete_timeout", "sync_late", "sync_evicted", "sync_superseded")},
        "kernel_only": kernel_only(backend if backend != "best" else "cpu", args.precision, session.rig),
        "node_exit_code": rc, "machine": info,
        "command": "python bench/latency.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    prefix = Path(args.out) if args.out else ROOT / "bench" / "results" / f"latency_{backend}"
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    prefix.with_suffix(".md").write_text(render_md(res))
    print(render_md(res))
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
