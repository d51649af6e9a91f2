"""The consumer's side of ``output.gpu_handoff``: each BEV grid as a zero-copy device view.

    from bevpool_ros.handoff import BevHandoffSubscriber

    def on_grid(view, msg):              # view: reader.HandoffView, msg: bevpool_msgs/BevHandoff
        grid = torch.from_dlpack(view)   # no copy; the grid is written (waited for on the host)
        ... use grid ...
        if not view.still_valid(): ...   # the node reused the slot meanwhile: discard the result

    sub = BevHandoffSubscriber(node, "bev/handoff", on_grid)

Same host and GPU as bevpool_node. The first announcement maps the node's ring; from then on the
subscriber is also linked to the ring's signal socket and takes each grid from whichever copy
of its announcement comes first (announcements.py): one Unix-socket datagram instead of a DDS
hop, and the ROS copies filtered out by DDS while the link loses nothing. ``on_grid`` runs in
the link's thread or in the executor, one call at a time. With the hand-off core (``native``,
BEVPOOL_NATIVE) the link's thread waits in the core: it reads each datagram, checks that the slot
still holds the grid and waits for the grid's write there, GIL released, before ``on_grid``.
A grid overwritten before it was opened is counted (``overwritten``), never delivered; a message
that cannot be honoured (another GPU, another user's ring) is counted in ``errors`` with
``last_error``.
"""
from __future__ import annotations

import time

from .announcements import AnnouncementLinks
from .ring import RING_IDLE_S


class BevHandoffSubscriber:
    def __init__(self, node, topic: str, on_grid, qos=None, *, reader=None, wait: bool = True,
                 native: bool | None = None):
        """``wait``: the host waits for each grid's write before ``on_grid`` (False: the view is
        handed over unwaited; call ``view.wait(stream)`` to order your stream after it). ``native``:
        the wake-up and read in the hand-off core (True, False, or None: as BEVPOOL_NATIVE says)."""
        from bevpool_msgs.msg import BevHandoff

        from ..ros.qos import make_qos
        from .reader import HandoffReader

        self.node, self.on_grid, self.wait = node, on_grid, wait
        self._own_reader = reader is None
        self.reader = reader or HandoffReader()
        self.overwritten = self.errors = 0
        self.last_arrival = 0.0  # perf_counter time the grid being delivered was announced
        self.last_error = ""
        self._named: dict[str, float] = {}  # socket path -> monotonic time last named
        self._watched: dict[str, int] = {}  # socket path -> ring id the core checks grids of
        self.links = AnnouncementLinks(node, BevHandoff, self._deliver, native=native, wait_events=wait)
        self.reader.unmapping.append(self._unwatch)
        self.subscription = node.create_subscription(BevHandoff, topic, lambda m: None,
                                                     qos or make_qos("reliable", 10))
        self.subscription.callback = lambda m: self.links.on_message(m, self.subscription)

    def _deliver(self, msg, way: str, arrival: float, waited: bool) -> None:
        """``waited``: the core found the grid in its slot and (``wait``) waited for its write."""
        from .reader import HandoffOverwritten

        self.last_arrival = arrival
        self._forget_idle(msg.socket_path)
        try:
            view = self.reader.open(msg, wait=self.wait and not waited)
        except HandoffOverwritten:
            self.overwritten += 1
            return
        except Exception as e:  # another GPU or user, a ring that changed: counted, said once
            self.errors += 1
            if not self.last_error:
                self.node.get_logger().warning(f"BEV hand-off grid not opened: {e}")
            self.last_error = f"{type(e).__name__}: {e}"
            return
        self.links.listen(msg.socket_path)
        self._watch(msg.socket_path)
        self.on_grid(view, msg)

    def _watch(self, socket_path: str) -> None:
        """Have the core check the grids of the ring just opened (once per ring)."""
        ring = self.reader.ring(socket_path)
        if self.links.native and ring is not None and self._watched.get(socket_path) != ring.ring_id:
            self._watched[socket_path] = ring.ring_id
            self.links.watch_mapped(ring, self.reader.device.ctx)

    def _unwatch(self, ring) -> None:
        """(the reader's unmapping hook) No check of that ring runs once this returns."""
        self.links.unwatch(ring.ring_id)
        for path, ring_id in list(self._watched.items()):
            if ring_id == ring.ring_id:
                del self._watched[path]

    def _forget_idle(self, socket_path: str) -> None:
        now = time.monotonic()
        if socket_path not in self._named:
            for path, named in list(self._named.items()):
                if now - named > RING_IDLE_S:
                    del self._named[path]
                    self.reader.forget(path)
                    self.links.forget(path)
        self._named[socket_path] = now

    @property
    def linked(self) -> bool:
        """True while a signal link to the node's ring is up."""
        return self.links.connected > 0

    def close(self) -> None:
        self.node.destroy_subscription(self.subscription)
        self.links.close()
        if self._unwatch in self.reader.unmapping:
            self.reader.unmapping.remove(self._unwatch)
        if self._own_reader:
            self.reader.close()
