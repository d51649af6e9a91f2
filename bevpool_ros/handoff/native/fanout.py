"""The core's datagram fan-out behind signal.SignalServer: the accepting stays in Python (rare,
and the peer check with it), each send runs in the core: every consumer, non-blocking, drops
counted, a consumer that went away forgotten (fanout.cpp)."""
from __future__ import annotations

import os
import threading


class NativeFanout:
    def __init__(self, lib):
        self.lib = lib
        self.handle = lib.bp_fanout_new()
        self._lock = threading.Lock()  # a send racing close() must not reach freed memory

    def add(self, fd: int) -> None:
        """Take over ``fd``, a connected non-blocking SOCK_SEQPACKET socket."""
        with self._lock:
            if self.handle:
                self.lib.bp_fanout_add(self.handle, fd)
                return
        os.close(fd)

    @property
    def consumers(self) -> int:
        with self._lock:
            return self.lib.bp_fanout_consumers(self.handle) if self.handle else 0

    @property
    def dropped(self) -> int:
        with self._lock:
            return self.lib.bp_fanout_dropped(self.handle) if self.handle else 0

    def send(self, data: bytes) -> None:
        with self._lock:
            if self.handle:
                self.lib.bp_fanout_send(self.handle, data, len(data))

    def close(self) -> None:
        with self._lock:
            if self.handle:
                self.lib.bp_fanout_free(self.handle)
                self.handle = None
