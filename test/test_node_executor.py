"""What each executor wake-up of bevpool_node has to visit (ros/executor.py, docs/dds.md "The
executor"): the executor choice, and QoS-event handlers only where an event can carry news."""
import pytest
from ros_harness import isolate_ros_env

pytestmark = pytest.mark.ros


def test_make_executor_gives_what_was_asked_or_says_why_not():
    import rclpy

    from bevpool_ros.ros.executor import make_executor

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        warnings = []

        class Log:
            def warning(self, text):
                warnings.append(text)
        ex, kind = make_executor("single_threaded", Log(), context=ctx)
        assert kind == "single_threaded" and type(ex).__name__ == "SingleThreadedExecutor"
        ex.shutdown()
        try:
            from rclpy.experimental import EventsExecutor  # noqa: F401
            have_events = True
        except ImportError:
            have_events = False
        ex, kind = make_executor("auto", Log(), context=ctx)  # the default: quiet either way
        assert kind == ("events" if have_events else "single_threaded") and not warnings
        assert type(ex).__name__ == ("EventsExecutor" if have_events else "SingleThreadedExecutor")
        ex.shutdown()
        ex, kind = make_executor("events", Log(), context=ctx)
        if have_events:
            assert kind == "events" and type(ex).__name__ == "EventsExecutor" and not warnings
        else:
            assert kind == "single_threaded" and "no EventsExecutor" in warnings[0]
        ex.shutdown()
    finally:
        rclpy.try_shutdown(context=ctx)


def test_the_node_makes_no_qos_event_handler_that_cannot_fire():
    """Under rmw_fastrtps no handler on any input subscription: taking an event there deadlocked
    the node under bursts (reporting.subscription_events; incompatible publishers are found in the
    graph), and each handler is one more entity the default executor visits on every wake-up.
    Under another middleware: message lost and incompatible type per input tensor topic; none for
    CameraInfo (sensor-data QoS: no publisher is incompatible)."""
    isolate_ros_env()
    import rclpy
    from rclpy.event_handler import QoSSubscriptionEventType
    from rclpy.parameter import Parameter

    from bevpool_ros.node.node import BevPoolNode
    from bevpool_ros.ros.dds_guard import uses_fast_dds

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = BevPoolNode(context=ctx, parameter_overrides=[Parameter("backend", value="cpu")])
        try:
            subs = list(node.subscriptions)
            info_topics = [s for s in subs if s.topic_name.endswith("/camera_info")]
            tensor_topics = [s for s in subs if s not in info_topics and s.topic_name != "/parameter_events"]
            assert len(info_topics) == len(node.cameras) and tensor_topics
            on_subscriptions = [w for w in node.waitables
                                if isinstance(getattr(w, "event_type", None), QoSSubscriptionEventType)]
            if uses_fast_dds():
                assert on_subscriptions == []
            else:
                assert len(on_subscriptions) == 2 * len(tensor_topics)
            # rclpy's defaults on the node's own publishers: at most two each
            publishers = len(list(node.publishers))
            assert len(list(node.waitables)) - len(on_subscriptions) <= 2 * publishers
        finally:
            node.destroy_node()
    finally:
        rclpy.try_shutdown(context=ctx)
