"""Reader renewal (node/reader_renewal.py) with real rclpy subscriptions over real DDS: make before
break, the twin of a sample that both readers deliver recognised by its stamp, the old reader
deleted once the new one has matched the publishers that stay."""
from __future__ import annotations

import time

import pytest

from bevpool_ros.node import reader_renewal
from bevpool_ros.node.reader_renewal import RenewableReaders

pytestmark = pytest.mark.ros
TOPIC, KEY = "/cameras/CAM_FRONT/feat", ("CAM_FRONT", "feat")


@pytest.fixture
def ros():
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from bevpool_ros.demo.session import isolate

    isolate(None)
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("renewal_test", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    yield node, executor
    executor.shutdown()
    node.destroy_node()
    rclpy.shutdown(context=context)


def spin_until(executor, predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.02)
    return predicate()


def numbered_sender(executor, pub, received: list, step: float):
    """``send(n)``: publish builtin_interfaces/Time with sec 1, 2, ... until ``received`` holds ``n``
    (10 s at most), spinning ``step`` s between sends: one send is never trusted to arrive."""
    from builtin_interfaces.msg import Time

    sent = 0

    def send(n: int) -> None:
        nonlocal sent
        deadline = time.monotonic() + 10
        while len(received) < n and time.monotonic() < deadline:
            sent += 1
            pub.publish(Time(sec=sent))
            spin_until(executor, lambda: False, step)
    return send


def test_a_renewed_reader_loses_no_sample_and_its_twins_are_recognised(ros):
    from builtin_interfaces.msg import Time

    node, executor = ros
    readers = RenewableReaders(node)
    stamps: list[int] = []  # what passes the twin check, as the node's on_tensor does

    def on_message(msg):
        stamp = msg.sec
        if not readers.is_twin(KEY, stamp):
            stamps.append(stamp)

    readers.add(TOPIC, KEY, lambda: node.create_subscription(Time, TOPIC, on_message, 10))
    pub = node.create_publisher(Time, TOPIC, 10)
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    first = readers.subs[TOPIC]

    readers.publishers_left(TOPIC)
    assert readers.renewed == 1 and readers.subs[TOPIC] is not first
    assert spin_until(executor, lambda: pub.get_subscription_count() == 2, 10)  # both readers live

    send_until = numbered_sender(executor, pub, stamps, 0.05)
    send_until(5)
    assert stamps == sorted(set(stamps)) and len(stamps) >= 5, stamps  # each once, in order

    readers.retire_matched()  # the new reader matched the publisher: the old one goes
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    before = len(stamps)
    send_until(before + 5)
    assert stamps == sorted(set(stamps)) and len(stamps) >= before + 5, stamps
    readers.close()
    assert spin_until(executor, lambda: pub.get_subscription_count() == 0, 10)


def test_an_old_reader_whose_successor_never_matches_goes_at_its_deadline(ros, monkeypatch):
    from builtin_interfaces.msg import Time

    node, executor = ros
    readers = RenewableReaders(node)
    readers.add(TOPIC, KEY, lambda: node.create_subscription(Time, TOPIC, lambda m: None, 10))
    pub = node.create_publisher(Time, TOPIC, 10)
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    readers.publishers_left(TOPIC)
    readers.subs[TOPIC].get_publisher_count = lambda: 0  # as if discovery never came
    readers.retire_matched()
    assert len(readers._retiring) == 1  # kept while the new one has not matched
    monkeypatch.setattr(reader_renewal, "RETIRE_AFTER_S", 0.0)
    readers.publishers_left(TOPIC)     # again: the older reader goes at once, the newer waits...
    readers.subs[TOPIC].get_publisher_count = lambda: 0
    assert len(readers._retiring) == 1
    readers.retire_matched()           # ...until its deadline (now)
    assert readers._retiring == {} and readers.renewed == 2
    assert spin_until(executor, lambda: pub.get_subscription_count() == 1, 10)
    readers.close()
