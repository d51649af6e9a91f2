"""What a plain subscriber gets of the node's output at a given output.qos_depth, and what the
publisher holds meanwhile.

    python bench/output_qos.py --depth 2 10 --mb 21 --grids 30 --rate 10

A publisher with the node's output QoS (reliable, KEEP_LAST ``--depth``, ros/qos.py) sends
``--grids`` BevFeature messages of ``--mb`` MB at ``--rate`` Hz; a plain rclpy subscriber (history
10, the rclpy default) in another process counts what arrives. Prints one JSON line per depth:
received of sent, and the publisher's RSS growth over the run (the grids its history holds for a
lagging reader). Nothing but DDS: the node's pooling is not involved.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test"))

SUBSCRIBER = r'''
import sys, time
import rclpy
from bevpool_msgs.msg import BevFeature
rclpy.init()
node = rclpy.create_node("plain_subscriber")
got = []
node.create_subscription(BevFeature, "bev/features", lambda m: got.append(m.header.stamp.sec), 10)
print("READY", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    rclpy.spin_once(node, timeout_sec=0.1)
print(len(got), flush=True)
'''


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def run(depth: int, mb: float, grids: int, rate: float) -> dict:
    import rclpy
    from bevpool_msgs.msg import BevFeature

    from bevpool_ros.ros.qos import make_qos

    sub = subprocess.Popen([sys.executable, "-c", SUBSCRIBER, str(grids / rate + 15)], stdout=subprocess.PIPE,
                           text=True)
    sub.stdout.readline()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("grid_publisher", context=ctx)
    pub = node.create_publisher(BevFeature, "bev/features", make_qos("reliable", depth))
    deadline = time.monotonic() + 20
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # discovery settles both ways
    msg = BevFeature(layout="ZYXC")
    msg.tensor.dtype, msg.tensor.data = 9, bytes(int(mb * 1e6))
    before, due = rss_mib(), time.monotonic()
    for i in range(grids):
        msg.header.stamp.sec = i
        pub.publish(msg)
        due += 1.0 / rate
        time.sleep(max(0.0, due - time.monotonic()))
    grown = rss_mib() - before
    received = int(sub.communicate()[0].split()[-1])
    node.destroy_node()
    rclpy.shutdown(context=ctx)
    return {"depth": depth, "grid_mb": mb, "rate_hz": rate, "sent": grids, "received": received,
            "publisher_rss_growth_mib": round(grown)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, nargs="+", default=[2, 10])
    ap.add_argument("--mb", type=float, default=21.0, help="grid size, MB")
    ap.add_argument("--grids", type=int, default=30)
    ap.add_argument("--rate", type=float, default=10.0)
    args = ap.parse_args()
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    for depth in args.depth:
        print(json.dumps(run(depth, args.mb, args.grids, args.rate)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
