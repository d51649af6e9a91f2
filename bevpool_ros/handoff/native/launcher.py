"""A camera set's device work and its grid's hand-off in one call to the core (launcher.cpp): the
producers' events waited for on the device, the set's CUDA graph launched, the grid copied into
the output ring and the host wait, the flag word and the seqlock's second look, the BevHandoff
patched from its template and sent to the ring's linked consumers.

The graphs are the backend's (backends/gpu/device_frame.py captures one per binding it meets
twice): ``remember`` hands one over with the rings' slots its gather reads, ``forget`` takes it
back before the backend destroys it. Python's own pooling of a set on the same backend runs
inside ``held()``: one set at a time on its buffers."""
from __future__ import annotations

import ctypes
import struct
from contextlib import contextmanager

from ...device.driver import CudaError
from .core import BP_E_ARGUMENT, BP_OK, Launch, Member, error

STAMP = struct.Struct("<iI")  # builtin_interfaces/Time
DONE, MISS = 0, 1  # bp_launch_result; the others are drops, named as the node counts them:
DROPS = {2: "non_finite", 3: "non_finite_output", 4: "handoff_overwritten"}


def key_words(key) -> tuple:
    """``key``: (ring id, slot) per member, in the members' order, as the core's array."""
    flat = [int(v) for pair in key for v in pair]
    return (ctypes.c_uint64 * max(len(flat), 1))(*flat), len(flat)


class NativeLauncher:
    def __init__(self, lib, *, context: int, stream: int, flags_ptr: int, grid_ptr: int, grid_bytes: int,
                 output, template_id: int):
        """``context``, ``stream``: the backend's CUcontext and CUstream; ``flags_ptr``: the
        page-locked word its graphs copy the flag word to; ``grid_ptr``/``grid_bytes``: the grid
        they write; ``output``: the output ring's native.ring.NativeRing (its templates hold
        ``template_id``, the grid's BevHandoff; its fan-out, the linked consumers)."""
        self.lib, self.output = lib, output
        handles = b"".join(bytes(h) for h in output.event_handles)
        fan = output.fanout.handle if output.fanout is not None else None
        self.handle = lib.bp_launcher_new(int(context), int(stream), int(flags_ptr), int(grid_ptr), int(grid_bytes),
                                          output.handle, output.templates.handle, int(template_id), handles,
                                          output.ring_size, fan)
        self._capacity = max(output.templates.lengths.get(int(template_id), 0), 1)
        self._out = ctypes.create_string_buffer(self._capacity)
        self._result = Launch()

    def ring(self, ring_id: int, control_address: int, ring_size: int, events: dict) -> None:
        """A producer's mapped ring: its control block's int64 words, ``events`` {64-byte IPC
        handle: CUevent address} (both kept until ``unring``)."""
        handles = b"".join(events)
        addresses = (ctypes.c_uint64 * max(len(events), 1))(*map(int, events.values()))
        self.lib.bp_launcher_ring(self.handle, int(ring_id), ctypes.cast(control_address, ctypes.POINTER(
            ctypes.c_int64)), int(ring_size), len(events), handles, addresses)

    def unring(self, ring_id: int) -> None:
        """Returns once no launch reads the ring: it may be unmapped then."""
        self.lib.bp_launcher_unring(self.handle, int(ring_id))

    def ros_copy(self, copy) -> None:
        """The grid's announcement also published to ROS by the launcher through ``copy``
        (native.ros_copy.NativeRosCopy, kept until ``ros_copy(None)``; None: the caller publishes)."""
        self.lib.bp_launcher_ros_copy(self.handle, copy.handle if copy is not None else None)

    def remember(self, key, graph_exec: int) -> None:
        words, n = key_words(key)
        self.lib.bp_launcher_remember(self.handle, words, n, int(graph_exec))

    def forget(self, key) -> None:
        """Returns once no launch uses that graph: it may be destroyed then."""
        words, n = key_words(key)
        self.lib.bp_launcher_forget(self.handle, words, n)

    def forget_all(self) -> None:
        self.lib.bp_launcher_forget_all(self.handle)

    def launch(self, members, stamp_ns: int) -> tuple[Launch, bytes]:
        """``members``: core.Member each (ring id, slot, sequence, event handle), in the order their
        graph's key names them; the set's ``stamp_ns`` goes into the announcement. (what happened,
        the announcement's bytes: empty unless DONE)."""
        arr = (Member * len(members))(*members)
        sec, nanosec = divmod(int(stamp_ns), 1_000_000_000)
        STAMP.pack(sec, nanosec)  # out of range: struct.error, as a template write raises
        rc = self.lib.bp_launcher_launch(self.handle, arr, len(members), sec, nanosec, ctypes.byref(self._result),
                                         self._out, self._capacity)
        if rc == BP_E_ARGUMENT:
            raise ValueError(error(self.lib, "set not launched"))
        if rc != BP_OK:
            raise CudaError(error(self.lib, "set not launched"))
        result = Launch.from_buffer_copy(self._result)
        return result, self._out.raw[:result.length]

    @contextmanager
    def held(self):
        """Python pools a set on the backend meanwhile: no launch runs."""
        self.lib.bp_launcher_hold(self.handle)
        try:
            yield
        finally:
            self.lib.bp_launcher_release(self.handle)

    def close(self) -> None:
        if self.handle:
            self.lib.bp_launcher_free(self.handle)
            self.handle = None
