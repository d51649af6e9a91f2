"""The core's side of a producer's ring (ring.cpp): the claim, the device-to-device copy, the
slot's IPC event record and the publish of one tensor (``write``), or of a whole camera set with
its announcements patched from their templates and sent to the ring's linked consumers, in one call
(``publish_set``). The ring's memory, events and sockets stay owned by producer.HandoffRing."""
from __future__ import annotations

import ctypes
import struct

from ...device.driver import CudaError
from .core import BP_E_ARGUMENT, BP_OK, Item, error
from .templates import NativeTemplates

STAMP = struct.Struct("<iI")  # builtin_interfaces/Time: sec int32, nanosec uint32


class NativeRing:
    def __init__(self, lib, control_address: int, ring_size: int, slot_ptrs, slot_bytes: int, events,
                 event_handles, fanout=None):
        """``control_address``: the control block's int64 words (ring.ControlBlock), mapped for as long
        as this object lives; ``events``: CUevent addresses, ``event_handles`` their 64-byte IPC handles,
        one per slot; ``fanout``: native.fanout.NativeFanout of the ring's signal socket (or None)."""
        self.lib, self.ring_size, self.fanout = lib, int(ring_size), fanout
        self.templates = NativeTemplates(lib)
        slots = (ctypes.c_uint64 * ring_size)(*map(int, slot_ptrs))
        evs = (ctypes.c_uint64 * ring_size)(*map(int, events))
        self.event_handles = [bytes(h) for h in event_handles]
        handles = b"".join(self.event_handles)
        if len(handles) != 64 * ring_size:
            raise ValueError(f"{ring_size} slots need {ring_size} 64-byte event handles")
        self.handle = lib.bp_ring_new(ctypes.c_void_p(control_address), ring_size, slots, int(slot_bytes), evs,
                                      handles)

    def _check(self, rc: int, what: str) -> None:
        if rc == BP_E_ARGUMENT:
            raise ValueError(error(self.lib, what))
        if rc != BP_OK:
            raise CudaError(error(self.lib, what))

    def claim(self) -> tuple[int, int]:
        """(slot, sequence) of the next tensor, the slot claimed in the control block."""
        slot, seq = ctypes.c_uint32(), ctypes.c_uint64()
        self.lib.bp_ring_claim(self.handle, ctypes.byref(slot), ctypes.byref(seq))
        return slot.value, seq.value

    def finish(self, slot: int, sequence: int, stream: int) -> None:
        """After the caller enqueued the copy into ``slot``: its event recorded, ``sequence`` published."""
        self._check(self.lib.bp_ring_finish(self.handle, slot, sequence, int(stream)), "hand-off slot not finished")

    def write(self, src: int, nbytes: int, stream: int) -> tuple[int, int]:
        slot, seq = ctypes.c_uint32(), ctypes.c_uint64()
        self._check(self.lib.bp_ring_write(self.handle, int(src), int(nbytes), int(stream), ctypes.byref(slot),
                                           ctypes.byref(seq)), "hand-off copy not enqueued")
        return slot.value, seq.value

    def publish_set(self, items, stamp_ns: int) -> list[tuple[int, int, bytes | None]]:
        """``items``: [(src, nbytes, stream, template id or -1, scale)]. Every copy is enqueued, then
        each announcement written from its template and sent; (slot, sequence, its bytes) per item
        (None without a template: the caller serialises and sends that one)."""
        n = len(items)
        arr = (Item * n)()
        capacity = 0
        for it, (src, nbytes, stream, tid, scale) in zip(arr, items):
            it.src, it.nbytes, it.stream, it.template_id, it.scale = src, nbytes, stream, tid, scale
            capacity += self.templates.lengths.get(tid, 0)
        out = ctypes.create_string_buffer(max(capacity, 1))
        fan = self.fanout.handle if self.fanout is not None else None
        sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
        STAMP.pack(sec, nanosec)  # out of range: struct.error, as the Python twin's template raises
        self._check(self.lib.bp_ring_publish_set(self.handle, self.templates.handle, fan, sec, nanosec, arr, n, out,
                                                 capacity), "hand-off set not published")
        raw = out.raw
        return [(it.slot, it.sequence, raw[it.offset:it.offset + it.length] if it.length else None) for it in arr]

    def close(self) -> None:
        if self.handle:
            self.lib.bp_ring_free(self.handle)
            self.handle = None
        self.templates.close()
