#!/usr/bin/env python3
"""Floods in a row against one bevpool_node: does it always come back, and to the same memory?
(robot conditions; docs/ros_interface.md, "What the node promises")

    python bench/flood.py [--floods 20] [--seconds 30] [--publishers 3] [--stream 200]
                          [--stream-hz 20] [--valid-sets 5] [--backend cpu|cuda|best]
                          [--precision fp32|fp16|fp8] [--param NAME=VALUE ...] [--json FILE]

Before the first flood, ``--stream`` valid sets at ``--stream-hz`` measure the fresh node. Each
flood: ``--publishers`` producer processes send complete camera sets of the nuScenes rig as fast
as they can for ``--seconds`` (best effort, without the large-data DDS profile, so every tensor
travels in fragments: bevpool_ros/demo/flood.py); 1 s after it, ``--stream`` sets at
``--stream-hz``, none resent (recovery: how many were published, their latency); then
``--valid-sets`` sets, each resent until its grid comes back (10 s at most). A flood passes when
the node is alive and every resent set got its grid. Reported per flood: sets sent, grids during,
recovery, the longest gap between the node's /diagnostics (its period is 1 s here), the node's
resident memory after it; at the end: memory after the first and the last flood, its slope per
flood (least squares over floods 2..N), the same for what malloc holds for it (its /diagnostics'
``memory_heap_in_use_mib``), the time from SIGINT to the node's exit, and its code.
Exit 1 when any flood failed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def slope(values: list[float]) -> float | None:
    """Least-squares growth per step of ``values`` (None for fewer than two)."""
    if len(values) < 2:
        return None
    return float(np.polyfit(np.arange(len(values)), values, 1)[0])


def percentile(ms: list[float], q: float) -> float | None:
    return float(np.percentile(ms, q)) if ms else None


def summarise(floods: list[dict], fresh: dict, rc, stop_s: float) -> dict:
    passed = sum(f["ok"] for f in floods)
    gaps = [f["diagnostics_max_gap_s"] for f in floods if f["diagnostics_max_gap_s"] is not None]
    rss = [f["node_rss_mib"] for f in floods if f["node_rss_mib"] is not None]
    heap = [f["node_heap_in_use_mib"] for f in floods if f.get("node_heap_in_use_mib") is not None]
    recovered = [f["stream_published"] / f["stream_sent"] for f in floods if f["stream_sent"]]
    p50s = [f["stream_p50_ms"] for f in floods if f["stream_p50_ms"] is not None]
    return {"floods": len(floods), "passed": passed, "node_exit_code": rc, "node_stop_s": round(stop_s, 2),
            "rss_after_first_mib": rss[0] if rss else None, "rss_after_last_mib": rss[-1] if rss else None,
            "rss_max_above_first_mib": round(max(rss) - rss[0], 1) if rss else None,
            "rss_slope_mib_per_flood": slope(rss[1:]),
            "heap_in_use_after_first_mib": heap[0] if heap else None,
            "heap_in_use_after_last_mib": heap[-1] if heap else None,
            "heap_in_use_slope_mib_per_flood": slope(heap[1:]),
            "recovery_min_fraction": min(recovered) if recovered else None,
            "recovery_p50_ms_median": statistics.median(p50s) if p50s else None,
            "fresh_node": fresh,
            "diagnostics_max_gap_s_median": statistics.median(gaps) if gaps else None,
            "diagnostics_max_gap_s_max": max(gaps) if gaps else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--floods", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--publishers", type=int, default=3)
    ap.add_argument("--stream", type=int, default=200, help="valid sets streamed after each flood (0: none)")
    ap.add_argument("--stream-hz", type=float, default=20.0)
    ap.add_argument("--valid-sets", type=int, default=5)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="another node parameter (repeatable), e.g. executor=single_threaded")
    ap.add_argument("--node-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the node alone (repeatable), e.g. a heap profiler's")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()

    from bevpool_ros.demo.flood import run_flood, stream_sets
    from bevpool_ros.demo.session import PipelineSession, resident_mib
    from bevpool_ros.paths import default_rig_path

    params = {"backend": args.backend, "diagnostics.period_s": 1.0}
    if args.precision:
        params["precision"] = args.precision
    for item in args.param:  # passed as written: `-p NAME:=VALUE` reads it as YAML
        name, value = item.split("=", 1)
        params[name] = value
    rig = str(default_rig_path())
    session = PipelineSession(rig, params, node_env=dict(item.split("=", 1) for item in args.node_env))
    floods, diagnostics, fresh, started = [], {}, {}, time.time()
    nan = float("nan")
    try:
        if not session.wait_ready(60.0):
            print("bevpool_node not ready within 60 s", file=sys.stderr)
            return 1
        if args.stream:
            sent, published, ms = stream_sets(session, args.stream, args.stream_hz)
            fresh = {"sent": sent, "published": published, "rss_mib": resident_mib(session.node.proc.pid),
                     "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99)}
            print(f"fresh node: {published}/{sent} sets at {args.stream_hz:g} Hz, p50 {fresh['p50_ms'] or nan:.1f} "
                  f"/ p99 {fresh['p99_ms'] or nan:.1f} ms, RSS {fresh['rss_mib'] or nan:.0f} MiB", flush=True)
        for n in range(args.floods):
            r = run_flood(session, rig, args.publishers, args.seconds, args.valid_sets,
                          stream=args.stream, stream_hz=args.stream_hz)
            floods.append(r.as_dict())
            gap = r.diagnostics_max_gap_s
            recovery = (f"recovery {r.stream_published}/{r.stream_sent} p50 {r.stream_p50_ms or nan:.1f} / "
                        f"p99 {r.stream_p99_ms or nan:.1f} ms, ") if args.stream else ""
            verdict = "ok  " if r.ok else "FAIL"
            print(f"flood {n + 1:2d}/{args.floods}: {verdict} {r.flood_sets:6d} sets sent, "
                  f"{r.grids_during:4d} grids during, {recovery}valid {r.answered}/{r.valid_sets} "
                  f"({r.resends} resends), diagnostics max gap {gap if gap is not None else nan:.2f} s, "
                  f"node RSS {r.node_rss_mib or nan:.0f} MiB (heap in use {r.node_heap_in_use_mib or nan:.0f}) "
                  f"{r.failure}", flush=True)
            if not r.node_alive:
                break
        session.con.diagnostics.clear()
        session.spin_until(lambda: session.con.latest_diagnostics() is not None, 5.0)
        diagnostics = session.con.latest_diagnostics() or {}
    finally:
        asked = time.monotonic()
        rc, log = session.close()  # SIGINT, then waits for the node's exit
        stop_s = time.monotonic() - asked
    summary = summarise(floods, fresh, rc, stop_s)
    print(f"{summary['passed']} of {args.floods} floods passed; node RSS after the first "
          f"{summary['rss_after_first_mib']} MiB, after the last {summary['rss_after_last_mib']} MiB (at most "
          f"+{summary['rss_max_above_first_mib']}, slope {summary['rss_slope_mib_per_flood']} MiB per flood); "
          f"recovery at least {summary['recovery_min_fraction']} of the streamed sets, p50 median "
          f"{summary['recovery_p50_ms_median']} ms; node exit code {rc} {stop_s:.2f} s after SIGINT; "
          f"diagnostics max gap median {summary['diagnostics_max_gap_s_median']}, "
          f"max {summary['diagnostics_max_gap_s_max']}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
            "host": platform.node(), "cpus": os.cpu_count(), "node_params": params,
            "summary": summary, "floods": floods, "node_counters_at_end": diagnostics,
            "node_log_tail": log[-4000:]}, indent=2, default=str) + "\n")
    return 0 if summary["passed"] == args.floods and len(floods) == args.floods else 1


if __name__ == "__main__":
    sys.exit(main())
