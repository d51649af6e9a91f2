"""``output.gpu_handoff``: each pooled grid also goes, without leaving the GPU, into the hand-off
ring, announced as bevpool_msgs/BevHandoff (same host and GPU only; BevFeature stays for the rest)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..handoff.message import handoff_msg
from ..handoff.producer import HandoffRing
from ..handoff.vmm import HandoffUnsupported


@dataclass(frozen=True)
class DeviceOutput:
    ptr: int            # device address of the last pooled grid
    dtype: np.dtype
    stream: object      # the backend's stream handle: the copy is ordered after the kernel
    device: object      # backends.cuda.driver.Device


def device_output(backend) -> DeviceOutput:
    """Where the backend's last grid lives on the GPU (``backend.device_output()`` when the
    backend offers it, else the cuda backend's output buffer and stream)."""
    api = getattr(backend, "device_output", None)
    if api is not None:
        return api()
    io, rt, plan = getattr(backend, "io", None), getattr(backend, "rt", None), getattr(backend, "plan", None)
    if not io or "out" not in io or rt is None or plan is None:
        raise HandoffUnsupported(f"the {backend.name} backend keeps no grid on a GPU")
    return DeviceOutput(io["out"].ptr, np.dtype(plan.out_dtype), rt.stream.handle, rt.device)


class HandoffOutput:
    def __init__(self, node, backend, rig, topic: str, ring_size: int, qos):
        from bevpool_msgs.msg import BevHandoff

        out = device_output(backend)
        self.shape = (*rig.grid_shape, rig.channels)
        slot_bytes = int(np.prod(self.shape)) * out.dtype.itemsize
        self.ring = HandoffRing(out.device, slot_bytes, ring_size)
        self.pub = node.create_publisher(BevHandoff, topic, qos)

    def publish(self, header, rig, backend) -> None:
        """Runs in the pooling thread right after pool(): the backend's output still holds this grid."""
        out = device_output(backend)
        out.device.make_current()
        written = self.ring.write(out.ptr, int(np.prod(self.shape)) * out.dtype.itemsize, out.stream)
        self.pub.publish(handoff_msg(header, rig, self.ring, written, self.shape, out.dtype,
                                     backend.name, backend.precision))

    def close(self) -> None:
        self.ring.close()
