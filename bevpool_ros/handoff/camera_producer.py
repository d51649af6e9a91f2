"""Input side of the hand-off: the process that runs the depth/feature network hands its camera
tensors to the pooling process without their bytes leaving the GPU.

The same pieces as the output side (``HandoffRing``: exported VMM buffers, file descriptors
over a Unix socket, interprocess events, the seqlock control block): each ``publish`` copies one
tensor (a camera's depth or features, or a whole stacked set) into the next slot of the ring on
the producer's stream, records the slot's event after it and returns a ``TensorHandoff``: the
small description a per-camera message carries, and what ``HandoffReader.open`` takes. The
reader maps the ring once, waits on the event (on the host, or on a stream) and reads the slot in
place; a slot the producer reused before the reader was done is reported overwritten, never
read as the tensor it was announced to be.

Where the device cannot export memory this way (another host, no POSIX file-descriptor handles,
no interprocess events) the producer says so once (``available`` False, one warning) and the
caller publishes the tensors as CameraTensor messages instead.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..device import streams
from ..device.driver import Device, Event, bind
from ..device.tensors import device_tensor
from ..errors import InputError
from ..io.tensor_codec import DTYPE_CODES
from .producer import HandoffRing
from .vmm import HandoffUnsupported

log = logging.getLogger(__name__)

# what the pooling kernels read: float32, float16, E4M3 codes
DTYPE_NAMES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float16): "float16",
    np.dtype(np.uint8): "float8_e4m3",
}


@dataclass(frozen=True)
class TensorHandoff:
    """One tensor in a producer's ring; the field names are those HandoffReader.open reads."""

    socket_path: str
    ring_id: int
    ring_size: int
    slot: int
    sequence: int
    offset: int
    nbytes: int
    dtype: int  # Tensor.DTYPE_* code
    shape: tuple
    event_handle: bytes
    device_ordinal: int
    device_uuid: bytes
    scale: float = 1.0  # E4M3 codes: value = code / scale


class CameraTensorProducer:
    """``slot_bytes``: the largest tensor published; ``ring_size``: slots before one is reused
    (make it cover every tensor of the sets a consumer may still be reading: e.g. 2 tensors x
    N cameras x 3 sets). ``native``: the ring's per-tensor work in the hand-off core (True, False,
    or None: as BEVPOOL_NATIVE says; HandoffRing)."""

    def __init__(self, slot_bytes: int, ring_size: int, device: int = 0, native: bool | None = None):
        self.device = Device(int(device))
        self.ring = None
        self.fallback_reason = None
        self._producer_sync = Event()
        try:
            self.ring = HandoffRing(self.device, int(slot_bytes), int(ring_size), native=native)
        except HandoffUnsupported as e:
            self.fallback_reason = str(e)
            log.warning("input hand-off unavailable, publish CameraTensor messages instead: %s", e)

    @property
    def available(self) -> bool:
        return self.ring is not None

    def publish(self, tensor, *, stream=None, scale: float = 1.0) -> TensorHandoff:
        """Copy ``tensor`` (a C-contiguous device tensor: float32, float16 or E4M3 codes) into
        the next slot on ``stream`` (default: the tensor's framework's current stream, else the
        legacy default stream) and describe it. Returns before the copy ran."""
        t, handle = self.prepare(tensor, stream)
        return self.describe(t, self.ring.write(t.ptr, t.nbytes, handle), scale)

    def prepare(self, tensor, stream=None):
        """(device tensor, CUstream) of ``tensor`` about to be copied in: checked, and the copy's
        stream ordered after the stream that wrote it."""
        if self.ring is None:
            raise HandoffUnsupported(self.fallback_reason)
        bind(self.device.ctx)
        if stream is not None:
            handle = streams.stream_handle(stream)
        else:
            handle = streams.current_stream(tensor)
            handle = 0 if handle is None else handle
        t = device_tensor(tensor, "tensor", streams.exported(handle))
        if t.dtype not in DTYPE_NAMES:
            raise InputError(f"tensor: dtype {t.dtype.name} is not float32, float16 or E4M3 codes")
        if t.stream is not None and not streams.same_stream(t.stream, handle):
            self._producer_sync.record(t.stream)  # the copy waits for the stream that wrote it
            self._producer_sync.wait(handle)
        return t, handle

    def describe(self, t, written, scale: float = 1.0) -> TensorHandoff:
        """The TensorHandoff of device tensor ``t`` written into the ring (producer.Written)."""
        return TensorHandoff(
            self.ring.socket_path,
            self.ring.ring_id,
            self.ring.ring_size,
            written.slot,
            written.sequence,
            0,
            t.nbytes,
            DTYPE_CODES[DTYPE_NAMES[t.dtype]],
            tuple(t.shape),
            written.event_handle,
            self.device.ordinal,
            self.ring.uuid,
            float(scale),
        )

    def close(self) -> None:
        self._producer_sync.destroy()
        if self.ring is not None:
            self.ring.close()
            self.ring = None
