"""The output QoS default, on purpose: reliable KEEP_LAST output.qos_depth (2). Over real DDS a
consumer slower than the grids never holds the node's publishing up, loses older grids, and
always gets the freshest one; the README and docs/parameters.md say so, with the memory a deeper
queue costs and that the node cannot count a DDS consumer's losses."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import REPO

pytestmark = pytest.mark.ros

# a plain rclpy subscriber (history 10) whose callback takes 0.25 s: at 20 Hz it falls behind
SLOW_SUBSCRIBER = r'''
import sys, time
import rclpy
from bevpool_msgs.msg import BevFeature
rclpy.init()
node = rclpy.create_node("slow_subscriber")
got = []
def slow(m):
    got.append(m.header.stamp.sec)
    time.sleep(0.25)
node.create_subscription(BevFeature, "bev/features", slow, 10)
print("READY", flush=True)
last, end = int(sys.argv[1]), time.monotonic() + 60
while time.monotonic() < end and (not got or got[-1] != last):
    rclpy.spin_once(node, timeout_sec=0.1)
print(" ".join(map(str, got)), flush=True)
'''
GRIDS = 20


def test_a_slow_subscriber_gets_the_freshest_grid_and_never_holds_publishing_up():
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    import rclpy
    from bevpool_msgs.msg import BevFeature

    from bevpool_ros.params.table import BY_NAME
    from bevpool_ros.ros.qos import make_qos

    sub = subprocess.Popen([sys.executable, "-c", SLOW_SUBSCRIBER, str(GRIDS - 1)], stdout=subprocess.PIPE,
                           text=True)
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        assert sub.stdout.readline().strip() == "READY"
        node = rclpy.create_node("grid_publisher", context=ctx)
        # the node's output QoS at its defaults, as node/publishing.py builds it
        qos = make_qos(BY_NAME["output.qos_reliability"].default, BY_NAME["output.qos_depth"].default)
        pub = node.create_publisher(BevFeature, "bev/features", qos)
        deadline = time.monotonic() + 30
        while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pub.get_subscription_count() == 1
        time.sleep(0.5)  # the subscriber's side of discovery
        msg = BevFeature(layout="ZYXC")
        msg.tensor.dtype, msg.tensor.data = 9, bytes(1 << 20)
        slowest = 0.0
        for i in range(GRIDS):
            msg.header.stamp.sec = i
            t = time.monotonic()
            pub.publish(msg)
            slowest = max(slowest, time.monotonic() - t)
            time.sleep(0.05)
        got = [int(s) for s in sub.communicate(timeout=90)[0].split()]
    finally:
        if sub.poll() is None:
            sub.kill()
        rclpy.shutdown(context=ctx)
    assert slowest < 0.2, f"a publish waited {slowest:.3f} s for the slow consumer"
    assert got and got[-1] == GRIDS - 1, f"the freshest grid did not arrive: {got}"
    assert got == sorted(got), got


def test_the_docs_state_the_trade_off_and_the_invisible_loss():
    readme = (REPO / "README.md").read_text()
    assert ("`output.qos_depth` (2: a consumer that falls behind gets the freshest grid and loses older ones, right\n"
            "for a planner; a recorder that needs every grid raises it, at up to depth x grid bytes held in the node\n"
            "while it lags; the node cannot count what a DDS consumer lost, the GPU hand-off counts a consumer's\n"
            "lag") in readme
    params = (REPO / "docs" / "parameters.md").read_text()
    section = params.split("\n## Slow consumers\n", 1)[1].split("\n## ", 1)[0]
    assert "`python bench/output_qos.py --depth 2 10 30 --mb 21`" in section
    assert "The node cannot count what a DDS consumer lost" in section
