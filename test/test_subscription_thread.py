"""The thread that takes subscriptions beside the executor (ros/subscription_thread.py), with real
rclpy subscriptions over real DDS: every message of a burst, in that thread and never the
executor's; a reader renewed mid-stream (node/reader_renewal.py) picked up; stop and start; a
callback that raises is reported and the thread goes on."""
from __future__ import annotations

import threading

import pytest
from test_reader_renewal import numbered_sender, spin_until
from test_reader_renewal import ros as node_and_executor  # noqa: F401  (a fixture)

from bevpool_ros.node.reader_renewal import RenewableReaders
from bevpool_ros.ros.subscription_thread import SubscriptionThread

pytestmark = pytest.mark.ros
TOPIC, KEY = "/cameras/CAM_FRONT/feat", ("CAM_FRONT", "feat")


@pytest.fixture
def ros(node_and_executor):  # noqa: F811 - builds on the imported fixture
    """test_reader_renewal's node and executor, and a SubscriptionThread (errors: what it reported)."""
    node, executor = node_and_executor
    errors = []
    thread = SubscriptionThread(node.context, "test-input", lambda sub, e: errors.append((sub, e)))
    thread.start()
    yield node, executor, thread, errors
    thread.stop()


def reliable(depth: int):
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)


def test_every_message_of_a_burst_is_taken_by_the_thread_not_the_executor(ros):
    from builtin_interfaces.msg import Time

    node, executor, thread, errors = ros
    got, where = [], set()
    def on_message(msg):
        got.append(msg.sec)
        where.add(threading.current_thread().name)
    sub = node.create_subscription(Time, TOPIC, on_message, reliable(200), callback_group=thread.group)
    thread.follow([sub])
    assert not executor.can_execute(sub)  # left out of the executor's wait set
    pub = node.create_publisher(Time, TOPIC, reliable(200))
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    for i in range(1, 151):
        pub.publish(Time(sec=i))
    assert spin_until(executor, lambda: len(got) >= 150, 10), len(got)  # the executor spins meanwhile
    assert got == list(range(1, 151)) and where == {"test-input"} and not errors


def test_a_reader_renewed_mid_stream_is_picked_up(ros):
    from builtin_interfaces.msg import Time

    node, executor, thread, errors = ros
    readers = RenewableReaders(node, on_change=thread.follow)
    stamps, by_reader = [], []
    def make():
        reader = len(by_reader)
        by_reader.append(0)
        def on_message(msg):
            by_reader[reader] += 1
            if not readers.is_twin(KEY, msg.sec):
                stamps.append(msg.sec)
        return node.create_subscription(Time, TOPIC, on_message, reliable(50), callback_group=thread.group)
    readers.add(TOPIC, KEY, make)
    pub = node.create_publisher(Time, TOPIC, reliable(50))
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    send_until = numbered_sender(executor, pub, stamps, 0.02)
    send_until(5)
    readers.publishers_left(TOPIC)  # a new reader; the old one keeps delivering meanwhile
    assert spin_until(executor, lambda: pub.get_subscription_count() == 2, 10)
    send_until(len(stamps) + 5)
    readers.retire_matched()  # the old one goes: the thread lets go of it
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    after_retire = by_reader[1]
    send_until(len(stamps) + 5)
    assert stamps == list(range(1, len(stamps) + 1)), stamps  # none lost, none twice
    assert by_reader[1] >= after_retire + 5 and not errors  # the new reader, taken by the thread
    readers.close()


def test_a_stopped_thread_takes_nothing_and_a_new_one_takes_over(ros):
    from builtin_interfaces.msg import Time

    node, executor, thread, errors = ros
    got = []
    sub = node.create_subscription(Time, TOPIC, lambda m: got.append(m.sec), reliable(10),
                                   callback_group=thread.group)
    thread.follow([sub])
    pub = node.create_publisher(Time, TOPIC, reliable(10))
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    pub.publish(Time(sec=1))
    assert spin_until(executor, lambda: got == [1], 5)
    assert thread.stop() and not any(t.name == "test-input" for t in threading.enumerate())
    pub.publish(Time(sec=2))
    assert not spin_until(executor, lambda: len(got) > 1, 0.5)  # nobody takes it
    again = SubscriptionThread(node.context, "test-input-2", lambda sub, e: errors.append((sub, e)))
    again.start()
    again.follow([sub])
    try:
        assert spin_until(executor, lambda: got == [1, 2], 5), got  # the waiting message, taken now
    finally:
        assert again.stop()


def test_a_callback_that_raises_is_reported_and_the_thread_goes_on(ros):
    from builtin_interfaces.msg import Time

    node, executor, thread, errors = ros
    got = []
    def on_message(msg):
        if msg.sec == 2:
            raise ValueError("bad sample")
        got.append(msg.sec)
    sub = node.create_subscription(Time, TOPIC, on_message, reliable(10), callback_group=thread.group)
    thread.follow([sub])
    pub = node.create_publisher(Time, TOPIC, reliable(10))
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    for i in (1, 2, 3):
        pub.publish(Time(sec=i))
    assert spin_until(executor, lambda: got == [1, 3], 5), got
    assert len(errors) == 1 and errors[0][0] is sub and str(errors[0][1]) == "bad sample"
    assert thread.busy_since is None  # waiting again: nothing for the watchdog to judge
