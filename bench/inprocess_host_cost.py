#!/usr/bin/env python3
"""The host cost of one ``BevPooler.pool`` call, without a GPU.

    python bench/inprocess_host_cost.py [--calls 2000] [--repeats 5] [--profile SCENARIO] [--json F]

On the H200 the GPU work of a call is ~6 us and the device idles while the host enqueues it, so
the call's host cost is its latency. Here the CUDA driver is test/fake_cuda.py's counting
stand-in: the pooler, device frame, grid and driver wrappers run their real Python, and each
driver call is counted by name (on a real host one cuda-python call costs a few microseconds
more than its Python here: count them as the main cost). Per scenario, in the steady state
(the binding's graph captured), per call:

    pool_us      pool() entered -> returned (median over calls, best of ``repeats`` runs; the
                 machine's other load makes tails meaningless here)
    release_us   the grid dropped (the consumer is done with it)
    driver       driver calls per call, by name, during pool() and during the release

Scenarios (float16 inputs at fp16, a float16 grid of the pooler's own unless said):
    torch        PyTorch-like tensors (test/fake_cuda.py's stand-in: the accessors PyTorch has),
                 no stream given: PyTorch's current stream, as docs/inprocess.md's example does
    cai          CuPy-like arrays (__cuda_array_interface__ v3 + __dlpack_device__), stream given
    driver       bare driver allocations (interface v2 only: the driver says where they live)
    out          cai, into the caller's float32 grid
    held         cai, the consumer keeps each grid until the next one is made
    two_streams  cai, calls alternating between two streams
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import sys
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "test")]

from fake_cuda import ArrayInterface, device_inputs, fake_gpu, torch_stand_in  # noqa: E402

from bevpool_ros.inprocess import BevPooler  # noqa: E402
from bevpool_ros.workloads import get_workload  # noqa: E402

STREAM_A, STREAM_B = 0xA000, 0xB000
SCENARIOS = ("torch", "cai", "driver", "out", "held", "two_streams")


def scenario(name: str, pooler: BevPooler):
    """(inputs, keyword arguments per call index, whether the consumer holds the last grid)."""
    depth, feat = device_inputs(pooler.smap, device=name != "driver")
    kw = lambda i: {"stream": STREAM_A}  # noqa: E731
    if name == "torch":
        torch = sys.modules["torch"]
        depth = torch.Tensor(pooler.smap.depth_shape, torch.float16, depth.ptr)
        feat = torch.Tensor(pooler.smap.feat_shape, torch.float16, feat.ptr)
        kw = lambda i: {}  # noqa: E731
    elif name == "out":
        out = ArrayInterface(pooler.grid_shape, "<f4", 0x7F20_0000_0000)
        kw = lambda i: {"stream": STREAM_A, "out": out}  # noqa: E731
    elif name == "two_streams":
        kw = lambda i: {"stream": (STREAM_A, STREAM_B)[i % 2]}  # noqa: E731
    return (depth, feat), kw, name == "held"


@contextmanager
def torch_if(wanted: bool):
    """The PyTorch stand-in as ``torch`` while ``wanted`` (a GPU-less host has no CUDA tensors)."""
    saved = sys.modules.get("torch")
    if wanted:
        sys.modules["torch"] = torch_stand_in()
    try:
        yield
    finally:
        if wanted:
            if saved is None:
                del sys.modules["torch"]
            else:
                sys.modules["torch"] = saved


def measure(name: str, calls: int, smap, profile: bool = False) -> dict:
    with fake_gpu() as cu, torch_if(name == "torch"):
        pooler = BevPooler(smap, precision="fp16", grid_dtype="float16", backend="cuda", fallback=False)
        (depth, feat), kw, hold = scenario(name, pooler)
        grid = None
        for i in range(8):  # bindings seen twice are captured: the steady state from then on
            held = pooler.pool(depth, feat, **kw(i))
            grid = held if hold else None
            del held
        gc.collect()
        pool_ns, release_ns = [], []
        pool_calls, release_calls = Counter(), Counter()
        profiler = cProfile.Profile() if profile else None
        gc.disable()  # a collection inside a timed call measures the collector, not the call
        try:
            for i in range(calls):
                before = Counter(cu.calls)
                if profiler:
                    profiler.enable()
                t0 = time.perf_counter_ns()
                new = pooler.pool(depth, feat, **kw(i))
                t1 = time.perf_counter_ns()
                if profiler:
                    profiler.disable()
                mid = Counter(cu.calls)
                if hold:
                    grid, new = new, grid
                if profiler:
                    profiler.enable()
                t2 = time.perf_counter_ns()
                new = None  # the consumer is done with it: the grid is released
                t3 = time.perf_counter_ns()
                if profiler:
                    profiler.disable()
                pool_calls += mid - before
                release_calls += Counter(cu.calls) - mid
                pool_ns.append(t1 - t0)
                release_ns.append(t3 - t2)
        finally:
            gc.enable()
        grid = None
        pooler.close()
        # the stand-in's protocol methods count their reads: PyTorch's fast path needs none
        protocol_reads = sys.modules["torch"].Tensor.protocol_reads if name == "torch" else None
    row = {
        "scenario": name,
        "calls": calls,
        "pool_us": float(np.median(pool_ns)) / 1e3,
        "release_us": float(np.median(release_ns)) / 1e3,
        "driver_per_call": {k: v / calls for k, v in sorted(pool_calls.items())},
        "driver_per_release": {k: v / calls for k, v in sorted(release_calls.items())},
        "protocol_reads": protocol_reads,
    }
    if profiler:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        row["profile"] = text.getvalue()
    return row


def best_of(name: str, calls: int, repeats: int, smap) -> dict:
    """The run with the lowest median (the machine's other load only ever adds time)."""
    rows = [measure(name, calls, smap) for _ in range(repeats)]
    return min(rows, key=lambda r: r["pool_us"])


def counts(calls: dict) -> str:
    text = ", ".join(f"{k} {v:g}" for k, v in calls.items())
    return f"{sum(calls.values()):g} ({text})" if calls else "0"


def table(rows) -> str:
    lines = [
        "| scenario | pool() us | release us | driver calls per pool() | per release |",
        "|---|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['pool_us']:.1f} | "
            f"{r['release_us']:.1f} | {counts(r['driver_per_call'])} | "
            f"{counts(r['driver_per_release'])} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--profile", choices=SCENARIOS, help="cProfile one scenario's steady state")
    ap.add_argument("--json", type=Path, help="write the rows here")
    args = ap.parse_args(argv)
    smap = get_workload("small")
    if args.profile:
        print(measure(args.profile, args.calls, smap, profile=True)["profile"])
        return 0
    names = [s for s in args.scenarios.split(",") if s]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        ap.error(f"unknown scenarios {unknown}; expected some of {SCENARIOS}")
    rows = [best_of(n, args.calls, args.repeats, smap) for n in names]
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
