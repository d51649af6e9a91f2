"""Consumer side of the hand-off: open a BevHandoff message as a zero-copy device array.

    reader = HandoffReader()                 # once per process (device 0's primary context)
    view = reader.open(msg)                  # maps the ring on first use; waits for the grid
    grid = torch.from_dlpack(view)           # or cupy.from_dlpack(view): no copy
    ... use grid ...
    if not view.still_valid(): discard       # the producer reused the slot meanwhile

``open`` raises HandoffOverwritten when the slot already holds a later grid (the consumer is
more than ring_size - 1 grids behind) and HandoffError when the message cannot be honoured
(another GPU, another user's ring, sizes that do not fit).
"""
from __future__ import annotations

import math
import os

import numpy as np

from ..device import dlpack
from ..device.driver import Device, api, check
from ..device.tensors import DeviceTensor
from .fdpass import fetch
from .ring import RingError, SharedControlBlock, overwritten_text
from .vmm import IpcEvent, SharedDeviceMemory, device_uuid

# Tensor.DTYPE_* codes the hand-off publishes
# (grids: float16, float32; camera tensors from camera_producer.py also E4M3 codes as uint8)
DTYPES = {8: np.dtype("<f2"), 9: np.dtype("<f4"), 12: np.dtype(np.uint8)}


class HandoffError(RuntimeError):
    pass


class HandoffOverwritten(HandoffError):
    """The grid a message names was overwritten before (or while) it was read."""


class _MappedRing:
    def __init__(self, device, description: dict, fds: list[int]):
        self.ring_id = int(description["ring_id"])
        self.buffers: list[SharedDeviceMemory] = []
        self.control = None
        self.events: dict[bytes, IpcEvent] = {}
        pending = list(fds)  # descriptors not yet owned by a mapping; closed here on failure
        try:
            self.control = SharedControlBlock.attach(pending.pop(0))
            if self.control.block.ring_id != self.ring_id:
                raise RingError("control block belongs to another ring")
            sizes = [int(s) for s in description["sizes"]]
            if len(sizes) != len(pending) or len(sizes) != self.control.block.ring_size:
                raise RingError(f"{len(pending)} buffer descriptors and {len(sizes)} sizes for a ring of "
                                f"{self.control.block.ring_size}")
            for size in sizes:
                self.buffers.append(SharedDeviceMemory.import_fd(device, pending.pop(0), size))
            for h in description["events"]:
                self.events[bytes.fromhex(h)] = IpcEvent.open(bytes.fromhex(h))
        except Exception:
            for fd in pending:
                os.close(fd)
            self.close()
            raise

    @property
    def ring_size(self) -> int:
        return self.control.block.ring_size

    def close(self) -> None:
        for e in self.events.values():
            e.destroy()
        for b in self.buffers:
            b.free()
        if self.control is not None:
            self.control.close()
        self.events, self.buffers, self.control = {}, [], None


class HandoffView:
    """One grid in the producer's ring: ``__dlpack__`` / ``__cuda_array_interface__``, no copy."""

    def __init__(self, reader: "HandoffReader", ring: _MappedRing, msg, dtype: np.dtype):
        self._reader = reader
        self.mapped = ring  # its producer's ring (the core's launcher checks its control block)
        self.ring_id, self.slot, self.sequence = ring.ring_id, int(msg.slot), int(msg.sequence)
        self.shape = tuple(int(s) for s in msg.shape)
        self.dtype = dtype
        self.nbytes = int(msg.nbytes)
        self.scale = float(getattr(msg, "scale", 1.0))  # E4M3 camera tensors: value = code / scale
        self.ptr = ring.buffers[self.slot].ptr + int(msg.offset)
        self._event = ring.events.get(bytes(msg.event_handle))
        # what the array protocols say, read once: the node reads a dozen views per camera set
        self.device_tensor = DeviceTensor(self.ptr, dtype, self.shape, reader.device.ordinal)

    def wait(self, stream_handle=None) -> None:
        """Make ``stream_handle`` (or, with None, this host thread) wait until the grid is written."""
        if self._event is None:
            raise HandoffError("message names an event the producer's ring does not have")
        if stream_handle is None:
            self._event.synchronize()
        else:
            self._event.wait_on(stream_handle)

    def still_valid(self) -> bool:
        """True while the slot still holds this grid; call after reading (seqlock check)."""
        return self.mapped.control is not None and self.mapped.control.block.holds(self.slot, self.sequence)

    def copy_to_host(self) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        self._reader.device.make_current()
        check(api().cuMemcpyDtoH(out.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return out

    # zero-copy protocols (the view keeps the mapping alive while a consumer holds the array)
    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "version": 3, "strides": None, "stream": None}

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.KDL_CUDA, self._reader.device.ordinal

    def __dlpack__(self, stream=None, **_):
        # the grid is ready once wait() has run; a consumer stream needs no further sync
        return dlpack.to_capsule(self.ptr, self.shape, self.dtype, dlpack.KDL_CUDA, self._reader.device.ordinal,
                                 owner=self)


class HandoffReader:
    def __init__(self, device_ordinal: int = 0):
        self.device = Device(device_ordinal)
        self.uuid = device_uuid(self.device)
        self._rings: dict[str, _MappedRing] = {}  # socket path -> mapped ring
        self.overwritten = 0
        self.unmapping: list = []  # callables(ring) run before a mapped ring is closed (the core's watch)

    def _ring(self, msg) -> _MappedRing:
        ring = self._rings.get(msg.socket_path)
        if ring is not None and ring.ring_id == int(msg.ring_id):
            return ring
        if ring is not None:  # the producer re-created its ring (restart, new geometry)
            self._unmap(ring)
            del self._rings[msg.socket_path]
        if bytes(msg.device_uuid) != self.uuid:
            raise HandoffError("the grid lives on another GPU than this reader's; use the BevFeature topic")
        self.device.make_current()
        description, fds = fetch(msg.socket_path)
        if int(description["ring_id"]) != int(msg.ring_id):
            for fd in fds:
                os.close(fd)
            raise HandoffError("the producer's ring changed since this message was sent")
        ring = self._rings[msg.socket_path] = _MappedRing(self.device, description, fds)
        return ring

    def open(self, msg, wait: bool = True) -> HandoffView:
        dtype = DTYPES.get(int(msg.dtype))
        if dtype is None:
            raise HandoffError(f"hand-off dtype code {msg.dtype} is not float16, float32 or E4M3")
        count = math.prod(int(s) for s in msg.shape)  # per tensor: no numpy call on the path
        if int(msg.nbytes) != count * dtype.itemsize:
            raise HandoffError(f"nbytes {msg.nbytes} != shape {list(msg.shape)} x {dtype.itemsize}")
        ring = self._ring(msg)
        if not 0 <= int(msg.slot) < ring.ring_size:
            raise HandoffError(f"slot {msg.slot} outside a ring of {ring.ring_size}")
        if int(msg.offset) + int(msg.nbytes) > ring.buffers[int(msg.slot)].size:
            raise HandoffError("the grid does not fit its slot")
        if not ring.control.block.holds(int(msg.slot), int(msg.sequence)):
            self.overwritten += 1
            raise HandoffOverwritten(overwritten_text(msg.slot, msg.sequence))
        view = HandoffView(self, ring, msg, dtype)
        if wait:
            view.wait()
        return view

    def ring(self, socket_path: str) -> _MappedRing | None:
        """The ring mapped for ``socket_path``, if any."""
        return self._rings.get(socket_path)

    @property
    def socket_paths(self) -> list[str]:
        return list(self._rings)

    def _unmap(self, ring: _MappedRing) -> None:
        for hook in list(self.unmapping):
            hook(ring)
        ring.close()

    def forget(self, socket_path: str) -> None:
        """Unmap the ring served at ``socket_path`` (its producer went away); views of it must
        no longer be read."""
        ring = self._rings.pop(socket_path, None)
        if ring is not None:
            self._unmap(ring)

    def close(self) -> None:
        for ring in self._rings.values():
            self._unmap(ring)
        self._rings = {}
