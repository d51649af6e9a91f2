#!/usr/bin/env python3
"""The GPU-sharing matrix as one Markdown table (scripts/gpu_check.sh with GPU_SHARE_REPEATS > 0).

    python bench/gpu_share_table.py ROWS.json [ROWS.json ...]

ROWS.json: bench/latency.py's rows (--rows). Rows with a ``gpu_load`` field are grouped by
transport and condition (alone, a load in another process, the same under MPS, a load in the
caller's process); per group the median over runs of each run's p50 and p99 end to end, with the
spread (lowest - highest), and the node's own figures. For inprocess the quoted figure is the host's
(pool call -> grid ready seen by the host): GPU events on the caller's stream leave out a wait for
the GPU's time slice, since both events wait alike.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

TARGETS = {("handoff_both", "load"): 4.0, ("dds", "load"): 10.0}  # p99 ms under a load without MPS


def condition(row: dict) -> str:
    params = f" [{row['node_params']}]" if row.get("node_params") else ""
    if row.get("rate_hz", 30) != 30:
        params += f" at {row['rate_hz']:g} Hz"
    if row.get("gpu_load", "none") == "none":
        return "alone" + (" (MPS)" if row.get("mps") else "") + params
    where = ""
    if row.get("gpu_load_in") == "thread":
        where = f" in the caller's process (caller's stream {row.get('caller_priority', 'normal')} priority)"
    mps = ", MPS" if row.get("mps") else ""
    if row.get("gpu_load_green_sms"):
        mps += f" (load on a green context of {row['gpu_load_green_sms']} SMs)"
    elif row.get("gpu_load_sm_percent"):
        mps += f" (load limited to {row['gpu_load_sm_percent']}% of the SMs)"
    return f"{row['gpu_load']} load{where}{mps}{params}"


def e2e(row: dict) -> tuple[float, float]:
    if row["transport"] == "inprocess":
        return row["host_wait_p50_ms"], row["host_wait_p99_ms"]
    return row["e2e_p50_ms"], row["e2e_p99_ms"]


def spread(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "n/a"
    med = statistics.median(values)
    return f"{med:.2f}" if len(values) == 1 else f"{med:.2f} ({min(values):.2f}-{max(values):.2f})"


def table(rows: list[dict]) -> str:
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if "gpu_load" not in r:
            continue
        groups.setdefault((r["transport"], condition(r)), []).append(r)
    order = ["handoff_both", "dds", "inprocess"]
    lines = ["| transport | condition | runs | e2e p50 ms | e2e p99 ms | node: GPU wait p50 / p99 ms | "
             "node: pooling stage p50 / p99 ms | received |",
             "|---|---|---:|---|---|---|---|---|"]
    alone_p99 = {}
    for (tr, cond), rs in sorted(groups.items(), key=lambda kv: (order.index(kv[0][0]) if kv[0][0] in order
                                                                 else 9, not kv[0][1].startswith("alone"), kv[0][1])):
        p50s, p99s = zip(*(e2e(r) for r in rs))
        if cond.split(" [")[0] == "alone":
            alone_p99[(tr, cond.partition(" [")[2])] = statistics.median(p99s)
        node = "n/a"
        if tr != "inprocess":
            node = (f"{spread([r.get('gpu_wait_p50_ms') for r in rs])} / "
                    f"{spread([r.get('gpu_wait_p99_ms') for r in rs])}")
        stage = f"{spread([r.get('stage_p50_ms') for r in rs])} / {spread([r.get('stage_p99_ms') for r in rs])}"
        received = ", ".join(f"{r['received']}/{r['frames']}" for r in rs)
        lines.append(f"| {tr} | {cond} | {len(rs)} | {spread(p50s)} | {spread(p99s)} | {node} | {stage} | {received} |")
    verdicts = []
    for (tr, cond), rs in groups.items():
        p99 = statistics.median(e2e(r)[1] for r in rs)
        if cond.split(" [")[0].endswith("load") and (tr, "load") in TARGETS:
            goal = TARGETS[(tr, "load")]
            verdicts.append(f"- {tr}, {cond} without MPS: p99 {p99:.2f} ms against <= {goal:g}: "
                            f"{'met' if p99 <= goal else 'missed'}")
        params = cond.partition(" [")[2]
        alone = alone_p99.get((tr, params))
        if cond.split(" [")[0].endswith("MPS") and alone:
            ratio = p99 / alone
            verdicts.append(f"- {tr}, {cond}: p99 {ratio:.2f}x its alone figure against <= 1.3x: "
                            f"{'met' if ratio <= 1.3 else 'missed'}")
    return "\n".join(lines + [""] + sorted(verdicts)) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", nargs="+", help="row files; their rows are pooled")
    args = ap.parse_args(argv)
    rows = [r for path in args.rows for r in json.loads(Path(path).read_text())]
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
