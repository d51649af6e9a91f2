"""CPU benchmark: scatter-map build time and CPU-backend pool time for every workload.

    .venv/bin/python bench/cpu_bench.py [--repeat 7] [--out bench/results/cpu_backend_cpu]

Writes <out>.json and <out>.md. Times are wall-clock medians on this machine (build: the
full rig -> five arrays path; pool: one frame through CpuBackend, validation included).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from bevpool_ros.backends import CpuBackend
from bevpool_ros.scatter_map import build_scatter_map
from bevpool_ros.workloads import RIG_WORKLOADS, WORKLOADS, blog49_map, get_workload, random_inputs, workload_rig


def median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--out", default="bench/results/cpu_backend_cpu")
    args = p.parse_args()
    rows = []
    for name in WORKLOADS:
        if name in RIG_WORKLOADS:
            rig = workload_rig(name)
            build = median_s(lambda: build_scatter_map(rig), args.repeat)
        else:
            build = median_s(blog49_map, args.repeat)
        smap = get_workload(name)
        depth, feat = random_inputs(smap, np.random.default_rng(0))
        cpu = CpuBackend()
        cpu.prepare(smap)
        pool = median_s(lambda: cpu.pool(depth, feat), args.repeat)
        rows.append({"workload": name, "points": smap.num_points, "intervals": smap.num_intervals,
                     "build_ms": round(build * 1e3, 1), "cpu_pool_ms": round(pool * 1e3, 1)})
        print(rows[-1], flush=True)
    meta = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
            "repeat": args.repeat, "command": "python bench/cpu_bench.py"}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = ["| workload | points | intervals | map build (ms) | cpu pool (ms) |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r['workload']} | {r['points']:,} | {r['intervals']:,} | {r['build_ms']} | {r['cpu_pool_ms']} |"
              for r in rows]
    out.with_suffix(".md").write_text(
        f"CPU ({meta['machine']}, 2 cores, Python {meta['python']}), median of {args.repeat}; "
        f"command: `{meta['command']}`\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
