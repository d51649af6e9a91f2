"""The executor that runs bevpool_node's callbacks (parameter ``executor``).

rclpy's SingleThreadedExecutor (the default, ``single_threaded``) waits on a wait set of the node's
entities: whatever arrives while it is busy waits in the DDS histories, which the QoS depths bound,
so a flood of input ends with nothing queued but those. It rebuilds that wait set in Python on every
wake-up (0.5 ms on the H200 host, 0.5-1.4 ms on a 2-core machine, ``bench/spin_cost.py``), so under
it the input tensor subscriptions (12 per DDS camera set) are not the executor's: a thread of their
own waits on just them, on a wait set it keeps (ros/subscription_thread.py), and takes them there;
the executor wakes for the rest (CameraInfo, timers, services).
rclpy's EventsExecutor (``events``; ``rclpy.experimental``, ROS 2 Kilted and later) registers each
entity's middleware callback once and dispatches from C++, so a message costs its take and its
callback only; but every arriving message posts one event into a queue of its own without bound:
under floods beyond what the node takes the queue fell behind flood after flood (docs/dds.md,
"Under floods"). Under it every subscription is the executor's. ``auto`` takes it where rclpy has
it and the SingleThreadedExecutor otherwise; ``events`` asked of an rclpy without it warns once.
Under it the hand-off announcements' content filters need a re-registration after each change
(handoff/announcements.py, _follow_new_reader; docs/dds.md, "The executor").
"""
from __future__ import annotations


def has_events_executor() -> bool:
    try:
        from rclpy.experimental import EventsExecutor  # noqa: F401
    except ImportError:
        return False
    return True


def executor_kind(choice: str) -> str:
    """The kind ``make_executor(choice)`` makes: ``events`` or ``single_threaded``."""
    return "events" if choice in ("auto", "events") and has_events_executor() else "single_threaded"


def make_executor(choice: str, logger=None, context=None):
    """(executor, the kind made): ``events`` or ``single_threaded``. ``auto``: events where this
    rclpy has it; ``events`` asked of an rclpy without it falls back with one warning."""
    if executor_kind(choice) == "events":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor(context=context), "events"
    if logger is not None and choice == "events":
        logger.warning("executor 'events': this rclpy has no EventsExecutor "
                       "(rclpy.experimental, ROS 2 Kilted and later); using "
                       "SingleThreadedExecutor")
    from rclpy.executors import SingleThreadedExecutor

    return SingleThreadedExecutor(context=context), "single_threaded"
