#!/usr/bin/env python3
"""What the node's slow sets overlapped: reads the timeline bench/trace_hooks writes
(TIMELINE_DIR) and compares the sets that took longer than ``--slow`` x the median with the rest.

    python bench/timeline_report.py /tmp/tl/timeline_<pid>.json [--slow 2.5]

Per kind of event (GC pause by generation, timer callback, executor take), how often it overlaps
a slow set and a normal one, and the slow sets' spacing (a periodic cause shows one period).
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import numpy as np


def overlaps(a0: float, a1: float, events) -> list:
    return [e for e in events if e[0] < a1 and e[1] > a0]


def report(timeline: dict, slow_factor: float) -> dict:
    sets = sorted(timeline["sets"])
    ms = np.array([(b - a) * 1e3 for a, b, _ in sets])
    median = float(np.median(ms))
    slow = [s for s, d in zip(sets, ms) if d > slow_factor * median]
    normal = [s for s, d in zip(sets, ms) if d <= slow_factor * median]
    events = {f"gc gen {g}": [(a, b) for a, b, g2 in timeline["gc"] if g2 == g] for g in (0, 1, 2)}
    for kind in ("timers", "takes"):
        for name in sorted({n for _, _, n in timeline[kind]}):
            events[name] = [(a, b) for a, b, n in timeline[kind] if n == name]
    rows = {}
    for name, evs in events.items():
        if not evs:
            continue
        hit = lambda group: sum(bool(overlaps(a, b, evs)) for a, b, _ in group)  # noqa: E731
        rows[name] = {"events": len(evs),
                      "event_p50_ms": round(float(np.median([(b - a) * 1e3 for a, b in evs])), 3),
                      "in_slow_sets": f"{hit(slow)}/{len(slow)}",
                      "in_normal_sets": f"{hit(normal)}/{len(normal)}"}
    gaps = np.diff([a for a, _, _ in slow]) if len(slow) > 1 else np.array([])
    threads = Counter(t for _, _, t in slow)
    return {"sets": len(sets), "median_ms": round(median, 3), "slow": len(slow),
            "slow_ms_p50": round(float(np.median([(b - a) * 1e3 for a, b, _ in slow])), 3) if slow else None,
            "slow_threads": dict(threads),
            "slow_spacing_s_p25_p50_p75": [round(float(x), 3) for x in np.percentile(gaps, (25, 50, 75))]
            if gaps.size else [],
            "overlaps": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("timeline", type=Path, nargs="+")
    ap.add_argument("--slow", type=float, default=2.5, help="slow: longer than this x the median")
    args = ap.parse_args(argv)
    for path in args.timeline:
        print(path)
        print(json.dumps(report(json.loads(path.read_text()), args.slow), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
