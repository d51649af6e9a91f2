"""Oversized input refused by Fast DDS before reassembly (the bounded CameraTensor type + the
node's PREALLOCATED reader profiles, opt-in with BEVPOOL_DDS_GUARD=1), against a live node over
real DDS.

Raw CDR is sent (Publisher.publish(bytes)), as a hostile or foreign publisher would: rclpy itself
refuses to serialize a CameraTensor over its bounds.
"""
from __future__ import annotations

import bevpool_msgs.msg  # noqa: E402,F401  (built by scripts/build_msgs.sh; missing = a real failure)
import pytest
from ros_harness import PeakRss, RosGraph, camera_tensor_cdr  # noqa: E402

from bevpool_ros.demo.session import resident_mib

pytestmark = pytest.mark.ros
CAM = "CAM_BACK"
MiB = 1 << 20


@pytest.fixture(scope="module")
def graph():
    import os

    os.environ["BEVPOOL_DDS_GUARD"] = "1"  # opt-in (ros/dds_guard.py); the node inherits it
    try:
        g = RosGraph({"diagnostics.period_s": 0.2, "log_throttle_s": 0.5})  # default QoS and limits
    finally:
        del os.environ["BEVPOOL_DDS_GUARD"]
    yield g
    assert g.close() == 0


@pytest.fixture(scope="module")
def hostile(graph):
    """A best-effort, depth-1 writer on CAM's feature topic (keeps at most one big sample here)."""
    from bevpool_msgs.msg import CameraTensor

    from bevpool_ros.ros.qos import make_qos

    pub = graph.pub.create_publisher(CameraTensor, f"cameras/{CAM}/feat", make_qos("best_effort", 1))
    assert graph.spin_until(lambda: pub.get_subscription_count() > 0, 20)
    yield pub
    graph.pub.destroy_publisher(pub)


def test_input_topics_are_size_bounded_by_fast_dds(graph):
    d = graph.diagnostics_where(lambda d: "input_size_guard" in d)
    assert d is not None and d["input_size_guard"] == "dds", d
    assert "restarting once with" in graph.node.output()


def test_repeated_200_mb_tensors_are_refused_before_allocation(graph, hostile):
    for i in range(3):  # settle: the node's buffers for valid traffic are in use before the baseline
        assert graph.publish_and_wait(i) is not None
    baseline = resident_mib(graph.node.proc.pid)
    raw = camera_tensor_cdr(graph.next_stamp(), "x", "feat", "HWC", (200 * MiB,), 1, bytes(200 * MiB))
    peak = PeakRss(graph.node.proc.pid)
    published = 0
    try:
        for i in range(6):  # each valid set travels with a 200 MB sample on one of its topics
            hostile.publish(raw)
            published += graph.publish_and_wait(i % 4, timeout=15) is not None
    finally:
        grew = peak.stop() - baseline
    assert published == 6, graph.node.output()[-3000:]
    assert grew < 100, f"node RSS grew {grew:.0f} MiB over its {baseline:.0f} MiB baseline"
    assert graph.node.alive()


def test_string_field_beyond_its_bound_costs_nothing(graph, hostile):
    """A 1 MB layout string fits the sample size bound (16 MiB) but not the field's (8 chars)."""
    feat_bytes = 16 * 44 * 80 * 4
    raw = camera_tensor_cdr(graph.next_stamp(), "x", "feat", "Q" * MiB, (16, 44, 80), 9, bytes(feat_bytes))
    for _ in range(3):
        hostile.publish(raw)
    assert graph.publish_and_wait(1) is not None, graph.node.output()[-3000:]
    assert graph.node.alive()
    lines = [line for line in graph.node.output().splitlines() if "QQQQ" in line]
    assert not lines or max(map(len, lines)) <= 400
