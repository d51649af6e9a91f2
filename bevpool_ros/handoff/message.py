"""bevpool_msgs/BevHandoff for one grid written into the ring."""
from __future__ import annotations

import numpy as np

from ..io.bev_message import set_grid_geometry
from ..io.tensor_codec import DTYPE_CODES


def handoff_msg(header, rig, ring, written, shape, dtype, backend: str, precision: str):
    """The announcement of ``written`` (producer.Written) in ``ring`` (producer.HandoffRing)."""
    from bevpool_msgs.msg import BevHandoff

    dtype = np.dtype(dtype)
    m = BevHandoff()
    m.header = header
    set_grid_geometry(m, rig)
    m.socket_path = ring.socket_path
    m.ring_id, m.ring_size = ring.ring_id, ring.ring_size
    m.slot, m.sequence = written.slot, written.sequence
    m.offset = 0
    m.nbytes = int(np.prod(shape)) * dtype.itemsize
    m.dtype = DTYPE_CODES[dtype.name]
    m.shape = [int(s) for s in shape]
    m.event_handle = np.frombuffer(written.event_handle, np.uint8)
    m.device_ordinal = ring.device.ordinal
    m.device_uuid = np.frombuffer(ring.uuid, np.uint8)
    m.backend, m.precision = backend, precision
    return m
