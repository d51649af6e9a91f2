#!/usr/bin/env python3
"""The hand-off's datagram path alone, the hand-off core against its Python twin, no GPU needed:

    python bench/handoff_core.py [--datagrams 1000] [--rate 200] [--impl python native] [--json F]

This process is a producer: a ring's signal socket (signal.SignalServer, native or not) sends one
TensorHandoff per tick, written from its template as producers write them, its stamp the send
instant (CLOCK_MONOTONIC). A consumer process takes them as bevpool consumers do
(announcements.AnnouncementLinks over the ring's signal socket, native or not: the core's waiter, or
SignalClient + TemplateReader) and records, per datagram, when it was read off the socket (the
link's arrival) and when its delivery began. Per implementation (both sides alike), p50 / p99 in
microseconds of: send (the producer's send call), wake-up (sent -> read off the socket), read (->
delivery: template read, de-duplication), and the whole (sent -> delivered). A benchmark: numbers
depend on the machine and on what else runs there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def announcement(socket_path: str):
    from bevpool_msgs.msg import TensorHandoff

    m = TensorHandoff()
    m.camera, m.stream, m.layout, m.socket_path = "CAM_FRONT", "depth", "DHW", socket_path
    m.ring_id, m.ring_size, m.nbytes, m.dtype, m.shape = 77, 36, 118 * 16 * 44 * 2, 8, [118, 16, 44]
    m.device_uuid = np.arange(16, dtype=np.uint8)
    m.boot_id = "0b5e1d2c-1111-2222-3333-444455556666"
    return m


def role_consumer(args) -> int:
    import rclpy
    from bevpool_msgs.msg import TensorHandoff

    from bevpool_ros.handoff.announcements import AnnouncementLinks

    rclpy.init(args=[sys.argv[0]])
    node = rclpy.create_node("bevpool_handoff_core_bench")
    got = []
    links = AnnouncementLinks(node, TensorHandoff, lambda m, way, arrival: got.append(
        (int(m.sequence), m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec, arrival, time.perf_counter())),
        native=args.impl == ["native"])
    links.listen(args.socket)
    deadline = time.monotonic() + 10
    while links.connected != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    print("ready", links.native, flush=True)
    deadline = time.monotonic() + args.datagrams / args.rate * 3 + 30
    while (not got or got[-1][0] < args.datagrams) and time.monotonic() < deadline:
        time.sleep(0.05)
    links.close()
    Path(args.record).write_text(json.dumps({"got": got, "native": links.native,
                                             "template_hits": links.templates.hits}))
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def run(impl: str, datagrams: int, rate: float) -> dict:
    from bevpool_ros.handoff.cdr_template import TemplateWriter
    from bevpool_ros.handoff.signal import SignalServer, signal_path

    folder = tempfile.mkdtemp(prefix="bevpool_core_bench_")
    socket_path = os.path.join(folder, "ring.sock")
    server = SignalServer(signal_path(socket_path), native=impl == "native")
    record = os.path.join(folder, "consumer.json")
    proc = subprocess.Popen([sys.executable, __file__, "--role", "consumer", "--impl", impl, "--socket", socket_path,
                             "--record", record, "--datagrams", str(datagrams), "--rate", str(rate)],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        ready = proc.stdout.readline().split()
        assert ready == ["ready", str(impl == "native")], ready
        while server.consumers != 1:
            time.sleep(0.01)
        writer, base, send_us = TemplateWriter(type(announcement(socket_path))), announcement(socket_path), []
        handle = bytes(range(64))
        for seq in range(1, datagrams + 1):
            time.sleep(1.0 / rate)  # a camera-like pace: each send meets cold caches
            t = time.monotonic_ns()
            data = writer.serialize("k", lambda: base, (t // 1_000_000_000, t % 1_000_000_000, seq % 36, seq, handle,
                                                        1.0))
            t0 = time.perf_counter()
            server.send(data)
            send_us.append((time.perf_counter() - t0) * 1e6)
        proc.wait(60)
        rec = json.loads(Path(record).read_text())
    finally:
        if proc.poll() is None:
            proc.kill()
        server.close()
    got = rec["got"]
    wake = [(arrival - stamp / 1e9) * 1e6 for _, stamp, arrival, _ in got]
    read = [(done - arrival) * 1e6 for _, _, arrival, done in got]
    whole = [(done - stamp / 1e9) * 1e6 for _, stamp, _, done in got]

    def q(v):
        return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99))}
    return {"impl": impl, "native_consumer": rec["native"], "sent": datagrams, "received": len(got),
            "template_hits": rec["template_hits"], "send_us": q(send_us), "wakeup_us": q(wake), "read_us": q(read),
            "whole_us": q(whole)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datagrams", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=200.0, help="datagrams per second")
    ap.add_argument("--impl", nargs="+", default=["python", "native"], choices=("python", "native"))
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--role", choices=("consumer",), help=argparse.SUPPRESS)
    ap.add_argument("--socket", help=argparse.SUPPRESS)
    ap.add_argument("--record", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.role == "consumer":
        return role_consumer(args)
    if "native" in args.impl:
        from bevpool_ros.handoff.native.core import library, unavailable_reason

        if library() is None:
            print(f"the hand-off core is not available: {unavailable_reason()}", file=sys.stderr)
            return 2
    rows = [run(impl, args.datagrams, args.rate) for impl in args.impl]
    command = "python bench/handoff_core.py " + " ".join(argv if argv is not None else sys.argv[1:])
    print(f"# hand-off datagram path, {args.datagrams} datagrams at {args.rate:g}/s (us, p50 / p99)\n\n"
          f"Command: `{command}`; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}\n\n"
          "| implementation | received | send | wake-up | read | sent -> delivered |\n|---|---|---|---|---|---|")
    for r in rows:
        cells = " | ".join(f"{r[k]['p50']:.1f} / {r[k]['p99']:.1f}" for k in ("send_us", "wakeup_us", "read_us",
                                                                              "whole_us"))
        print(f"| {r['impl']} | {r['received']} of {r['sent']} | {cells} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": command, "rows": rows,
                                               "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
