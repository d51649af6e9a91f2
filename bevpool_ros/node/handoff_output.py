"""``output.gpu_handoff``: each pooled grid also goes, without leaving the GPU, into the hand-off
ring, announced as bevpool_msgs/BevHandoff (same host and GPU only; BevFeature stays for the rest).
Consumers linked to the ring's signal socket (handoff.BevHandoffSubscriber) get each announcement
over it first."""
from __future__ import annotations

import numpy as np

from ..handoff.cdr_template import TemplateWriter
from ..handoff.message import handoff_msg
from ..handoff.producer import HandoffRing
from ..handoff.vmm import HandoffUnsupported


def device_output(backend):
    """The backend's ``device_output()`` (backends.gpu.frame.DeviceOutput: where the last grid,
    in the published dtype, lives on the GPU); a backend without one cannot hand off."""
    api = getattr(backend, "device_output", None)
    if api is None:
        raise HandoffUnsupported(f"the {backend.name} backend keeps no grid on a GPU")
    return api()


def grid_geometry(rig) -> tuple:
    """What a BevHandoff says of the grid (io.bev_message.set_grid_geometry)."""
    return (tuple(rig.grid_shape), rig.channels,
            *((float(a.lower), float(a.step)) for a in (rig.x, rig.y, rig.z)))


def grid_bytes(out) -> int:
    return int(np.prod(out.shape)) * np.dtype(out.dtype).itemsize


class HandoffOutput:
    def __init__(self, node, backend, topic: str, ring_size: int, qos):
        from bevpool_msgs.msg import BevHandoff

        out = device_output(backend)  # after prepare: sized for the widest published dtype (float32)
        self.ring = HandoffRing(out.device, grid_bytes(out), ring_size, native=None)  # BEVPOOL_NATIVE
        self.pub = node.create_publisher(BevHandoff, topic, qos)
        self.backend = backend
        self._written = None  # (producer.Written, DeviceOutput) of the frame being published
        self._announcements = TemplateWriter(BevHandoff, defer=node.after_set)
        self._geometry = (None, None)  # (rig, grid_geometry(rig)): computed once per calibration
        self._hooked = hasattr(backend, "add_frame_hook")
        if self._hooked:
            backend.add_frame_hook(self._on_frame)

    def _on_frame(self, out) -> None:
        """Inside pool, before the host waits: the copy joins the frame's own stream work.
        A failure here must not cost the frame its BevFeature: it is kept and raised by publish."""
        try:
            copy = getattr(self.backend, "device_copy", None)  # the backend's device work, its own
            self._written = (self.ring.write(out.ptr, grid_bytes(out), out.stream, copy), out)
        except Exception as e:
            self._written = e

    def publish(self, header, rig) -> None:
        """Runs in the pooling thread right after the pool that produced this grid."""
        pending, self._written = self._written, None
        if isinstance(pending, Exception):
            raise pending
        if pending is None:  # a backend without frame hooks: copy now, from its last output
            out = device_output(self.backend)
            out.device.make_current()
            pending = (self.ring.write(out.ptr, grid_bytes(out), out.stream), out)
        written, out = pending
        # the announcement's bytes from a template of this grid geometry: only the stamp, slot,
        # sequence and event handle are written per grid (cdr_template.py: a BevHandoff built and
        # serialised field by field is a few hundred microseconds of cold Python per set)
        if self._geometry[0] is not rig:
            self._geometry = (rig, grid_geometry(rig))
        shape, dtype = tuple(out.shape), np.dtype(out.dtype)
        backend = self.backend
        key = (header.frame_id, self._geometry[1], shape, dtype.str, backend.name, backend.precision)
        data = self._announcements.serialize(
            key,
            lambda: handoff_msg(header, rig, self.ring, written, shape, dtype, backend.name,
                                backend.precision),
            (header.stamp.sec, header.stamp.nanosec, written.slot, written.sequence,
             written.event_handle))
        # linked consumers (BevHandoffSubscriber) are woken without a DDS hop; the ROS copy is
        # the same bytes
        self.ring.announce(data)
        self.pub.publish(data)

    def close(self) -> None:
        if self._hooked:
            self.backend.remove_frame_hook(self._on_frame)
        self.ring.close()
