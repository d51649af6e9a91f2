"""Same-host zero-copy GPU hand-off: a ring of device buffers exported as POSIX file descriptors.
Output: the BEV grid (``output.gpu_handoff``, announced by ``bevpool_msgs/BevHandoff``). Input:
camera tensors from the network's process (``CameraHandoffPublisher``, announced by
``bevpool_msgs/TensorHandoff``, read in place by bevpool_node with ``input.handoff``). A consumer
of the grids takes them with ``BevHandoffSubscriber``."""
from .ring import ControlBlock, RingCursor, RingError, SharedControlBlock, slot_of
from .vmm import HandoffUnsupported, unsupported_reason

__all__ = ["ControlBlock", "RingCursor", "RingError", "SharedControlBlock", "slot_of", "HandoffUnsupported",
           "unsupported_reason", "CameraHandoffPublisher", "BevHandoffSubscriber"]


def __getattr__(name):  # the ROS helper imports rclpy-side code: only when asked for
    if name == "CameraHandoffPublisher":
        from .camera_publisher import CameraHandoffPublisher

        return CameraHandoffPublisher
    if name == "BevHandoffSubscriber":
        from .bev_subscriber import BevHandoffSubscriber

        return BevHandoffSubscriber
    raise AttributeError(name)
