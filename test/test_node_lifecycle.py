"""bevpool_node as a managed (lifecycle) node, driven over DDS from another process through its
real ``<node>/change_state`` and ``<node>/get_state`` services, as Nav2's lifecycle manager does."""
from __future__ import annotations

import time

import bevpool_msgs.msg  # noqa: F401  (built by scripts/build_msgs.sh; missing = a real failure)
import pytest
from ros_harness import DISCOVERY_TIMEOUT, RosGraph

from bevpool_ros.paths import default_rig_path

pytestmark = pytest.mark.ros
NODE = "/bevpool_node"


class Lifecycle:
    """A lifecycle manager's two calls, from the test's own node."""

    def __init__(self, graph):
        from lifecycle_msgs.srv import ChangeState, GetState

        self.graph = graph
        self.change = graph.con.create_client(ChangeState, f"{NODE}/change_state")
        self.get = graph.con.create_client(GetState, f"{NODE}/get_state")
        def ready():
            return self.change.service_is_ready() and self.get.service_is_ready()
        assert graph.spin_until(ready, DISCOVERY_TIMEOUT), graph.node.output()[-3000:]
        # matched is not answered: on a busy machine our request can reach the server's reader
        # before it knows us back. get_state changes nothing: asked again until it is answered.
        deadline = time.monotonic() + 120.0
        while True:
            fut = self.get.call_async(GetState.Request())
            if graph.spin_until(fut.done, 5.0) or time.monotonic() > deadline:
                break
        assert fut.done(), graph.node.output()[-3000:]

    def _call(self, client, request):
        fut = client.call_async(request)
        assert self.graph.spin_until(fut.done, 120.0), self.graph.node.output()[-3000:]
        return fut.result()

    def state(self) -> str:
        from lifecycle_msgs.srv import GetState

        return self._call(self.get, GetState.Request()).current_state.label

    def transition(self, label: str) -> bool:
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        request.transition.label = label
        return self._call(self.change, request).success


def set_param(graph, name, value):
    return graph.set_parameters(**{name: value})[0]


def no_grid_while_sending(graph, seconds: float = 1.5) -> bool:
    """Sets sent for a while come back as no grid at all."""
    before = graph.con.count
    for _ in range(int(seconds / 0.25)):
        graph.pub.publish_frame(0, graph.next_stamp())
        graph.spin_until(lambda: False, 0.25)
    return graph.con.count == before


def test_transitions_over_dds_from_another_process():
    g = RosGraph({"autostart": False, "diagnostics.period_s": 0.2}, wait=False)
    try:
        lc = Lifecycle(g)
        assert lc.state() == "unconfigured"
        assert not g.con.publisher_matched() and not g.pub.subscribers_matched()

        assert lc.transition("configure") and lc.state() == "inactive"
        # configured: backend prepared, publishers made; inputs not subscribed yet
        assert g.spin_until(g.con.publisher_matched, DISCOVERY_TIMEOUT)
        assert not g.pub.subscribers_matched()
        d = g.diagnostics_where(lambda d: d.get("state") == "inactive")
        assert d is not None and d["message"].startswith("inactive")

        assert lc.transition("activate") and lc.state() == "active"
        got = g.send_until_grid(lambda s: g.pub.publish_frame(0, s), DISCOVERY_TIMEOUT)
        assert got is not None, g.node.output()[-3000:]
        assert len(got.msg.cameras) == 6

        assert lc.transition("deactivate") and lc.state() == "inactive"
        def unsubscribed():  # every input subscription gone
            return not any(p.get_subscription_count() for p in g.pub.pubs.values())
        assert g.spin_until(unsubscribed, DISCOVERY_TIMEOUT)
        assert no_grid_while_sending(g)

        assert lc.transition("activate") and lc.state() == "active"
        assert g.send_until_grid(lambda s: g.pub.publish_frame(1, s), DISCOVERY_TIMEOUT) is not None

        # configure-time parameters are read-only while configured, free while unconfigured
        r = set_param(g, "camera_names", ["CAM_FRONT", "CAM_BACK"])
        assert not r.successful and "read-only" in r.reason
        assert lc.transition("deactivate") and lc.transition("cleanup")
        assert lc.state() == "unconfigured"
        # publishers released
        assert g.spin_until(lambda: not g.con.publisher_matched(), DISCOVERY_TIMEOUT)
        assert set_param(g, "camera_names", ["CAM_FRONT", "CAM_BACK"]).successful

        # a configuration that cannot load: the transition fails, says why, stays unconfigured
        assert set_param(g, "rig_file", "/nonexistent/rig.yaml").successful
        assert not lc.transition("configure") and lc.state() == "unconfigured"
        assert "configure failed: rig_file: /nonexistent/rig.yaml does not exist" in g.node.output()
        assert set_param(g, "rig_file", str(default_rig_path())).successful

        assert lc.transition("configure"), g.node.output()[-3000:]
        assert lc.transition("activate") and lc.state() == "active"
        got = g.send_until_grid(lambda s: g.pub.publish_frame(2, s), DISCOVERY_TIMEOUT)
        assert got is not None, g.node.output()[-3000:]
        assert list(got.msg.cameras) == ["CAM_FRONT", "CAM_BACK"]  # the changed parameter holds

        assert lc.transition("shutdown") and lc.state() == "finalized"
        assert g.spin_until(lambda: not g.con.publisher_matched(), DISCOVERY_TIMEOUT)
        assert g.node.alive()  # finalized, as rclcpp lifecycle nodes: the process waits for a stop
    finally:
        assert g.close() == 0


def test_autostart_is_active_at_once():
    g = RosGraph({})  # defaults: configures and activates itself (RosGraph waits for a grid)
    try:
        assert Lifecycle(g).state() == "active"
    finally:
        assert g.close() == 0
