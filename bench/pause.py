#!/usr/bin/env python3
"""A paused node is not a stuck one: SIGSTOP for a while, then SIGCONT, and the node goes on.

    python bench/pause.py [--pauses 10 60] [--sets 100] [--rate 20] [--backend cpu|cuda|best]
                          [--param NAME=VALUE ...] [--json FILE]

What a debugger, a frozen container (``docker pause``) or a host under memory pressure does to a
process: every thread stops together, the watchdog's too. For each pause: ``--sets`` valid sets at
``--rate`` before it, the pause, then the same after it. Reported per pause: sets published before
and after, their latency, whether the node is alive, the watchdog's lines. Then SIGINT: the node's
exit code and stop time. Exit 1 when the node died or lost a set after a pause.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pauses", type=float, nargs="+", default=[10.0, 60.0])
    ap.add_argument("--sets", type=int, default=100)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from bevpool_ros.demo.flood import stream_sets
    from bevpool_ros.demo.session import PipelineSession

    params = {"backend": args.backend, "diagnostics.period_s": 1.0}
    params.update(item.split("=", 1) for item in args.param)
    session = PipelineSession(None, params)
    rows, ok = [], True
    try:
        if not session.wait_ready(60.0):
            print("bevpool_node not ready within 60 s", file=sys.stderr)
            return 1
        for pause in args.pauses:
            before = stream_sets(session, args.sets, args.rate)
            session.node.proc.send_signal(signal.SIGSTOP)
            try:
                session.spin_until(lambda: False, pause)
            finally:
                session.node.proc.send_signal(signal.SIGCONT)
            after = stream_sets(session, args.sets, args.rate)
            alive = session.node.alive()
            row = {"pause_s": pause, "alive": alive, "before_published": before[1], "after_published": after[1],
                   "sent": args.sets, "after_p50_ms": float(np.percentile(after[2], 50)) if after[2] else None,
                   "after_p99_ms": float(np.percentile(after[2], 99)) if after[2] else None}
            rows.append(row)
            ok = ok and alive and after[1] == args.sets
            print(f"paused {pause:g} s: alive {alive}; published {before[1]}/{args.sets} before, "
                  f"{after[1]}/{args.sets} after (p50 {row['after_p50_ms'] or float('nan'):.1f} / "
                  f"p99 {row['after_p99_ms'] or float('nan'):.1f} ms)", flush=True)
            if not alive:
                break
    finally:
        asked = time.monotonic()
        rc, log = session.close()
        stop_s = time.monotonic() - asked
    lines = [ln for ln in log.splitlines() if "watchdog:" in ln or "backstop:" in ln]
    print(f"node exit code {rc} {stop_s:.2f} s after SIGINT; watchdog lines: {lines or 'none'}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d"), "node_params": params,
            "pauses": rows, "node_exit_code": rc, "node_stop_s": round(stop_s, 2), "watchdog_lines": lines},
            indent=2) + "\n")
    return 0 if ok and rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
