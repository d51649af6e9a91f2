#!/usr/bin/env python3
"""Floods in a row against one bevpool_node: does it always come back? (robot conditions)

    python bench/flood.py [--floods 20] [--seconds 30] [--publishers 3] [--valid-sets 20]
                          [--backend cpu|cuda|best] [--precision fp32|fp16|fp8]
                          [--param NAME=VALUE ...] [--json FILE]

Each flood: ``--publishers`` producer processes send complete camera sets of the nuScenes rig as
fast as they can for ``--seconds`` (best effort, without the large-data DDS profile, so every
tensor travels in fragments: bevpool_ros/demo/flood.py); then ``--valid-sets`` sets, each resent
until its grid comes back (10 s at most). A flood passes when the node is alive and every valid
set got its grid. Reported per flood: sets sent, grids during the flood, resends, flood end ->
first grid, the longest gap between the node's /diagnostics (its period is 1 s here), the node's
resident memory after it, and the node's counters at the end. Exit 1 when any flood failed.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--floods", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--publishers", type=int, default=3)
    ap.add_argument("--valid-sets", type=int, default=20)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="another node parameter (repeatable), e.g. executor=single_threaded")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()

    from bevpool_ros.demo.flood import run_flood
    from bevpool_ros.demo.session import PipelineSession
    from bevpool_ros.paths import default_rig_path

    params = {"backend": args.backend, "diagnostics.period_s": 1.0}
    if args.precision:
        params["precision"] = args.precision
    for item in args.param:  # passed as written: `-p NAME:=VALUE` reads it as YAML
        name, value = item.split("=", 1)
        params[name] = value
    rig = str(default_rig_path())
    session = PipelineSession(rig, params)
    floods, diagnostics, started = [], {}, time.time()
    try:
        if not session.wait_ready(60.0):
            print("bevpool_node not ready within 60 s", file=sys.stderr)
            return 1
        for n in range(args.floods):
            r = run_flood(session, rig, args.publishers, args.seconds, args.valid_sets)
            floods.append(r.as_dict())
            gap = r.diagnostics_max_gap_s
            print(f"flood {n + 1:2d}/{args.floods}: {'ok  ' if r.ok else 'FAIL'} {r.flood_sets:6d} sets sent, "
                  f"{r.grids_during:4d} grids during, valid {r.answered}/{r.valid_sets} "
                  f"({r.resends} resends), first grid {r.first_grid_after_s or float('nan'):.2f} s after, "
                  f"diagnostics max gap {gap if gap is not None else float('nan'):.2f} s, node RSS "
                  f"{r.node_rss_mib or float('nan'):.0f} MiB {r.failure}",
                  flush=True)
            if not r.node_alive:
                break
        session.con.diagnostics.clear()
        session.spin_until(lambda: session.con.latest_diagnostics() is not None, 5.0)
        diagnostics = session.con.latest_diagnostics() or {}
    finally:
        asked = time.monotonic()
        rc, log = session.close()  # SIGINT, then waits for the node's exit
        stop_s = time.monotonic() - asked
    passed = sum(f["ok"] for f in floods)
    gaps = [f["diagnostics_max_gap_s"] for f in floods if f["diagnostics_max_gap_s"] is not None]
    summary = {"floods": len(floods), "passed": passed, "node_exit_code": rc, "node_stop_s": round(stop_s, 2),
               "diagnostics_max_gap_s_median": statistics.median(gaps) if gaps else None,
               "diagnostics_max_gap_s_max": max(gaps) if gaps else None}
    print(f"{passed} of {args.floods} floods passed; node exit code {rc} ({stop_s:.2f} s after SIGINT); "
          f"diagnostics max gap median "
          f"{summary['diagnostics_max_gap_s_median']}, max {summary['diagnostics_max_gap_s_max']}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
            "host": platform.node(), "cpus": os.cpu_count(), "node_params": params,
            "summary": summary, "floods": floods, "node_counters_at_end": diagnostics,
            "node_log_tail": log[-4000:]}, indent=2, default=str) + "\n")
    return 0 if passed == args.floods and len(floods) == args.floods else 1


if __name__ == "__main__":
    sys.exit(main())
