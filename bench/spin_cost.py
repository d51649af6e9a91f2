#!/usr/bin/env python3
"""What one wake-up of the node's executor costs when nothing is ready: bevpool_node (cpu backend,
the shipped nuScenes rig, its subscriptions, services and QoS-event handlers) in this process,
``spin_once(timeout_sec=0)`` timed back to back and paced at 30 Hz, for rclpy's
SingleThreadedExecutor and, where rclpy has it, the EventsExecutor (ros/executor.py).

    python bench/spin_cost.py [--calls 300] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(executor, calls: int, pause: float) -> dict:
    ms = []
    for _ in range(calls):
        if pause:
            time.sleep(pause)
        t0 = time.perf_counter()
        executor.spin_once(timeout_sec=0)
        ms.append((time.perf_counter() - t0) * 1e3)
    return {"p50_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import rclpy

    from bevpool_ros.demo.session import isolate, ros_param_args
    from bevpool_ros.node.node import BevPoolNode
    from bevpool_ros.ros.executor import make_executor

    isolate()
    rclpy.init(args=["spin_cost", "--ros-args", *ros_param_args({"backend": "cpu"})])
    node = BevPoolNode()
    res = {"entities": {k: len(list(getattr(node, k))) for k in
                        ("subscriptions", "services", "timers", "waitables", "publishers")}}
    for choice in ("single_threaded", "events"):
        executor, kind = make_executor(choice)
        if kind != choice:
            continue
        executor.add_node(node)
        timed(executor, 20, 0)  # warm
        res[kind] = {"back_to_back": timed(executor, args.calls, 0),
                     "paced_30hz": timed(executor, max(30, args.calls // 5), 1 / 30)}
        executor.remove_node(node)
        executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()
    print(json.dumps(res, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
