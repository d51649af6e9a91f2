"""What each executor wake-up of bevpool_node has to visit (ros/executor.py, docs/dds.md "The
executor"): the executor choice, QoS-event handlers only where an event can carry news, and the
input tensors taken by a thread of their own under the SingleThreadedExecutor."""
import threading
import time

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


@pytest.mark.parametrize("executor", ["single_threaded", "events"])
def test_the_tensor_readers_have_a_thread_of_their_own_under_the_single_threaded_executor(executor):
    """ros/executor.py: under rclpy's SingleThreadedExecutor the input tensors are taken by the
    node's input thread (never spun here: the thread alone counts the sample), which stops on
    deactivate and comes back on activate; under the EventsExecutor they stay the executor's."""
    isolate_ros_env()
    import rclpy
    from bevpool_msgs.msg import CameraTensor
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.lifecycle import TransitionCallbackReturn
    from rclpy.parameter import Parameter
    from rclpy.qos import qos_profile_sensor_data

    from bevpool_ros.node.configure import tensor_topics
    from bevpool_ros.node.node import BevPoolNode
    from bevpool_ros.ros.executor import executor_kind

    def input_threads():
        return [t for t in threading.enumerate() if t.name == "bevpool-input"]

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        node = BevPoolNode(context=ctx, parameter_overrides=[Parameter("backend", value="cpu"),
                                                            Parameter("executor", value=executor)])
        producer = rclpy.create_node("producer", context=ctx)
        try:
            topic = tensor_topics(node.cfg, node.cameras)[(node.cameras[0], "depth")]
            pub = producer.create_publisher(CameraTensor, topic, qos_profile_sensor_data)
            tensor_subs = [s for s in node.subscriptions if s.topic_name.endswith(("/depth", "/feat"))]
            looks = SingleThreadedExecutor(context=ctx)
            if executor_kind(executor) == "events":
                assert node.input_thread is None and not input_threads()
                assert all(looks.can_execute(s) for s in tensor_subs)
                return
            assert len(input_threads()) == 1 and node.input_thread is not None
            assert tensor_subs and not any(looks.can_execute(s) for s in tensor_subs)
            assert all(looks.can_execute(s) for s in node.subscriptions if s.topic_name.endswith("/camera_info"))

            def counted(n: int, timeout: float = 10.0) -> bool:
                deadline = time.monotonic() + timeout
                while node.counts["stamp_zero"] < n and time.monotonic() < deadline:
                    pub.publish(CameraTensor())  # stamp 0: dropped, counted by whoever takes it
                    time.sleep(0.05)
                return node.counts["stamp_zero"] >= n

            assert counted(1)
            assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
            assert not input_threads() and node.input_thread.busy_since is None
            assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
            assert len(input_threads()) == 1
            assert counted(node.counts["stamp_zero"] + 1)
        finally:
            producer.destroy_node()
            node.destroy_node()
        assert not input_threads()
    finally:
        rclpy.try_shutdown(context=ctx)
