"""The memory of grids the pooler allocates itself, recycled so a steady call allocates nothing.

A grid's buffer is used on the grid's stream: the pool call writes it there and the consumer
reads it there (or synchronises first), as for any stream-ordered memory. When the grid is
released (dropped), every use of it has been enqueued, so an event recorded on its stream then
covers them all. The buffer goes back to a short free list with that event:

    a call on the same stream           takes it as it is (stream order covers the consumer)
    a call on another stream            waits for the event on the device, then takes it
    more free than ``KEPT``             the released buffer is freed in its stream's order
    close                               the free ones are freed on the pooler's own stream after
                                        their events: no caller's stream is named once its
                                        grids are gone (it may be destroyed by then)
    released after close                freed in its stream's order

New buffers are allocated in stream order (cuMemAllocAsync) where the device has memory pools,
else with cuMemAlloc (freed with cuMemFree, which waits for the device).
"""

from __future__ import annotations

import threading

from ..device.driver import Event, api, bind, check
from ..device.streams import same_stream

KEPT = 4  # free buffers kept: a consumer holding a few grids at a time never allocates


class StreamOrderedBuffer:
    """Device memory allocated on ``stream``'s order; ``free(stream)`` on the order of a stream
    that runs after every use of it."""

    def __init__(self, nbytes: int, stream: int, ctx, pools: bool):
        bind(ctx)
        cu = api()
        self._ctx, self.pools, self.nbytes = ctx, pools, int(nbytes)
        self.ptr = int(
            check(cu.cuMemAllocAsync(self.nbytes, cu.CUstream(stream)), "cuMemAllocAsync")
            if pools
            else check(cu.cuMemAlloc(self.nbytes), "cuMemAlloc")
        )

    def free(self, stream: int | None) -> None:
        """In ``stream``'s order (None: cuMemFree, which waits for the device first)."""
        if not self.ptr:
            return
        bind(self._ctx)
        cu = api()
        freed = False
        if self.pools and stream is not None:
            err = cu.cuMemFreeAsync(self.ptr, cu.CUstream(stream))[0]
            freed = err == cu.CUresult.CUDA_SUCCESS
        if not freed:
            cu.cuMemFree(self.ptr)
        self.ptr = 0

    def __del__(self):  # a buffer nobody gave back (its pooler dropped unclosed): wait, then free
        try:
            self.free(None)
        except Exception:
            pass


class GridBuffer:
    """One grid's memory, lent by ``home`` (a GridBuffers); ``give_back`` when the grid goes."""

    def __init__(self, memory: StreamOrderedBuffer, home: "GridBuffers"):
        self.memory, self.home = memory, home
        self.ptr = memory.ptr
        self.released = Event(home.ctx)  # recorded on ``stream`` when its grid was released
        self.stream: int | None = None

    def give_back(self, stream: int) -> None:
        self.home.give_back(self, stream)

    def free(self, stream: int | None) -> None:
        self.memory.free(stream)
        self.released.destroy()  # a wait already enqueued on it still completes


class GridBuffers:
    """The free list of one pooler's grid buffers (``nbytes`` each); see the module doc."""

    def __init__(self, nbytes: int, ctx, pools: bool, own_stream: int, kept: int = KEPT):
        self.nbytes, self.ctx, self._pools = int(nbytes), ctx, pools
        self._own_stream, self._kept = own_stream, kept
        self._free: list[GridBuffer] = []
        self._closed = False
        # re-entrant: a grid dropped by the garbage collector inside take() gives its buffer back
        self._lock = threading.RLock()

    def take(self, stream: int) -> GridBuffer:
        """A buffer usable by work enqueued on ``stream`` from now on."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the pooler was closed")
            for i in range(len(self._free) - 1, -1, -1):  # the last released first
                if same_stream(self._free[i].stream, stream):
                    return self._free.pop(i)
            if self._free:
                buf = self._free.pop()
                buf.released.wait(stream)
                return buf
        return GridBuffer(StreamOrderedBuffer(self.nbytes, stream, self.ctx, self._pools), self)

    def give_back(self, buf: GridBuffer, stream: int) -> None:
        """From a grid released on ``stream`` (alive: the grid held it so far); any thread."""
        with self._lock:
            if not self._closed and len(self._free) < self._kept:
                buf.released.record(stream)
                buf.stream = stream
                self._free.append(buf)
                return
        buf.free(stream)

    @property
    def free_count(self) -> int:
        return len(self._free)

    def close(self) -> None:
        """Free the free buffers (grids still out free theirs when released)."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for buf in free:
            buf.released.wait(self._own_stream)
            buf.free(self._own_stream)
