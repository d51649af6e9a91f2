"""QoS for inputs (sensor-data profile) and outputs (reliable), overridable by parameters."""
from __future__ import annotations


def make_qos(reliability: str, depth: int):
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST, depth=int(depth),
        reliability=ReliabilityPolicy.BEST_EFFORT if reliability == "best_effort" else ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.VOLATILE)


def camera_info_qos():
    # CameraInfo is small and rare to change; reliable delivery of the last one matters more
    # than freshness, but a best-effort publisher must still match: keep it best-effort-compatible.
    from rclpy.qos import qos_profile_sensor_data

    return qos_profile_sensor_data


def quiet_events():
    """No QoS-event handlers (rclpy makes two per subscription by default, each one more entity
    the default executor visits on every wake-up): for CameraInfo, whose sensor-data QoS (best
    effort, volatile) no publisher can be incompatible with, and whose wrong-type publishers the
    graph watch finds."""
    try:
        from rclpy.event_handler import SubscriptionEventCallbacks
    except ImportError:
        return None
    return SubscriptionEventCallbacks(use_default_callbacks=False)
