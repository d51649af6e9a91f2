"""Memory Fast DDS commits for bevpool_node's inputs, measured in a fresh process; prints JSON.

    python test/dds_memory_probe.py        (run by test_dds_memory.py)

For a bounded type Fast DDS allocates every history payload at the type's largest size (16 MiB
for CameraTensor) with calloc, ``allocated_samples`` of them when a reader is created. Whether
those pages count is glibc's choice: fresh mmap'd blocks stay untouched, but blocks taken from a
heap that held data before are zero-filled, so a long-lived process (the test suite, a busy
node) commits them all. MALLOC_PERTURB_, which the caller sets, makes calloc zero-fill every
block, so RSS shows the worst case on any machine and in any process history.

Reports the RSS growth (MiB) of one CameraTensor reader with the node's input QoS, one writer
with the synthetic publisher's, and a whole in-process BevPoolNode (12 tensor + 6 CameraInfo
subscriptions), all with the shipped Fast DDS profile, as the tests and tools run. A watchdog
ends the process before the growth can exhaust the machine.
"""
from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
MiB = 1 << 20
ABORT_GROWTH_MIB = 3072


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def watchdog(baseline: float, report: dict) -> None:
    """Exit (code 3, partial report) once RSS is ABORT_GROWTH_MIB above ``baseline``."""
    def watch():
        while True:
            grown = rss_mib() - baseline
            if grown > ABORT_GROWTH_MIB:
                print(json.dumps({**report, "aborted_at_mib": round(grown)}), flush=True)
                os._exit(3)
            threading.Event().wait(0.005)
    threading.Thread(target=watch, daemon=True).start()


def main() -> int:
    from ros_harness import isolate_ros_env

    isolate_ros_env()  # own domain + the shipped profile, as in the tests and tools
    import rclpy
    from bevpool_msgs.msg import CameraTensor
    from rclpy.parameter import Parameter

    from bevpool_ros.node.node import BevPoolNode
    from bevpool_ros.params.table import BY_NAME
    from bevpool_ros.ros.qos import make_qos

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    probe = rclpy.create_node("dds_memory_probe", context=ctx)
    report: dict = {"perturb": os.environ.get("MALLOC_PERTURB_")}
    watchdog(rss_mib(), report)

    in_qos = make_qos(BY_NAME["input.qos_reliability"].default, BY_NAME["input.qos_depth"].default)
    before = rss_mib()
    probe.create_subscription(CameraTensor, "/probe/reader", lambda m: None, in_qos)
    report["reader_mib"] = round(rss_mib() - before, 1)

    before = rss_mib()
    probe.create_publisher(CameraTensor, "/probe/writer", make_qos("reliable", 5))  # the synthetic publisher's
    report["writer_mib"] = round(rss_mib() - before, 1)

    before = rss_mib()
    node = BevPoolNode(context=ctx, parameter_overrides=[Parameter("backend", value="cpu")])
    report["node_mib"] = round(rss_mib() - before, 1)
    readers = node.inputs.readers.subs.values()
    report["node_tensor_subscriptions"] = sum(1 for s in readers if s.msg_type is CameraTensor)
    print(json.dumps(report), flush=True)
    node.destroy_node()
    probe.destroy_node()
    rclpy.try_shutdown(context=ctx)
    return 0


if __name__ == "__main__":
    sys.exit(main())
