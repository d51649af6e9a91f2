"""The wrong-type watch's logging rule against a stand-in graph (what get_publishers_info_by_topic
returns, check by check): the node over real DDS is in test_node_hostile.py; here the orders of
discovery a loaded machine produces, which real DDS gives only by chance. A writer's ROS node name
can arrive after the writer: the log waits for it (up to NAME_WAIT_S), so it names the node."""
from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from bevpool_ros.node import graph_watch
from bevpool_ros.node.graph_watch import NAME_WAIT_S, OUTSIDE, PublisherWatch

TOPIC, WANT = "/cameras/CAM_FRONT/feat", "bevpool_msgs/msg/CameraTensor"


def info(name="_NODE_NAME_UNKNOWN_", ns="_NODE_NAMESPACE_UNKNOWN_", gid=b"\x01" * 16,
         topic_type="bevpool_msgs/msg/Tensor", qos=None):
    return SimpleNamespace(node_name=name, node_namespace=ns, endpoint_gid=gid, topic_type=topic_type,
                           qos_profile=qos)


class Graph:
    """What a node offers the watch: the graph query, a logger, a timer; and the report."""

    def __init__(self):
        self.infos: list = []
        self.logged: list[str] = []
        self.report = SimpleNamespace(counts=Counter(), publisher_problems={})
        self.report.count = lambda k: self.report.counts.update([k])

    def get_publishers_info_by_topic(self, topic):
        return list(self.infos) if topic == TOPIC else []

    def get_logger(self):
        return SimpleNamespace(warning=self.logged.append)

    def create_timer(self, period, cb):
        return None

    def destroy_timer(self, t):
        pass


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(graph_watch, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def test_a_name_that_arrives_late_is_waited_for_and_logged_once(clock):
    g = Graph()
    w = PublisherWatch(g, {TOPIC: (WANT, None)}, g.report)
    g.infos = [info()]
    w.check()
    assert g.logged == [] and g.report.counts["wrong_type_publishers"] == 0
    assert g.report.publisher_problems == {
        f"wrong_type {TOPIC} <- {OUTSIDE}": f"bevpool_msgs/msg/Tensor (expected {WANT})"}
    clock[0] += 1.0
    g.infos = [info(name="legacy_producer", ns="/")]
    w.check()
    w.check()
    assert len(g.logged) == 1 and "/legacy_producer publishes 'bevpool_msgs/msg/Tensor'" in g.logged[0]
    assert g.report.counts["wrong_type_publishers"] == 1
    assert list(g.report.publisher_problems) == [f"wrong_type {TOPIC} <- /legacy_producer"]


def test_a_writer_that_never_gets_a_name_is_logged_after_the_wait(clock):
    g = Graph()
    w = PublisherWatch(g, {TOPIC: (WANT, None)}, g.report)
    g.infos = [info()]
    w.check()
    clock[0] += NAME_WAIT_S - 0.1
    w.check()
    assert g.logged == []
    clock[0] += 0.2
    w.check()
    w.check()
    assert len(g.logged) == 1 and OUTSIDE in g.logged[0]
    assert g.report.counts["wrong_type_publishers"] == 1


def test_a_nameless_writer_gone_before_the_wait_is_forgotten(clock):
    g = Graph()
    w = PublisherWatch(g, {TOPIC: (WANT, None)}, g.report)
    g.infos = [info(), info(name="ok", ns="/", gid=b"\x02" * 16, topic_type=WANT)]
    w.check()
    g.infos = []
    clock[0] += NAME_WAIT_S + 1
    w.check()
    assert g.logged == [] and g.report.publisher_problems == {} and w._nameless == {}


def test_a_publisher_of_the_expected_type_leaving_is_passed_on_once(clock):
    """reader_renewal.py renews a topic's reader when one of its writers has gone; a wrong-type
    publisher never matched the reader, so its leaving is not passed on."""
    g, calls = Graph(), []
    w = PublisherWatch(g, {TOPIC: (WANT, None)}, g.report, on_check=calls.append)
    staying, leaving = (info(name=n, ns="/", gid=bytes([i]) * 16, topic_type=WANT)
                        for i, n in ((1, "camera_driver"), (2, "flood")))
    g.infos = [staying, leaving, info(gid=b"\x03" * 16)]
    w.check()
    g.infos = [staying, leaving]          # the wrong-type one left
    w.check()
    g.infos = [staying]                   # a CameraTensor writer left
    w.check()
    w.check()
    assert calls == [[], [], [TOPIC], []]
