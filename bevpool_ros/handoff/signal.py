"""The per-tensor wake-up of the input hand-off on one host, next to the ROS message.

One DDS hop of a small message costs ~0.5 ms at p50 on the H200 host, a Unix-socket
ping between two Python processes tens of microseconds. So the producer also sends each
announcement's serialised bytes over a SOCK_SEQPACKET socket (one datagram per announcement,
order kept) to every consumer that connected; the ROS message still goes out (discovery, tools,
consumers that never connect). A consumer takes whichever copy arrives first and ignores the
other (same ring, same sequence).

The socket lives next to the ring's descriptor socket, in the producer's private 0700 folder
(``signal_path``); clients of another user are refused (SO_PEERCRED). A consumer too slow to
drain its socket loses datagrams (counted in ``dropped``), never blocks the producer: it still
has the ROS message.
"""
from __future__ import annotations

import os
import select
import socket
import threading

from .fdpass import _peer_uid

MAX_DATAGRAM = 4096  # a TensorHandoff is < 512 bytes serialised
# A consumer whose queue is full is waited for this long at most (a set's burst of 12 announcements
# outruns a reading consumer's queue: net.unix.max_dgram_qlen, 10 by default); still full, it loses the
# datagram and is not waited for again until one reaches it (fanout.h FULL_WAIT_MS: the same rule)
FULL_WAIT_S = 0.001


def signal_path(ring_socket_path: str) -> str:
    """Where the producer of the ring served at ``ring_socket_path`` listens for consumers."""
    return os.path.join(os.path.dirname(ring_socket_path), "signal.sock")


class SignalServer:
    """Producer side: ``send(data)`` to every connected consumer, never blocking. ``native``: the
    sends run in the hand-off core (native/fanout.py; True, False, or None: as BEVPOOL_NATIVE says)."""

    def __init__(self, path: str, native: bool | None = False):
        from .native.core import use_native

        lib = use_native(native)
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._sock.bind(path)
        os.chmod(path, 0o600)
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.refused = self._dropped = 0
        self._lagging: set = set()  # consumers found full and not waited for
        self.fanout = None
        if lib is not None:
            from .native.fanout import NativeFanout

            self.fanout = NativeFanout(lib)
        self._running = True
        self._thread = threading.Thread(target=self._accept, name="bevpool-handoff-signal",
                                        daemon=True)
        self._thread.start()

    @property
    def consumers(self) -> int:
        return self.fanout.consumers if self.fanout is not None else len(self._conns)

    @property
    def dropped(self) -> int:
        """Datagrams not queued for a consumer whose queue was full."""
        return self.fanout.dropped if self.fanout is not None else self._dropped

    def _accept(self) -> None:
        while self._running:
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            if _peer_uid(conn) != os.getuid():
                self.refused += 1
                conn.close()
                continue
            conn.setblocking(False)
            if self.fanout is not None:
                self.fanout.add(conn.detach())
                continue
            with self._lock:
                self._conns.append(conn)

    def send(self, data: bytes) -> None:
        if self.fanout is not None:
            self.fanout.send(data)
            return
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                try:
                    conn.send(data)
                except BlockingIOError:
                    if conn in self._lagging or not select.select([], [conn], [], FULL_WAIT_S)[1]:
                        raise
                    conn.send(data)
                self._lagging.discard(conn)
            except BlockingIOError:  # still full: it still gets the ROS message
                self._dropped += 1
                self._lagging.add(conn)
            except OSError:  # it went away
                self._lagging.discard(conn)
                with self._lock:
                    if conn in self._conns:
                        self._conns.remove(conn)
                conn.close()

    def close(self) -> None:
        self._running = False
        self._thread.join(2.0)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns = []
        if self.fanout is not None:
            self.fanout.close()
        self._sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def connect(path: str, timeout: float = 2.0) -> socket.socket:
    """A consumer's connected socket to the signal socket at ``path`` (OSError when no producer
    listens there), still with ``timeout``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


class SignalClient:
    """Consumer side: ``on_datagram(bytes)`` in a thread of its own for every datagram, until
    the producer goes away or ``close``; then ``on_closed()`` (same thread)."""

    def __init__(self, path: str, on_datagram, timeout: float = 2.0, on_closed=None):
        self._sock = connect(path, timeout)
        self._sock.settimeout(None)
        self._on_datagram = on_datagram
        self._on_closed = on_closed or (lambda: None)
        self.received = 0
        self._thread = threading.Thread(target=self._loop, name="bevpool-handoff-wake",
                                        daemon=True)
        self._thread.start()

    @property
    def connected(self) -> bool:
        return self._thread.is_alive()

    def _loop(self) -> None:
        try:
            while True:
                try:
                    data = self._sock.recv(MAX_DATAGRAM)
                except OSError:
                    return
                if not data:  # the producer closed it
                    return
                self.received += 1
                self._on_datagram(data)
        finally:
            self._on_closed()

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        if self._thread is not threading.current_thread():
            self._thread.join(2.0)
