"""Producer side of the hand-off: a ring of exported device buffers the node copies grids into."""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from ..device.driver import api, check
from .fdpass import FdServer
from .ring import RingCursor, SharedControlBlock
from .signal import SignalServer, signal_path
from .vmm import HandoffUnsupported, IpcEvent, SharedDeviceMemory, device_attributes, device_uuid, unsupported_reason


@dataclass(frozen=True)
class Written:
    slot: int
    sequence: int
    event_handle: bytes


class HandoffRing:
    """``ring_size`` device buffers of ``slot_bytes`` each, their events and the control block,
    handed to consumers through a Unix socket. ``write`` copies one grid in on the caller's stream;
    ``announce(data)`` sends its serialised announcement to the consumers connected to the signal
    socket. ``native``: claims, copies, event records and datagrams run in the hand-off core
    (``self.native``: native.ring.NativeRing; True, False, or None: as BEVPOOL_NATIVE says)."""

    def __init__(self, device, slot_bytes: int, ring_size: int = 4, native: bool | None = False):
        from .native.core import use_native

        lib = use_native(native)
        reason = unsupported_reason(device_attributes(device), device.name)
        if reason:
            raise HandoffUnsupported(reason)
        device.make_current()
        self.device, self.slot_bytes = device, int(slot_bytes)
        self.cursor = RingCursor(ring_size)  # checks ring_size before anything is allocated
        self.ring_id = secrets.randbits(62)
        self.uuid = device_uuid(device)
        self.buffers: list[SharedDeviceMemory] = []
        self.events: list[IpcEvent] = []
        self.control = None
        self.server = self.signal = self.native = None
        try:
            for _ in range(ring_size):
                self.buffers.append(SharedDeviceMemory.create(device, slot_bytes))
                self.events.append(IpcEvent.create())
            self.event_handles = [e.handle() for e in self.events]
            self.control = SharedControlBlock.create(self.ring_id, ring_size)
            self.server = FdServer(self._describe, name=f"ring-{os.getpid()}-{self.ring_id:x}")
            self.signal = SignalServer(signal_path(self.server.path), native=lib is not None)
            if lib is not None:
                from .native.ring import NativeRing

                self.native = NativeRing(lib, self.control.block.words.ctypes.data, ring_size,
                                         [b.ptr for b in self.buffers], self.slot_bytes,
                                         [int(e.event) for e in self.events], self.event_handles, self.signal.fanout)
        except Exception:
            self.close()
            raise

    @property
    def ring_size(self) -> int:
        return self.cursor.ring_size

    @property
    def socket_path(self) -> str:
        return self.server.path

    def _describe(self):
        return ({"ring_id": self.ring_id, "ring_size": self.ring_size, "slot_bytes": self.slot_bytes,
                 "sizes": [b.size for b in self.buffers], "uuid": self.uuid.hex(),
                 "events": [h.hex() for h in self.event_handles], "pid": os.getpid()},
                [self.control.fd] + [b.fd for b in self.buffers])

    def write(self, src_ptr: int, nbytes: int, stream_handle, copy=None) -> Written:
        """Enqueue the copy of ``nbytes`` at device address ``src_ptr`` into the next slot on
        ``stream_handle`` and record the slot's event after it. The slot is claimed first.
        ``copy(dst, src, nbytes, stream_handle)``: the copy as the caller enqueues it (the node: a
        kernel, so its set's work stays kernels only); default the driver's device-to-device copy."""
        if not 0 < nbytes <= self.slot_bytes:
            raise ValueError(f"{nbytes} bytes do not fit a {self.slot_bytes}-byte hand-off slot")
        if self.native is not None:
            if copy is None:
                slot, seq = self.native.write(src_ptr, nbytes, int(stream_handle))
            else:
                slot, seq = self.native.claim()
                copy(self.buffers[slot].ptr, int(src_ptr), int(nbytes), stream_handle)
                self.native.finish(slot, seq, int(stream_handle))
            return Written(slot, seq, self.event_handles[slot])
        slot, seq = self.cursor.next()
        self.control.block.claim(slot, seq)
        if copy is not None:
            copy(self.buffers[slot].ptr, int(src_ptr), int(nbytes), stream_handle)
        else:
            check(api().cuMemcpyDtoDAsync(self.buffers[slot].ptr, int(src_ptr), int(nbytes), stream_handle),
                  "cuMemcpyDtoDAsync(hand-off)")
        self.events[slot].record(stream_handle)
        self.control.block.publish(seq)
        return Written(slot, seq, self.event_handles[slot])

    def announce(self, data: bytes) -> None:
        """Send a serialised announcement to the same-host consumers linked to this ring, before
        it is published: they are woken without a DDS hop (signal.py). Publish the same bytes
        (``Publisher.publish`` takes them as they are): one serialisation for both."""
        if self.signal is not None and self.signal.consumers:
            self.signal.send(data)

    def close(self) -> None:
        if self.native is not None:  # before the memory and the fan-out it points at
            self.native.close()
            self.native = None
        if self.signal is not None:  # its socket lives in the server's folder
            self.signal.close()
            self.signal = None
        if self.server is not None:
            self.server.close()
            self.server = None
        for e in self.events:
            e.destroy()
        for b in self.buffers:
            b.free()
        self.events, self.buffers = [], []
        if self.control is not None:
            self.control.close()
            self.control = None
