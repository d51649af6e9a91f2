"""The grid ``BevPooler.pool`` returns for device inputs: device memory ordered on a stream.

``DeviceGrid`` speaks DLPack (``torch.from_dlpack(grid)``, ``cupy.from_dlpack(grid)``) and
``__cuda_array_interface__`` without a copy. It becomes valid when the work enqueued on
``grid.stream`` by the pool call has run; a consumer on that stream needs nothing more, a
consumer on another stream is made to wait for it (``__dlpack__(stream=...)`` does this, as the
protocol asks; or ``grid.wait(stream)``). Nothing here waits on the host unless asked:
``check()`` waits for the grid and raises what the device's value checks found.

Per call the pooler lends a ``CallSlot``: the event recorded after the grid and a pinned word
the flag word is copied into; the grid gives it back when it is dropped, and its memory when it
is the pooler's (grid_memory.py).
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..backends.gpu.frame import FLAG_INPUT, FLAG_OUTPUT
from ..device import dlpack
from ..device.driver import Event, PinnedBuffer, api, bind, check
from ..device.streams import LEGACY, exported, same_stream
from ..errors import NonFiniteInput, NonFiniteOutput

SLOTS_PER_CHUNK = 64


class CallSlot:
    """One call's event and pinned flag word (``host_ptr``); the same pair every time it is lent,
    so a graph that copies and records into it stays valid for the pooler's life."""

    def __init__(self, event: Event, words: np.ndarray, index: int, device_base: int = 0):
        self.event, self._words, self.index = event, words, index
        self.host_ptr = int(words.ctypes.data) + 4 * index
        # the word's device mapping: the frame writes its flags there by a kernel (kernel_copies.py)
        self.device_ptr = device_base + 4 * index if device_base else 0

    @property
    def flags(self) -> int:
        return int(self._words[self.index])


class CallSlots:
    """Events and pinned flag words, lent per call and given back by the grid (grown in chunks).
    After ``close`` the memory goes when the last lent slot comes back: a grid may outlive its
    pooler."""

    def __init__(self, ctx=None):
        self._ctx = ctx  # the pooler's device: slots are made lazily, in any thread
        self._free: list[CallSlot] = []
        self._chunks: list[PinnedBuffer] = []
        self._lent = 0
        self._closed = False
        # re-entrant: a grid dropped by the garbage collector inside take() gives its slot back
        self._lock = threading.RLock()

    def take(self) -> CallSlot:
        with self._lock:
            if self._closed:
                raise RuntimeError("the pooler was closed")
            if not self._free:
                chunk = PinnedBuffer((SLOTS_PER_CHUNK,), np.uint32, mapped=True, ctx=self._ctx)
                self._chunks.append(chunk)
                self._free = [
                    CallSlot(Event(self._ctx), chunk.array, i, chunk.device_ptr) for i in range(SLOTS_PER_CHUNK)
                ]
            self._lent += 1
            return self._free.pop()

    def give_back(self, slot: CallSlot) -> None:
        with self._lock:
            self._lent -= 1
            self._free.append(slot)
            if self._closed and not self._lent:
                self._release()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if not self._lent:
                self._release()

    def _release(self) -> None:
        for slot in self._free:
            slot.event.destroy()
        self._free = []
        for chunk in self._chunks:
            chunk.free()
        self._chunks = []


class DeviceGrid:
    """One pooled grid ``[Z, Y, X, C]`` on the device. ``ptr``, ``shape``, ``dtype``, ``nbytes``,
    ``stream`` (the CUstream it is ordered on), ``device`` (ordinal); ``out``: the caller's
    tensor when the grid was written into one (None: the grid's memory is the pooler's,
    ``owner``, a grid_memory.GridBuffer). ``keep``: the object that owns ``stream`` (a CuPy
    stream is destroyed with it), held while the grid lives."""

    def __init__(
        self,
        ptr: int,
        shape: tuple,
        dtype: np.dtype,
        stream: int,
        device: int,
        slot: CallSlot,
        slots: CallSlots,
        owner=None,
        out=None,
        keep=None,
    ):
        self.ptr, self.shape, self.dtype = ptr, shape, dtype  # the pooler's own: no conversion
        self.nbytes = math.prod(shape) * dtype.itemsize
        self.stream, self.device = stream, device
        self.out = out
        self._slot, self._slots, self._owner, self._keep = slot, slots, owner, keep
        self._flags: int | None = None

    # --- ordering -----------------------------------------------------------------------------
    @property
    def event(self) -> Event:
        """Recorded on ``stream`` right after the grid (and its flag word) were written."""
        if self._slot is None:
            raise RuntimeError("this grid was released")
        return self._slot.event

    def ready(self) -> bool:
        """Has the device finished the grid? (A query: never waits.)"""
        return self._flags is not None or self.event.done()

    def wait(self, stream) -> None:
        """Make work enqueued on ``stream`` (a CUstream address) from now on run after the grid."""
        if not same_stream(int(stream), self.stream):
            self.event.wait(int(stream))

    def synchronize(self) -> "DeviceGrid":
        """Block this thread until the grid is written."""
        if self._flags is None:
            self.event.synchronize()
            self._flags = self._slot.flags
        return self

    @property
    def flags(self) -> int:
        """The device's value-check bits for this grid (waits for it)."""
        return self.synchronize()._flags

    def check(self) -> "DeviceGrid":
        """Wait for the grid; raise NonFiniteInput (inputs held NaN/Inf, or values beyond FP16 at
        FP16) or NonFiniteOutput (the grid overflowed its dtype) as the node's drops do."""
        flags = self.flags
        if flags & FLAG_INPUT:
            raise NonFiniteInput("inputs hold NaN/Inf (or values beyond FP16's range)")
        if flags & FLAG_OUTPUT:
            raise NonFiniteOutput("the grid holds NaN/Inf (overflow of the grid dtype?)")
        return self

    def numpy(self) -> np.ndarray:
        """A host copy (waits for the grid)."""
        self.synchronize()
        host = np.empty(self.shape, self.dtype)
        bind()
        check(api().cuMemcpyDtoH(host.ctypes.data, self.ptr, self.nbytes), "cuMemcpyDtoH")
        return host

    # --- zero-copy protocols -------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": exported(self.stream),
        }

    def __dlpack_device__(self) -> tuple[int, int]:
        return dlpack.KDL_CUDA, self.device

    def __dlpack__(self, stream=None, **_):
        """A capsule over the grid; the consumer's ``stream`` (None: the legacy default stream,
        -1: none) is made to wait for the grid first. The capsule keeps this grid alive."""
        if stream != -1:
            self.wait(LEGACY if stream is None else int(stream))
        return dlpack.to_capsule(
            self.ptr, self.shape, self.dtype, dlpack.KDL_CUDA, self.device, owner=self
        )

    # --- lifetime ---------------------------------------------------------------------------------
    def release(self) -> None:
        """Give the call's slot back and the grid's own memory (reused or freed in the order of
        ``stream``). Dropping the last reference does the same."""
        slot, self._slot = self._slot, None
        if slot is not None:
            self._slots.give_back(slot)
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.give_back(self.stream)
        self._keep = None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (
            f"DeviceGrid(shape={self.shape}, dtype={self.dtype.name}, device={self.device}, "
            f"stream={self.stream:#x}, {'caller buffer' if self.out is not None else 'own buffer'})"
        )
