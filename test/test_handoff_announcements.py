"""The two ways an announcement reaches a hand-off consumer (handoff/announcements.py), over real
rclpy and Fast DDS and a real signal socket, no GPU needed: each announcement delivered once,
from its first copy; DDS filters out the ROS copies of a linked ring; a lost datagram or a closed
link brings the ROS copies back; datagrams of other cameras and unreadable ones are set aside.
Every case runs through both implementations of the per-datagram work: the Python twin and the
hand-off core (the producer's fan-out and the consumer's waiter, native/)."""
from __future__ import annotations

import os
import tempfile
import time

import pytest

pytestmark = pytest.mark.ros

TOPIC = "cameras/A/depth_handoff"


class Rig:
    """A producer process's two ways (signal socket, ROS publisher in another node of this
    process's own DDS participant) and one consumer: its subscription and AnnouncementLinks."""

    def __init__(self, monkeypatch, executor: str = "single_threaded", impl: str = "python"):
        import rclpy
        from bevpool_msgs.msg import TensorHandoff
        from rclpy.executors import SingleThreadedExecutor
        from ros_harness import isolate_ros_env

        from bevpool_ros.handoff import announcements
        from bevpool_ros.handoff.announcements import AnnouncementLinks
        from bevpool_ros.handoff.signal import SignalServer, signal_path
        from bevpool_ros.ros.executor import make_executor
        from bevpool_ros.ros.qos import make_qos

        monkeypatch.setattr(announcements, "REFILTER_AFTER_S", 0.5)
        isolate_ros_env()
        self.folder = tempfile.mkdtemp(prefix="bevpool_announce_test_")
        self.socket_path = os.path.join(self.folder, "ring-1.sock")
        self.native = impl == "native"
        self.server = SignalServer(signal_path(self.socket_path), native=self.native)
        self.ctxs = [rclpy.Context(), rclpy.Context()]  # two participants, as two processes
        for ctx in self.ctxs:
            rclpy.init(context=ctx)
        self.prod = rclpy.create_node("announce_producer", context=self.ctxs[0])
        self.con = rclpy.create_node("announce_consumer", context=self.ctxs[1])
        # the consumer's executor: rclpy's default or the EventsExecutor bevpool_node runs in
        self.executors = [SingleThreadedExecutor(context=self.ctxs[0]),
                          make_executor(executor, context=self.ctxs[1])[0]]
        self.executors[0].add_node(self.prod)
        self.executors[1].add_node(self.con)
        qos = make_qos("reliable", 10)
        self.pub = self.prod.create_publisher(TensorHandoff, TOPIC, qos)
        self.delivered: list[tuple[int, str]] = []
        self.taken = 0  # ROS copies the executor took
        self.bad: list[str] = []
        self.fail_on: set[int] = set()  # sequences whose delivery raises
        self.links = AnnouncementLinks(self.con, TensorHandoff, self._deliver, native=self.native,
                                       accepts=lambda m: m.camera == "A", on_bad=self.bad.append)
        assert self.links.native == self.native
        self.sub = self.con.create_subscription(TensorHandoff, TOPIC, self._on_ros, qos)
        self.msg_type = TensorHandoff
        self.writer = None
        self.ring_id = 0x2F00_0000_0000_0001  # a 62-bit id, as HandoffRing draws them
        self.sequence = 0
        assert self.spin_until(lambda: self.pub.get_subscription_count() == 1)

    def _deliver(self, msg, way, arrival):
        if int(msg.sequence) in self.fail_on:
            raise RuntimeError(f"consumer failed on {msg.sequence}")
        self.delivered.append((int(msg.sequence), way))

    def _on_ros(self, msg):
        self.taken += 1
        self.links.on_message(msg, self.sub)

    def spin_until(self, predicate, timeout=10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not predicate():
            for ex in self.executors:
                ex.spin_once(timeout_sec=0.01)
        return predicate()

    def message(self, camera="A", sequence=None):
        m = self.msg_type()
        m.camera, m.stream, m.socket_path = camera, "depth", self.socket_path
        m.ring_id = self.ring_id
        if sequence is None:
            self.sequence += 1
            sequence = self.sequence
        m.sequence = sequence
        return m

    def announce(self, ways=("signal", "dds"), camera="A", skip=0):
        """One announcement, as CameraHandoffPublisher.publish sends it: the datagram first (by
        HandoffRing.announce), then the same serialised bytes published as they are."""
        from types import SimpleNamespace

        from bevpool_ros.handoff.producer import HandoffRing

        self.sequence += skip
        m = self.message(camera)
        ring = SimpleNamespace(signal=self.server if "signal" in ways else None)  # no GPU ring needed
        data = self.serialize(m)
        HandoffRing.announce(ring, data)
        if "dds" in ways:
            self.pub.publish(data)
        return m.sequence

    def serialize(self, m) -> bytes:
        """``m``'s bytes as producers make them: patched into its template (cdr_template.TemplateWriter;
        rclpy's serialiser leaves CDR padding uninitialised, so two of its serialisations of one
        template may differ there and match no template)."""
        from bevpool_ros.handoff.cdr_template import TemplateWriter

        if self.writer is None:
            self.writer = TemplateWriter(self.msg_type)
        return self.writer.serialize((m.camera, m.ring_id), lambda: m, (
            m.header.stamp.sec, m.header.stamp.nanosec, m.slot, m.sequence, bytes(m.event_handle), m.scale))

    def close(self):
        import rclpy

        self.links.close()
        self.server.close()
        for ex in self.executors:
            ex.shutdown()
        self.prod.destroy_node()
        self.con.destroy_node()
        for ctx in self.ctxs:
            rclpy.try_shutdown(context=ctx)
        os.rmdir(self.folder)


def executors() -> list[str]:
    """The consumer's executor: rclpy's default, and the EventsExecutor where rclpy has it (a
    filtered reader must keep delivering under both: _follow_new_reader)."""
    try:
        from rclpy.experimental import EventsExecutor  # noqa: F401
    except ImportError:
        return ["single_threaded"]
    return ["single_threaded", "events"]


def implementations() -> list:
    """The Python twin, and the hand-off core (skipped, with why, where it is not built)."""
    from bevpool_ros.handoff.native.core import library, unavailable_reason

    native = pytest.param("native", marks=pytest.mark.skipif(
        library() is None, reason=f"the hand-off core is not available here: {unavailable_reason()}"))
    return ["python", native]


@pytest.fixture(params=executors())
def executor(request):
    return request.param


@pytest.fixture(params=implementations())
def rig(monkeypatch, executor, request):
    r = Rig(monkeypatch, executor, request.param)
    yield r
    r.close()


def delivered_once(rig, sequences) -> bool:
    got = [s for s, _ in rig.delivered]
    return all(got.count(s) == 1 for s in sequences)


def link(rig):
    """Connect the consumer and send until DDS filters the ROS copies (the first copy the
    datagram beat sets the filter)."""
    rig.links.listen(rig.socket_path)
    assert rig.spin_until(lambda: rig.server.consumers == 1 and rig.links.connected == 1)
    sent = []
    for _ in range(50):
        sent.append(rig.announce())
        if rig.spin_until(lambda: rig.links.filtered == 1, 0.2):
            break
    assert rig.links.filtered == 1, rig.links.filter_error
    assert rig.spin_until(lambda: delivered_once(rig, sent))
    return sent


def test_without_a_link_the_ros_copies_deliver_each_announcement_once(rig):
    sent = [rig.announce(ways=("dds",)) for _ in range(5)]
    assert rig.spin_until(lambda: len(rig.delivered) == 5)
    assert rig.delivered == [(s, "dds") for s in sent]
    assert rig.links.first_by["dds"] == 5 and rig.links.filtered == 0


def test_a_linked_ring_is_delivered_by_its_datagrams_and_dds_drops_its_ros_copies(rig):
    sent = link(rig)
    assert all(way == "signal" for _, way in rig.delivered[-3:])
    taken = rig.taken
    more = [rig.announce() for _ in range(30)]
    assert rig.spin_until(lambda: delivered_once(rig, more))
    time.sleep(0.2)
    rig.spin_until(lambda: False, 0.3)  # any ROS copy still in flight is taken now
    assert rig.taken == taken, "DDS delivered ROS copies of a linked ring"
    assert rig.links.ros_copies == rig.taken
    assert [w for s, w in rig.delivered if s in more] == ["signal"] * 30
    assert delivered_once(rig, sent + more)
    assert rig.links.templates.hits >= 29  # read through the learnt template (in the core: native)
    # another ring on the same topic (a restarted producer) is not filtered
    rig.ring_id += 1
    m = rig.message()
    rig.pub.publish(m)
    assert rig.spin_until(lambda: (m.sequence, "dds") in rig.delivered)


def test_a_ros_copy_tells_whether_its_datagram_came_first(rig):
    """``signalled``: the node lets only those ROS copies wait for its set (copies to drop); a
    first copy is delivered at once (node/handoff_input.py)."""
    early = rig.announce(ways=("dds",))  # before the link: its only copy is the ROS one
    assert rig.spin_until(lambda: (early, "dds") in rig.delivered)
    assert not rig.links.signalled(rig.message(sequence=early))
    sent = link(rig)
    assert rig.links.signalled(rig.message(sequence=sent[-1]))
    assert not rig.links.signalled(rig.message(sequence=sent[-1] + 1000))  # not announced yet


def test_a_lost_datagram_lifts_the_filter_until_the_link_has_been_clean_a_while(rig):
    link(rig)
    seq = rig.announce(skip=2)  # two datagrams the producer never queued for us
    assert rig.spin_until(lambda: rig.links.filtered == 0 and (seq, "signal") in rig.delivered)
    assert rig.links.lost == 2
    taken = rig.taken
    seq = rig.announce(ways=("dds",))  # its datagram lost too: the ROS copy delivers it
    assert rig.spin_until(lambda: (seq, "dds") in rig.delivered)
    assert rig.taken > taken
    assert rig.links.filtered == 0  # not set again before REFILTER_AFTER_S
    time.sleep(0.6)
    for _ in range(20):
        rig.announce()
        if rig.spin_until(lambda: rig.links.filtered == 1, 0.2):
            break
    assert rig.links.filtered == 1


def test_a_closed_link_brings_the_ros_copies_back(rig):
    link(rig)
    rig.server.close()  # the producer went away (its ring goes with it)
    assert rig.spin_until(lambda: rig.links.filtered == 0 and rig.links.connected == 0)
    seq = rig.announce(ways=("dds",))
    assert rig.spin_until(lambda: (seq, "dds") in rig.delivered)


def test_datagrams_of_other_cameras_and_unreadable_ones_are_set_aside(rig):
    link(rig)
    n = len(rig.delivered)
    rig.announce(ways=("signal",), camera="B")  # the ring's other tensors: another consumer's
    rig.server.send(b"\x00\x01not a TensorHandoff")
    from rclpy.serialization import serialize_message
    rig.server.send(serialize_message(rig.message(sequence=7))[:40])  # cut short
    seq = rig.announce(ways=("signal",))
    assert rig.spin_until(lambda: (seq, "signal") in rig.delivered)
    assert len(rig.delivered) == n + 1
    assert rig.links.ignored == 1 and rig.links.lost == 0
    assert rig.spin_until(lambda: len(rig.bad) == 2) and all("unreadable" in b for b in rig.bad), rig.bad
    assert rig.links.unreadable == 2


def test_a_filter_set_as_its_link_closes_is_lifted_at_once(rig):
    """The link may close between the check that allowed a filter and the filter being set: the
    filter must not stay (DDS would drop that ring's copies with no datagram to replace them)."""
    link(rig)
    rig.links._apply_lifts()
    rig.sub.set_content_filter("", [])
    rig.links._filters.clear()
    rig.server.close()
    assert rig.spin_until(lambda: rig.links.connected == 0)
    rig.links._filter(rig.sub, rig.socket_path, rig.ring_id)  # what on_message does, a moment late
    assert rig.spin_until(lambda: rig.links.filtered == 0)
    seq = rig.announce(ways=("dds",))
    assert rig.spin_until(lambda: (seq, "dds") in rig.delivered)


def test_a_closed_consumer_links_nothing_and_delivers_nothing(rig):
    link(rig)
    rig.links.close()
    assert rig.spin_until(lambda: rig.server.consumers == 0 or (rig.server.send(b"ping"), False)[1])
    rig.links.listen(rig.socket_path)  # a delivery in flight at close
    time.sleep(0.3)
    assert rig.server.consumers == 0 and rig.links.connected == 0
    n = len(rig.delivered)
    rig.announce()
    rig.spin_until(lambda: False, 0.5)
    assert len(rig.delivered) == n


def test_a_delivery_that_raises_keeps_the_link(rig):
    link(rig)
    rig.fail_on.add(rig.sequence + 1)
    failed = rig.announce(ways=("signal",))
    seq = rig.announce(ways=("signal",))
    assert rig.spin_until(lambda: (seq, "signal") in rig.delivered)
    assert rig.links.connected == 1 and (failed, "signal") not in rig.delivered
    assert any("not handled" in b and "consumer failed" in b for b in rig.bad), rig.bad



@pytest.mark.parametrize("impl", implementations())
def test_the_core_checks_a_watched_rings_slots_before_delivery(monkeypatch, impl):
    """``wait_events``: datagrams of a ring the consumer ``watch``es are checked against its control
    block before delivery (here without events: ``wait_events=False``); ``deliver``'s fourth argument
    says a datagram was found still in its slot (the Python twin leaves every check to the caller:
    always False). A slot claimed again, or a ring no longer watched, is left to the caller."""
    from bevpool_ros.handoff.announcements import AnnouncementLinks
    from bevpool_ros.handoff.ring import SharedControlBlock

    rig = Rig(monkeypatch, "single_threaded", impl)
    control = SharedControlBlock.create(rig.ring_id, 4)
    got = []
    links = AnnouncementLinks(rig.con, rig.msg_type, lambda m, way, t, waited: got.append((int(m.sequence), waited)),
                              native=impl == "native", wait_events=False)
    try:
        links.watch(rig.ring_id, control.block.words.ctypes.data, 4, {})
        links.listen(rig.socket_path)
        assert rig.spin_until(lambda: rig.server.consumers == 1 and links.connected == 1)

        def send(sequence, slot):
            m = rig.message(sequence=sequence)
            m.slot = slot
            rig.server.send(rig.serialize(m))
            assert rig.spin_until(lambda: sequence in [s for s, _ in got])
        send(1, 0)  # its template is learnt from it: read as bytes, unchecked
        for slot, seq in ((1, 2), (2, 3)):
            control.block.claim(slot, seq)
        send(2, 1)  # still in its slot
        control.block.claim(2, 7)
        send(3, 2)  # slot 2 claimed again since
        links.unwatch(rig.ring_id)
        control.block.claim(3, 4)
        send(4, 3)  # held, but no longer watched
    finally:
        links.close()
        control.close()
        rig.close()
    checked = impl == "native"
    assert got == [(1, False), (2, checked), (3, False), (4, False)]
