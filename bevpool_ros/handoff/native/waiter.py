"""The consumer's wake-up in the core (waiter.cpp): one thread, ``bevpool-handoff-wake``, blocked in
``bp_waiter_wait`` on every signal socket a consumer linked. The call returns, GIL released until
then, with the next datagram read through the consumer's templates and, for a ring the consumer
watches, the seqlock checked and the slot's IPC event waited for on the host; the thread then runs
the link's Python callback (announcements.AnnouncementLinks: de-duplication, gaps, filters, the
delivery). A Python thread running a blocking native call, rather than a thread of the core's own
calling into Python: the watchdog and ``threading`` see it, and no foreign thread needs the GIL.
"""
from __future__ import annotations

import ctypes
import logging
import threading

from ..signal import MAX_DATAGRAM, connect
from .core import WAKE_CLOSED, WAKE_RAW, WAKE_SHUTDOWN, WAKE_TEMPLATE, WAKE_TIMEOUT, Arrival, error
from .templates import NativeTemplates

log = logging.getLogger(__name__)


class WaiterLink:
    """One linked signal socket (what signal.SignalClient is to the Python twin): ``connected``,
    ``close()``; its callbacks run in the waiter's thread."""

    def __init__(self, waiter: "SignalWaiter", link_id: int, on_values, on_raw, on_closed):
        self.waiter, self.id = waiter, link_id
        self.on_values, self.on_raw, self._on_closed = on_values, on_raw, on_closed
        self._closed = threading.Event()

    @property
    def connected(self) -> bool:
        return not self._closed.is_set()

    def closed(self) -> None:
        """(waiter thread) The producer closed it, or ``close`` asked for it: ``on_closed`` runs once."""
        if self._closed.is_set():
            return
        try:
            self._on_closed()
        finally:
            self._closed.set()

    def close(self) -> None:
        """Unlink; outside the waiter's thread, returns once its ``on_closed`` has run (2 s at most)."""
        self.waiter.remove(self)
        if threading.current_thread() is not self.waiter.thread:
            self._closed.wait(2.0)


class SignalWaiter:
    def __init__(self, lib, wait_events: bool):
        """``wait_events``: for watched rings, also wait on the host for each tensor's IPC event."""
        self.lib = lib
        self.templates = NativeTemplates(lib)
        self.handle = lib.bp_waiter_new(self.templates.handle, int(bool(wait_events)))
        if not self.handle:
            self.templates.close()
            raise OSError(error(lib, "hand-off waiter not made"))
        self._links: dict[int, WaiterLink] = {}
        self._lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self._closing = False

    def connect(self, path: str, *, on_values, on_raw, on_closed, timeout: float = 2.0) -> WaiterLink:
        """Link the signal socket at ``path`` (OSError when no producer listens there).
        ``on_values(template_id, values, arrival_s, check, data)``: a datagram the core read through
        a template; ``on_raw(data, arrival_s)``: one it did not; ``on_closed()``: the link is gone."""
        sock = connect(path, timeout)
        link_id = ctypes.c_uint64()
        with self._lock:
            if self._closing:
                sock.close()
                raise OSError("the consumer is closing")
            if self.lib.bp_waiter_add(self.handle, sock.detach(), ctypes.byref(link_id)) != 0:
                raise OSError(error(self.lib, "signal socket not linked"))
            link = self._links[link_id.value] = WaiterLink(self, link_id.value, on_values, on_raw, on_closed)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="bevpool-handoff-wake", daemon=True)
                self.thread.start()
        return link

    def remove(self, link: WaiterLink) -> None:
        with self._lock:
            if self.handle and not self._closing:
                self.lib.bp_waiter_remove(self.handle, link.id)

    def watch(self, ring_id: int, control_address: int, ring_size: int, events: dict, context: int = 0) -> None:
        """Check datagrams of ring ``ring_id`` in the core: its control block's int64 words at
        ``control_address`` (mapped until ``unwatch``), ``events`` {64-byte IPC handle: CUevent address}."""
        handles = b"".join(events)
        addresses = (ctypes.c_uint64 * max(len(events), 1))(*map(int, events.values()))
        with self._lock:
            if self.handle and not self._closing:
                self.lib.bp_waiter_watch(self.handle, int(ring_id), ctypes.cast(control_address, ctypes.POINTER(
                    ctypes.c_int64)), int(ring_size), len(events), handles, addresses, int(context))

    def unwatch(self, ring_id: int) -> None:
        """Returns once no check of the ring runs: its memory may be unmapped then."""
        with self._lock:
            if self.handle and not self._closing:
                self.lib.bp_waiter_unwatch(self.handle, int(ring_id))

    def _run(self) -> None:
        arrival, buf = Arrival(), ctypes.create_string_buffer(MAX_DATAGRAM)
        wait, handle = self.lib.bp_waiter_wait, self.handle
        while True:
            kind = wait(handle, ctypes.byref(arrival), buf, MAX_DATAGRAM)
            if kind == WAKE_SHUTDOWN or kind < 0:
                if kind < 0:
                    log.error("%s", error(self.lib, "hand-off waiter stopped"))
                break
            if kind == WAKE_TIMEOUT:  # woken to look again (a link removed): the next wait says what
                continue
            link = self._links.get(arrival.link)
            if link is None:
                continue
            try:
                if kind == WAKE_CLOSED:
                    with self._lock:
                        self._links.pop(arrival.link, None)
                    link.closed()
                elif kind == WAKE_TEMPLATE:
                    link.on_values(arrival.template_id, arrival.values.as_tuple(), arrival.arrival_ns / 1e9,
                                   arrival.check, ctypes.string_at(buf, arrival.length))
                elif kind == WAKE_RAW:
                    link.on_raw(ctypes.string_at(buf, arrival.length), arrival.arrival_ns / 1e9)
            except Exception:  # a callback's bug must not end every link's wake-up
                log.exception("hand-off signal callback failed")
        for link in list(self._links.values()):  # as SignalClient at close: each link's on_closed runs
            link.closed()
        self._free()

    def _free(self) -> None:
        with self._lock:
            handle, self.handle = self.handle, None
        if handle:
            self.lib.bp_waiter_free(handle)
        self.templates.close()

    def close(self) -> None:
        """Stop the thread (joined, unless called from it: it frees the core's waiter as it ends)."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            thread, handle = self.thread, self.handle
            if handle:
                self.lib.bp_waiter_shutdown(handle)
        if thread is None:
            self._free()
        elif thread is not threading.current_thread():
            thread.join(2.0)
