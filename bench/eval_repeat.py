#!/usr/bin/env python3
"""The same honest evaluation many times in a row: does ``bevpool-bag eval`` pass every time?

    python bench/eval_repeat.py [--runs 20] [--frames 39] [--rate 1.0] [--hogs 2] [--json FILE]

Records one synthetic nuScenes bag (``--frames`` sets at 20 Hz), then runs ``bevpool-bag eval``
on it ``--runs`` times at the recorded pace (``--rate``), each a fresh node, while ``--hogs``
processes keep CPU cores busy (``while True: pass``), as a loaded robot computer would. Per run:
the exit code, grids, complete sets lost and their causes, wall time. Exit 1 when any run failed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--frames", type=int, default=39)
    ap.add_argument("--rate", type=float, default=1.0)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    bag_cli = [sys.executable, "-m", "bevpool_ros.cli.bag"]
    runs, started = [], time.time()
    with tempfile.TemporaryDirectory(prefix="bevpool_eval_repeat_") as tmp:
        bag = Path(tmp) / "bag"
        subprocess.run([*bag_cli, "record-synthetic", str(bag), "--frames", str(args.frames)], check=True,
                       capture_output=True)
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
        try:
            for n in range(args.runs):
                out, report = Path(tmp) / f"out{n}", Path(tmp) / f"report{n}.json"
                t0 = time.monotonic()
                r = subprocess.run([*bag_cli, "eval", str(bag), "--out", str(out), "--rate", str(args.rate),
                                    "--report", str(report), "--no-progress"], capture_output=True, text=True)
                rep = json.loads(report.read_text()) if report.exists() else {}
                row = {"rc": r.returncode, "seconds": round(time.monotonic() - t0, 1),
                       "published": rep.get("published"), "complete_sets": rep.get("complete_sets"),
                       "lost": rep.get("lost"), "lost_by_cause": rep.get("lost_by_cause"),
                       "stderr_tail": r.stderr.strip().splitlines()[-2:] if r.returncode else []}
                runs.append(row)
                print(f"run {n + 1:2d}/{args.runs}: rc {r.returncode}, {row['published']} published, "
                      f"lost {row['lost']} "
                      f"{row['lost_by_cause'] or ''} ({row['seconds']} s) {' | '.join(row['stderr_tail'])}",
                      flush=True)
        finally:
            for h in hogs:
                h.kill()
    passed = sum(r["rc"] == 0 for r in runs)
    print(f"{passed} of {args.runs} evaluations passed")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d", time.gmtime(started)),
            "host": platform.node(), "cpus": os.cpu_count(), "passed": passed, "runs": runs}, indent=2) + "\n")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
