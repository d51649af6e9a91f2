"""The /diagnostics level follows what the node recently achieved: ERROR while every set is lost
(naming the cause), WARN while anything is dropped, OK otherwise."""
from __future__ import annotations

import bevpool_msgs.msg  # noqa: E402,F401  (built by scripts/build_msgs.sh; missing = a real failure)
import pytest
from ros_harness import isolate_ros_env, spin_until  # noqa: E402

from bevpool_ros.node_health import FAILING_AFTER, RecentCounts, health  # noqa: E402


def test_a_backend_failing_every_set_is_an_error_with_its_reason():
    level, text = health({"dropped_internal_error": FAILING_AFTER},
                         {"internal_error": "CUDAError: illegal address"})
    assert level == "ERROR" and "internal_error" in text and "illegal address" in text


def test_drops_while_sets_are_published_warn_and_silence_is_ok():
    assert health({"published": 10, "dropped_internal_error": 5}, {})[0] == "WARN"
    assert health({"sync_incomplete_timeout": FAILING_AFTER - 1}, {})[0] == "WARN"  # a hiccup
    assert health({"dropped_bad_dtype": 50}, {})[0] == "WARN"  # bad messages alone lose no set
    assert health({"published": 10, "sync_accepted_messages": 120}, {}) == ("OK", "")
    assert health({}, {}) == ("OK", "")


def test_recent_counts_forget_what_is_older_than_the_window():
    r = RecentCounts(2.0, start=0.0)
    assert r.update(1.0, {"dropped_x": 3}) == {"dropped_x": 3}
    assert r.update(2.5, {"dropped_x": 3, "published": 4}) == {"dropped_x": 3, "published": 4}
    assert r.update(4.0, {"dropped_x": 3, "published": 9}) == {"published": 9}  # the drop was at 1.0
    assert r.update(7.0, {"dropped_x": 3, "published": 9}) == {}


@pytest.mark.ros
def test_diagnostics_go_to_error_while_the_backend_fails_and_recover(nuscenes_rig):
    """A live node (real DDS) whose backend raises on every set, then works again."""
    isolate_ros_env()
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from bevpool_ros.demo.consumer import BevConsumer
    from bevpool_ros.demo.synthetic_publisher import SyntheticRigPublisher
    from bevpool_ros.node.node import BevPoolNode

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = BevPoolNode(context=ctx, parameter_overrides=[
        Parameter("backend", value="cpu"), Parameter("diagnostics.period_s", value=0.1),
        Parameter("input.qos_reliability", value="reliable")])
    pub = SyntheticRigPublisher(nuscenes_rig, context=ctx)
    con = BevConsumer(context=ctx, subscribe_image=False)
    ex = SingleThreadedExecutor(context=ctx)
    for n in (node, pub, con):
        ex.add_node(n)
    working_pool = node.backend.pool_cameras  # what the pooling thread calls, on every backend

    def broken_pool(cameras, out=None, host_copy=True):
        raise RuntimeError("device lost")

    def level_after(stamps, predicate):
        for s in stamps:
            pub.publish_frame(0, s)
            spin_until(ex, lambda: False, 0.05)
        con.diagnostics.clear()
        found = {}

        def check():
            d = con.latest_diagnostics()
            if d is not None and predicate(d):
                found.update(d)
                return True
            return False
        spin_until(ex, check, 10)
        return found

    try:
        assert spin_until(ex, lambda: pub.subscribers_matched() and con.publisher_matched(), 20)
        node.backend.pool_cameras = broken_pool
        d = level_after([10**9 * k for k in range(1, 1 + 2 * FAILING_AFTER)], lambda d: d["level"] == 2)
        assert d, con.latest_diagnostics()
        assert "internal_error" in d["message"] and "device lost" in d["message"]
        node.backend.pool_cameras = working_pool
        d = level_after([10**9 * k for k in range(20, 40)], lambda d: d["level"] < 2)
        assert d and int(d["sets_published"]) > 0, con.latest_diagnostics()
    finally:
        ex.shutdown()
        for n in (con, pub, node):
            n.destroy_node()
        rclpy.try_shutdown(context=ctx)


def test_the_status_is_composed_from_each_components_own_status():
    """Report.snapshot reads no node attribute: each component's status() in order, then the
    report's own counters (a drop counter under its contract name)."""
    from types import SimpleNamespace

    from bevpool_ros.node.reporting import Report, backend_status

    node = SimpleNamespace(get_logger=lambda: SimpleNamespace(warning=lambda *a: None))
    report = Report(node)
    broken = SimpleNamespace(name="cuda", precision="fp16", describe=lambda: 1 / 0)
    report.compose(lambda: {"state": "active"}, lambda: backend_status(broken, "best"),
                   lambda: {"worker_queue": 3})
    report.count("worker_busy")
    report.count("calibration_changes")
    values = report.snapshot()
    assert list(values)[:3] == ["state", "backend", "backend_requested"]
    assert values["describe_error"].startswith("ZeroDivisionError") and values["worker_queue"] == 3
    assert values["dropped_worker_busy"] == 1 and values["calibration_changes"] == 1
