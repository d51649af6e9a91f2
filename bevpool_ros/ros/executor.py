"""The executor that runs bevpool_node's callbacks (parameter ``executor``).

rclpy's SingleThreadedExecutor rebuilds its wait set in Python on every wake-up: with the
node's 30 subscriptions, 12 services and 92 QoS-event handlers a wake-up cost 0.5 ms on the
H200 host and 0.7-1.4 ms on a 2-core machine (``bench/spin_cost.py``; 56 handlers since, 0.53 ms
there), and a DDS camera set wakes it once per input message
(12 tensors + 6 CameraInfo). rclpy's EventsExecutor (``rclpy.experimental``, ROS 2 Kilted and
later) registers each entity's middleware callback once and dispatches from C++, so a message
costs its take and its callback only. ``auto`` (the default) takes it where rclpy has it and the
SingleThreadedExecutor otherwise (Humble, Jazzy), without a warning; ``events`` asked of an rclpy
without it warns once. Under it the hand-off announcements' content filters need a re-registration
after each change (handoff/announcements.py, _follow_new_reader; docs/dds.md, "The executor").
"""
from __future__ import annotations


def make_executor(choice: str, logger=None, context=None):
    """(executor, the kind made): ``events`` or ``single_threaded``. ``auto``: events where this
    rclpy has it; ``events`` asked of an rclpy without it falls back with one warning."""
    if choice in ("auto", "events"):
        try:
            from rclpy.experimental import EventsExecutor
        except ImportError:
            if logger is not None and choice == "events":
                logger.warning("executor 'events': this rclpy has no EventsExecutor "
                               "(rclpy.experimental, ROS 2 Kilted and later); using "
                               "SingleThreadedExecutor")
        else:
            return EventsExecutor(context=context), "events"
    from rclpy.executors import SingleThreadedExecutor

    return SingleThreadedExecutor(context=context), "single_threaded"
