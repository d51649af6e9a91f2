"""Same-host zero-copy hand-off of the BEV grid (``output.gpu_handoff``): a ring of device
buffers exported as POSIX file descriptors, announced by ``bevpool_msgs/BevHandoff``."""
from .ring import ControlBlock, RingCursor, RingError, SharedControlBlock, slot_of
from .vmm import HandoffUnsupported, unsupported_reason

__all__ = ["ControlBlock", "RingCursor", "RingError", "SharedControlBlock", "slot_of", "HandoffUnsupported",
           "unsupported_reason"]
