#!/usr/bin/env python3
"""Oversized input tensors against a live bevpool_node: node memory and valid sets, with and
without the Fast DDS size guard (bounded CameraTensor type + PREALLOCATED reader profiles).

    .venv/bin/python bench/oversize_guard.py [--seconds 12] [--big-mib 200] [--rate 20] [--out PREFIX]

For each mode the node (cpu backend, default parameters) receives the synthetic 6-camera rig at
--rate Hz for --seconds, and once per second a --big-mib MiB CameraTensor (raw CDR, as a hostile
publisher sends it) on one camera's feature topic. Reports the node's RSS before, peak and after,
and the valid sets published. Writes bench/results/oversize_guard_cpu.json and .md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bevpool_ros.demo.session import resident_mib  # noqa: E402

sys.path.insert(0, str(ROOT / "test"))
MiB = 1 << 20


def run(guard: bool, seconds: float, big_mib: int, rate: float) -> dict:
    from ros_harness import camera_tensor_cdr

    from bevpool_ros.demo.session import PipelineSession

    os.environ["BEVPOOL_DDS_GUARD"] = "1" if guard else "0"  # inherited by the node process
    session = PipelineSession(None, {"backend": "cpu", "diagnostics.period_s": 0.5})
    try:
        if not session.wait_ready(30.0):
            raise RuntimeError("node not ready")
        pid = session.node.proc.pid
        for i in range(20):  # warm up: discovery, first sets, buffers in use
            session.pub.publish_frame(i)
            session.spin_until(lambda: False, 1 / rate)
        session.spin_until(lambda: False, 1.0)
        before, received_before = resident_mib(pid), session.con.count
        peak = [before]
        stop = threading.Event()

        def sample():
            while not stop.wait(0.01):
                peak[0] = max(peak[0], resident_mib(pid))
        threading.Thread(target=sample, daemon=True).start()
        raw = camera_tensor_cdr(1, "x", "feat", "HWC", (big_mib * MiB,), 1, bytes(big_mib * MiB))
        big_pub = session.pub.pubs[(session.rig.cameras[3].name, "feat")]
        sent, bigs, t0 = 0, 0, time.monotonic()
        while time.monotonic() - t0 < seconds:
            if time.monotonic() - t0 >= bigs:
                big_pub.publish(raw)
                bigs += 1
            session.pub.publish_frame(sent)
            sent += 1
            session.spin_until(lambda: False, 1 / rate)
        session.spin_until(lambda: False, 2.0)
        stop.set()
        after = resident_mib(pid)
        session.con.diagnostics.clear()
        session.spin_until(lambda: session.con.latest_diagnostics() is not None, 5.0)
        diag = session.con.latest_diagnostics() or {}
        return {"guard": diag.get("input_size_guard", "?"), "oversized_sent": bigs, "oversized_mib": big_mib,
                "valid_sets_sent": sent, "valid_sets_published": session.con.count - received_before,
                "rss_before_mib": round(before, 1), "rss_peak_mib": round(peak[0], 1),
                "rss_after_mib": round(after, 1), "peak_growth_mib": round(peak[0] - before, 1),
                "dds_message_lost": int(diag.get("dropped_dds_message_lost", 0))}
    finally:
        session.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--big-mib", type=int, default=200)
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "oversize_guard_cpu"))
    args = ap.parse_args()
    results = {mode: run(mode == "guarded", args.seconds, args.big_mib, args.rate)
               for mode in ("guarded", "unguarded")}
    cmd = f"python bench/oversize_guard.py --seconds {args.seconds:g} --big-mib {args.big_mib} --rate {args.rate:g}"
    Path(args.out + ".json").write_text(json.dumps({"command": cmd, **results}, indent=1) + "\n")
    rows = ["| mode | guard | oversized sent | valid sets sent / published | RSS before | peak | after "
            "| peak growth (MiB) | dds_message_lost |", "|---|---|---|---|---|---|---|---|---|"]
    for mode, r in results.items():
        rows.append(f"| {mode} | {r['guard']} | {r['oversized_sent']} x {r['oversized_mib']} MiB | "
                    f"{r['valid_sets_sent']} / {r['valid_sets_published']} | {r['rss_before_mib']} | "
                    f"{r['rss_peak_mib']} | {r['rss_after_mib']} | **{r['peak_growth_mib']}** | "
                    f"{r['dds_message_lost']} |")
    md = (f"# Oversized input tensors vs bevpool_node memory\n\nCommand: `{cmd}` (cpu backend, 6 cameras)\n\n"
          + "\n".join(rows) + "\n\nguarded: the bounded `CameraTensor` type and the node's PREALLOCATED "
          "reader profiles; Fast DDS refuses each oversized sample at its first fragment. unguarded: "
          "the default (`BEVPOOL_DDS_GUARD=0`): the shipped profile's DYNAMIC readers reassemble each sample "
          "(its memory is what has arrived: a payload that large is mapped on its own) and the middleware "
          "drops it (over the type's bound); its memory goes back then.\n")
    Path(args.out + ".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
