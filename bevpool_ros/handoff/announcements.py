"""A hand-off ring's announcements (TensorHandoff, BevHandoff), taken by the faster of two ways.

The producer sends each announcement's serialised bytes to every same-host consumer connected
to the ring's signal socket (signal.py), then publishes it as a ROS message (discovery, tools,
consumers that never connect). ``AnnouncementLinks`` is the consumer's half, shared by
bevpool_node's input hand-off and ``BevHandoffSubscriber``:

  * each announcement (socket path, ring id, sequence) is delivered once, by whichever copy
    arrived first;
  * ``listen(socket_path)`` connects to a ring's signal socket once the caller mapped the ring;
  * while a link is up and has lost nothing, the ROS copies of its ring are dropped by DDS
    itself: a content filter ``ring_id <> R`` on the subscription, set (from the executor) when
    a ROS copy arrives that its datagram beat. The executor then no longer wakes, takes and
    deserialises one message per tensor only to throw it away. On the H200 host those copies
    held the GIL the node's pooling thread needed (~9 per set during its pooling stage: 3.6 ms
    against 0.6 ms alone);
  * a link that closed or lost datagrams (a gap in its ring's sequence: the producer's queue to
    this consumer was full) has its filters lifted, from the executor (a guard condition), and
    not set again for ``REFILTER_AFTER_S``: the ROS copies wake the consumer meanwhile.

Where the middleware has no content filters (e.g. Cyclone DDS) the copies are taken and ignored.

With the hand-off core (``native``) the per-datagram work runs there (native/waiter.py): one thread
blocked on every link's socket, each datagram read through the learnt templates and, for a ring the
caller ``watch``es, its seqlock checked and its IPC event waited for, GIL released; this class keeps
the rest (de-duplication, gaps, filters) as it is for the Python twin (signal.SignalClient).
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections import Counter, OrderedDict

from .cdr_template import TemplateReader
from .native.core import READY, use_native

SEEN_KEPT = 4096          # announcements remembered, to ignore their second copy
REFILTER_AFTER_S = 1.0    # after a lost datagram, ROS copies are taken this long
FILTER = "ring_id <> %0"  # DDS content filter (SQL subset): every ring but the linked one


class AnnouncementLinks:
    def __init__(self, node, msg_type, deliver, *, accepts=lambda msg: True, on_bad=None, log=None,
                 one_at_a_time: bool = True, defer=None, native: bool | None = False, wait_events=None,
                 intake=None):
        """``deliver(msg, way, arrival)`` gets the first copy of each announcement (``way``
        "signal" or "dds", ``arrival`` a perf_counter time), from the signal thread or the
        executor; one call at a time unless ``one_at_a_time`` is False (a caller with locks of its
        own, whose deliveries may take long: the node pools a set inside one). ``accepts(msg)``: a
        datagram this consumer wants (the producer sends every tensor of its ring to each
        consumer; other cameras are not ours). ``on_bad(detail)``: an unreadable datagram, or a
        delivery that raised (the link's thread goes on). ``defer(job)``: where the ring's
        templates are learnt (cdr_template.TemplateReader; None: at the first datagram).
        ``native``: datagrams read in the hand-off core (True, False, or None: as BEVPOOL_NATIVE
        says). ``wait_events`` (not None): the core checks each datagram of a ring given to ``watch``
        before its delivery (the seqlock; with True also the host wait on its event), and
        ``deliver`` gets a fourth argument: True when that was done (the Python twin: False).
        ``intake``: bevpool_node's set loop (node/handoff_sets.SetLoopIntake), which takes the linked
        rings' datagrams itself: links are made there, the one "seen" record of both ways is its,
        and its gaps lift the filters; this class keeps the ROS copies and the content filters."""
        self.node, self.msg_type = node, msg_type
        self._deliver, self._accepts = deliver, accepts
        self._on_bad = on_bad or (lambda detail: None)
        self._log = log or node.get_logger()
        self._lock = threading.Lock()
        self._delivering = threading.Lock() if one_at_a_time else contextlib.nullcontext()
        self._closed = False
        self._seen: OrderedDict = OrderedDict()  # (socket path, ring id, sequence) -> way
        self._links: dict[str, _Link | None] = {}  # socket path -> link (None: no signal socket)
        self._filters: dict = {}  # subscription -> (socket path, ring id) its copies are dropped for
        self._lift: set = set()   # subscriptions whose filter goes (applied by the executor)
        self._first_by: Counter = Counter()
        self.lost = 0             # datagrams the producer could not queue for us
        self.ignored = 0          # datagrams of tensors this consumer does not take
        self.unreadable = 0       # datagrams that are no announcement of this type
        self.ros_copies = 0       # ROS messages the executor took (DDS did not filter them)
        self.filter_error = ""    # why content filters are not used here
        # lifts run in the executor thread, as a task handed to the node's executor (a guard
        # condition would do, but rclpy's EventsExecutor refuses nodes that have one)
        self._lift_scheduled = False
        self._checks = wait_events is not None
        self._waiter = None  # native.waiter.SignalWaiter: the core's wake-up, or the Python twin's links
        self._intake = intake
        lib = use_native(native) if intake is None else None
        if lib is not None:
            from .native.waiter import SignalWaiter

            self._waiter = SignalWaiter(lib, bool(wait_events))
        # datagrams read through the ring's templates: a few fields patched into a copy, not
        # the whole message converted by rclpy (cdr_template.py)
        self.templates = TemplateReader(msg_type, defer, self._waiter.templates if self._waiter else None)

    # --- the two ways in ------------------------------------------------------------------------
    def on_message(self, msg, subscription) -> None:
        """A ROS copy (executor thread), from ``subscription``."""
        arrival = time.perf_counter()
        if self._lift:  # asked for before the node had an executor
            self._apply_lifts()
        key = (msg.socket_path, int(msg.ring_id), int(msg.sequence))
        with self._lock:
            if self._closed:
                return
            self.ros_copies += 1
            first = self._first(key, "dds")
            refilter = first == "signal" and self._should_filter(subscription, msg)
        if refilter:
            self._filter(subscription, msg.socket_path, int(msg.ring_id))
        if first != "signal":  # the same way twice is no copy: checked (and counted) again
            self._hand_over(msg, "dds", arrival, False)

    def signalled(self, msg) -> bool:
        """``msg``'s announcement already came over a signal socket: this ROS copy is one to drop."""
        if self._intake is not None:
            return self._intake.signalled(msg)
        with self._lock:
            return self._seen.get((msg.socket_path, int(msg.ring_id), int(msg.sequence))) == "signal"

    def _on_datagram(self, socket_path: str, data: bytes, arrival: float | None = None) -> None:
        """A signal-socket copy (that link's thread, which an exception must not end: the link
        would close while its ring's ROS copies may still be filtered)."""
        try:
            self._take_datagram(socket_path, data, time.perf_counter() if arrival is None else arrival)
        except Exception as e:
            self._on_bad(f"hand-off announcement from {socket_path} not handled: {type(e).__name__}: {e}")

    def _on_read(self, socket_path: str, template_id: int, values, arrival: float, check: int, data: bytes) -> None:
        """A signal-socket copy the core read through template ``template_id`` (and checked: ``check``)."""
        try:
            msg = self.templates.message_of(template_id, values)
            if msg is None:  # that template was let go meanwhile: the bytes, as the Python twin reads them
                self._take_datagram(socket_path, data, arrival)
            else:
                self._take(socket_path, msg, arrival, check == READY)
        except Exception as e:
            self._on_bad(f"hand-off announcement from {socket_path} not handled: {type(e).__name__}: {e}")

    def _take_datagram(self, socket_path: str, data: bytes, arrival: float) -> None:
        try:
            msg = self.templates.deserialize(data)
        except Exception as e:  # the producer is same-user: a bug, say it
            with self._lock:
                self.unreadable += 1
            self._on_bad(f"unreadable signal datagram: {e}")
            return
        self._take(socket_path, msg, arrival, False)

    def _take(self, socket_path: str, msg, arrival: float, waited: bool) -> None:
        key = (msg.socket_path, int(msg.ring_id), int(msg.sequence))
        with self._lock:
            if self._closed:
                return
            link = self._links.get(socket_path)
            if link is not None and link.count(key[1], key[2]):
                self.lost += link.gap
                self._lift_ring(socket_path, key[1])
            if not self._accepts(msg):
                self.ignored += 1
                return
            first = self._first(key, "signal")
        if first != "dds":
            self._hand_over(msg, "signal", arrival, waited)

    def _first(self, key, way: str) -> str | None:
        """(lock held) How announcement ``key`` came first, or None: this copy (by ``way``) is the
        first, and remembered."""
        if self._intake is not None:
            loop = self._intake.loop
            return None if loop.claim(key[1], key[2], way) else loop.seen(key[1], key[2]) or way
        first = self._seen.get(key)
        if first is None:
            self._seen[key] = way
            self._first_by[way] += 1
            while len(self._seen) > SEEN_KEPT:
                self._seen.popitem(last=False)
        return first

    @property
    def first_by(self) -> Counter:
        """Announcements by the way their first copy came ("signal", "dds")."""
        if self._intake is None:
            return self._first_by
        counts = self._intake.loop.counts()
        return Counter({way: counts.get(f"intake_{way}_first", 0) for way in ("signal", "dds")})

    def _hand_over(self, msg, way: str, arrival: float, waited: bool) -> None:
        with self._delivering:
            if self._checks:
                self._deliver(msg, way, arrival, waited)
            else:
                self._deliver(msg, way, arrival)

    # --- links ----------------------------------------------------------------------------------
    def listen(self, socket_path: str) -> None:
        """Connect to the signal socket of a ring just mapped (once; a producer without one
        wakes us by its ROS messages only)."""
        with self._lock:
            if self._closed or socket_path in self._links:
                return
            self._links[socket_path] = None  # no second attempt while this one connects
        from .signal import SignalClient, signal_path

        link = _Link()
        on_closed = functools.partial(self._on_closed, socket_path, link)
        try:
            if self._intake is not None:
                link.client = self._intake.connect(signal_path(socket_path), on_closed=on_closed,
                                                   on_gap=functools.partial(self._on_gap, socket_path, link))
            elif self._waiter is not None:
                link.client = self._waiter.connect(signal_path(socket_path),
                                                   on_values=functools.partial(self._on_read, socket_path),
                                                   on_raw=functools.partial(self._on_datagram, socket_path),
                                                   on_closed=on_closed)
            else:
                link.client = SignalClient(signal_path(socket_path),
                                           functools.partial(self._on_datagram, socket_path), on_closed=on_closed)
        except OSError as e:
            self._log.info(f"hand-off producer at {socket_path} has no signal socket ({e}); "
                           "woken by its ROS messages")
            return
        with self._lock:
            if self._closed or self._links.get(socket_path, link) is not None:
                stale = True  # closed (or forgotten) meanwhile: this link serves nobody
            else:
                stale, self._links[socket_path] = False, link
        if stale:
            link.client.close()

    def _on_closed(self, socket_path: str, link: "_Link") -> None:
        """Its producer went away (or restarted): ROS copies of its rings are taken again."""
        with self._lock:
            if self._links.get(socket_path) is link:
                self._links.pop(socket_path)
            self._lift_ring(socket_path, None)

    def _on_gap(self, socket_path: str, link: "_Link", ring_id: int, lost: int) -> None:
        """(the intake's thread) ``lost`` datagrams of ``ring_id`` never came over this link."""
        with self._lock:
            self.lost += lost
            link.lost_some()
            self._lift_ring(socket_path, ring_id)

    def forget(self, socket_path: str) -> None:
        """The caller unmapped this producer's ring."""
        with self._lock:
            link = self._links.pop(socket_path, None)
            self._lift_ring(socket_path, None)
        if link is not None:  # outside the lock: its thread may be waiting for it
            link.client.close()

    def watch(self, ring_id: int, control_address: int, ring_size: int, events: dict, context: int = 0) -> None:
        """With the core and ``wait_events``: check the datagrams of a ring the caller mapped before
        delivering them (native.waiter.SignalWaiter.watch); the Python twin leaves it to ``deliver``."""
        if self._waiter is not None and self._checks:
            self._waiter.watch(ring_id, control_address, ring_size, events, context)

    def watch_mapped(self, ring, context) -> None:
        """``watch`` a ring a reader.HandoffReader mapped (its control block and opened events)."""
        self.watch(ring.ring_id, ring.control.block.words.ctypes.data, ring.ring_size,
                   {h: int(e.event) for h, e in ring.events.items()}, int(context))

    def unwatch(self, ring_id: int) -> None:
        """Before the caller unmaps a watched ring."""
        if self._waiter is not None:
            self._waiter.unwatch(ring_id)

    @property
    def native(self) -> bool:
        """The hand-off core reads this consumer's datagrams."""
        return self._waiter is not None

    @property
    def connected(self) -> int:
        return sum(1 for link in list(self._links.values()) if link is not None and link.client.connected)

    # --- content filters (executor thread only) ---------------------------------------------------
    def _should_filter(self, subscription, msg) -> bool:
        if self.filter_error or subscription is None:
            return False
        link = self._links.get(msg.socket_path)
        return (link is not None and link.healthy()
                and self._filters.get(subscription) != (msg.socket_path, int(msg.ring_id)))

    def _filter(self, subscription, socket_path: str, ring_id: int) -> None:
        try:
            subscription.set_content_filter(FILTER, [str(ring_id)])
            if not subscription.is_cft_enabled:
                raise RuntimeError("the middleware does not filter content")
        except Exception as e:  # not Fast DDS, or an older one: copies are taken and ignored
            self.filter_error = f"{type(e).__name__}: {e}"[:160]
            self._log.info(f"hand-off announcements: ROS copies are not filtered ({self.filter_error})")
            return
        self._follow_new_reader()
        with self._lock:
            if self._closed:
                return  # its subscription goes with the consumer
            self._filters[subscription] = (socket_path, ring_id)
            link = self._links.get(socket_path)
            if link is None or not link.healthy():  # it closed or lost one while the filter was set
                self._lift_ring(socket_path, ring_id)

    def _lift_ring(self, socket_path: str, ring_id) -> None:
        """(lock held) Lift the filters set for one ring (``ring_id``) or all rings of a producer."""
        subs = [s for s, (path, rid) in self._filters.items()
                if path == socket_path and ring_id in (None, rid)]
        if subs:
            self._lift.update(subs)
            executor = self.node.executor  # None: not spun yet; the next ROS copy applies them
            if executor is not None and not self._lift_scheduled:
                self._lift_scheduled = True
                executor.create_task(self._apply_lifts)

    def _apply_lifts(self) -> None:
        with self._lock:
            subs, self._lift, self._lift_scheduled = self._lift, set(), False
            for s in subs:
                self._filters.pop(s, None)
        for s in subs:
            try:
                s.set_content_filter("", [])
            except Exception:  # destroyed meanwhile: nothing to lift
                pass
        if subs:
            self._follow_new_reader()

    def _follow_new_reader(self) -> None:
        """rmw_fastrtps re-creates a subscription's reader when its content filter changes, and
        rclpy's EventsExecutor keeps listening to the old one: the subscription would go silent.
        Taking the node out of that executor and back in, once the removal has been applied,
        registers every entity again, on the new reader (samples that arrived meanwhile are
        reported then). SingleThreadedExecutor builds its wait set anew on each wake-up."""
        executor = self.node.executor
        if type(executor).__name__ == "EventsExecutor":
            executor.remove_node(self.node)
            executor.create_task(executor.add_node, self.node)

    @property
    def filtered(self) -> int:
        """Subscriptions whose ROS copies DDS drops now."""
        return len(self._filters)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True  # a delivery in flight maps no new link, takes no copy
            links, self._links = [link for link in self._links.values() if link is not None], {}
            self._filters, self._lift = {}, set()
        for link in links:  # outside the lock: their threads may be waiting for it
            link.client.close()
        if self._waiter is not None:
            self._waiter.close()


class _Link:
    """One producer's signal connection, and what it has lost."""

    def __init__(self):
        self.client = None
        self._last: dict[int, int] = {}  # ring id -> last sequence received
        self.gap = 0
        self._unhealthy_until = 0.0

    def count(self, ring_id: int, sequence: int) -> bool:
        """Record a datagram; True when datagrams before it were lost (``gap`` of them)."""
        last = self._last.get(ring_id)
        self._last[ring_id] = sequence
        self.gap = 0 if last is None else sequence - last - 1
        if self.gap > 0:
            self.lost_some()
        return self.gap > 0

    def lost_some(self) -> None:
        """Datagrams were lost: no filter for REFILTER_AFTER_S."""
        self._unhealthy_until = time.monotonic() + REFILTER_AFTER_S

    def healthy(self) -> bool:
        return (self.client is not None and self.client.connected
                and time.monotonic() >= self._unhealthy_until)
