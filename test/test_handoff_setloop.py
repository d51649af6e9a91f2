"""The node's hand-off sets in the core (node/handoff_sets.py over handoff/native/setloop.cpp), no GPU:
a real producer's signal socket and control block, its TensorHandoff datagrams patched from templates as
CameraHandoffPublisher makes them, the rig's 12 camera streams. The same announcements go through the
Python twin (AnnouncementLinks' de-duplication, HandoffInputs' checks, cameras/sync.py) and through the
core: every drop with its reason and text, every set with its members, and the synchroniser's drops must
be the same, while the core reads all but each stream's first datagram through its template."""
from __future__ import annotations

import os
import re
import tempfile
import time

import numpy as np
import pytest

from bevpool_ros.cameras.sync import STREAMS, CameraSetSynchronizer
from bevpool_ros.handoff.camera_publisher import boot_id
from bevpool_ros.io.bev_message import stamp_to_ns
from bevpool_ros.io.tensor_codec import DTYPE_CODES, TensorError
from bevpool_ros.node.handoff_input import check_announcement
from bevpool_ros.node.inputs import check_stamp
from bevpool_ros.params.table import defaults
from bevpool_ros.paths import default_rig_path
from bevpool_ros.rig_yaml import load_rig

RING_SIZE = 256  # never wraps here: the twin checks the slots after every announcement was sent
SYNC = (0.005, 10.0, "drop", 1, 4)  # slop, camera timeout (never reached here), policy, min cameras, pending


def core():
    from bevpool_ros.handoff.native.core import library, unavailable_reason

    if library() is None:
        pytest.skip(f"the hand-off core is not available here: {unavailable_reason()}")
    return library()


class Producer:
    """A camera producer's ring as the node sees it, without a GPU: its control block (claimed as
    HandoffRing claims it), its signal socket, announcements patched from TemplateWriter's templates."""

    def __init__(self, rig, ring_id: int):
        from bevpool_msgs.msg import TensorHandoff

        from bevpool_ros.handoff.cdr_template import TemplateWriter
        from bevpool_ros.handoff.ring import SharedControlBlock
        from bevpool_ros.handoff.signal import SignalServer, signal_path

        self.rig, self.ring_id, self.msg_type = rig, ring_id, TensorHandoff
        self.folder = tempfile.mkdtemp(prefix="bevpool_setloop_test_")
        self.socket_path = os.path.join(self.folder, "ring.sock")
        self.server = SignalServer(signal_path(self.socket_path))
        self.control = SharedControlBlock.create(ring_id, RING_SIZE)
        self.writer = TemplateWriter(TensorHandoff)
        self.sequence = 0

    def message(self, camera, stream, boot, dtype):
        _, D, H, W = self.rig.depth_shape
        shape = (D, H, W) if stream == "depth" else (H, W, self.rig.channels)
        m = self.msg_type()
        m.camera, m.stream, m.layout = camera, stream, "DHW" if stream == "depth" else "HWC"
        m.socket_path, m.ring_id, m.ring_size = self.socket_path, self.ring_id, RING_SIZE
        m.dtype, m.shape = DTYPE_CODES[dtype], list(shape)
        m.nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        m.boot_id = boot
        return m

    def announce(self, camera, stream, stamp_ns, *, scale=1.0, boot=None, dtype="float16", skip=0,
                 send=True):
        """One tensor written (its slot claimed) and announced; (bytes, the message)."""
        boot = boot or boot_id()
        self.sequence += 1 + skip
        slot = (self.sequence - 1) % RING_SIZE
        self.control.block.claim(slot, self.sequence)
        self.control.block.publish(self.sequence)
        sec, nanosec = divmod(stamp_ns, 1_000_000_000)
        handle = bytes(range(slot, slot + 64))
        data = self.writer.serialize((camera, stream, boot, dtype), lambda: self.message(camera, stream, boot, dtype),
                                     (sec, nanosec, slot, self.sequence, handle, scale))
        if send:
            self.server.send(data)
        from rclpy.serialization import deserialize_message

        return data, deserialize_message(data, self.msg_type)

    def close(self):
        self.server.close()
        self.control.close()


class Node:
    """The node's checks of one announcement, on this producer's control block: what
    HandoffInputs.on_announcement runs, its opening reduced to the seqlock (no ring mapped)."""

    def __init__(self, rig, producer):
        from bevpool_ros.handoff.ring import overwritten_text
        from bevpool_ros.node.handoff_sets import Checks

        cfg, boot = defaults(), boot_id()

        def opened(msg):
            if not producer.control.block.holds(int(msg.slot), int(msg.sequence)):
                raise TensorError("handoff_overwritten", overwritten_text(msg.slot, msg.sequence))
            return ("view", int(msg.ring_id), int(msg.sequence), int(msg.slot), bytes(msg.event_handle))

        self.checks = Checks(lambda stamp: check_stamp(stamp, time.time_ns(), cfg["sync.max_future_s"]),
                             lambda m: check_announcement(m, m.camera, m.stream, rig, cfg, boot), opened)


class PythonTwin:
    """The Python path: each announcement once (AnnouncementLinks), checked and opened
    (HandoffInputs.on_announcement), joined into sets (CameraSetSynchronizer)."""

    def __init__(self, cameras, checks):
        self.checks, self.seen = checks, set()
        self.drops, self.sync_drops, self.sets = [], [], []
        self.sync = CameraSetSynchronizer(cameras, *SYNC, on_drop=lambda r, d: self.sync_drops.append((r, d)))

    def take(self, msg):
        key = (int(msg.ring_id), int(msg.sequence))
        if key in self.seen:
            return
        self.seen.add(key)
        stamp = stamp_to_ns(msg.header.stamp)
        try:
            self.checks.stamp(stamp)
            self.checks.message(msg)
            payload = self.checks.open(msg)
        except TensorError as e:
            self.drops.append((e.reason, f"{msg.camera}/{msg.stream} (hand-off): {e.detail}"))
            return
        self.sets += self.sync.add(msg.camera, msg.stream, stamp, payload, time.perf_counter())


AHEAD = re.compile(r"stamp (\d+\.\d{3}) s ahead")


def masked(drops):
    return [(reason, AHEAD.sub("stamp <t> s ahead", detail)) for reason, detail in drops]


def ahead(drops) -> float:
    return next(float(AHEAD.search(d).group(1)) for r, d in drops if r == "stamp_in_future")


def shown(sets):
    return [(s.stamp_ns, s.frames, s.missing, s.complete, s.epoch) for s in sets]


@pytest.fixture
def setup():
    from bevpool_msgs.msg import TensorHandoff

    from bevpool_ros.handoff.signal import signal_path
    from bevpool_ros.node.handoff_sets import SetLoopIntake

    lib = core()
    rig = load_rig(default_rig_path())
    cameras = tuple(c.name for c in rig.cameras)
    producer = Producer(rig, 0x2F00_0000_0000_0007)
    node = Node(rig, producer)
    got = {"drops": [], "sync_drops": [], "sets": [], "inline": [], "version": 0}

    def deliver(camera_set, inline):
        got["sets"].append(camera_set)
        got["inline"].append(inline)

    intake = SetLoopIntake(lib, TensorHandoff, cameras=cameras, sync_args=SYNC,
                           max_future_s=defaults()["sync.max_future_s"], checks=node.checks,
                           report_drop=lambda r, d: got["drops"].append((r, d)),
                           sync_dropped=lambda r, d: got["sync_drops"].append((r, d)), deliver=deliver,
                           rig_version=lambda: got["version"])
    intake.connect(signal_path(producer.socket_path))
    intake.watch(producer.ring_id, producer.control.block.words.ctypes.data, RING_SIZE)
    deadline = time.monotonic() + 5
    while producer.server.consumers < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    intake.start()
    yield rig, cameras, producer, node, intake, got
    intake.close()
    producer.close()


def wait_for(predicate, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        time.sleep(0.01)
    return predicate()


@pytest.fixture
def launching(setup):
    """The loop of ``setup`` launching through a driverless launcher (test_handoff_native) while its gate
    (int64 words, armed at version 0, nothing published yet) allows it: (launcher, gate)."""
    from test_handoff_native import driverless_launcher

    from bevpool_ros.handoff.native.setloop import GATE_EPOCH, GATE_WORDS

    intake = setup[4]
    gate = np.zeros(GATE_WORDS, np.int64)
    gate[GATE_EPOCH] = -1
    with driverless_launcher(intake.loop.lib) as (launcher, _):
        intake.loop.launch_with(launcher, gate)
        try:
            yield launcher, gate
        finally:
            intake.loop.inject_stall(0)
            intake.loop.launch_with(None, None)


def test_the_core_takes_drops_and_assembles_what_the_python_twin_does(setup):
    rig, cameras, producer, node, intake, got = setup
    twin = PythonTwin(cameras, node.checks)
    t0 = time.time_ns() - 10_000_000_000
    sent = []

    def settled():
        """Every datagram sent so far taken by the loop, before the next set is sent: a producer
        never blocks, and one that outran this consumer's socket queue would lose datagrams (a
        node takes their ROS copies then; here they would be missing from the comparison)."""
        assert wait_for(lambda: sum(intake.loop.counts().get(f"intake_{k}", 0) for k in (
            "signal_first", "signal_copies_ignored")) >= len(sent)), (len(sent), intake.loop.counts())

    def one_set(k, special=None, **kw):
        """Every camera stream of set ``k``; ``special`` (camera, stream): announced with ``kw``."""
        stamp = t0 + k * 100_000_000
        for cam in cameras:
            for stream in STREAMS:
                mine = special == (cam, stream)
                data, msg = producer.announce(cam, stream, kw.pop("stamp", stamp) if mine else stamp,
                                              **(kw if mine else {}))
                sent.append(msg)
        settled()

    one_set(1)                                          # each stream's first: checked in Python, learnt
    one_set(2)                                          # read by the templates
    one_set(3, ("CAM_FRONT", "depth"), stamp=0)         # stamp_zero: set 3 superseded by set 4
    one_set(4, ("CAM_BACK", "feat"), scale=2.0)         # a scale on float16 values
    one_set(5, ("CAM_FRONT_LEFT", "depth"), stamp=time.time_ns() + 5_000_000_000)  # stamp_in_future
    one_set(6, ("CAM_BACK_LEFT", "feat"), boot="00000000-0000-0000-0000-000000000000")  # another host: raw
    one_set(7, ("CAM_FRONT", "feat"), skip=3)           # a gap of three sequences
    one_set(8)
    # set 9: one slot claimed again before its announcement arrives (the seqlock at the announcement)
    stamp9 = t0 + 9 * 100_000_000
    for cam in cameras:
        for stream in STREAMS:
            data, msg = producer.announce(cam, stream, stamp9, send=False)
            if (cam, stream) == ("CAM_BACK_RIGHT", "depth"):
                producer.control.block.claim(int(msg.slot), int(msg.sequence) + RING_SIZE)
            producer.server.send(data)
            sent.append(msg)
    settled()
    # set 10: one announcement's ROS copy arrives before its datagram
    stamp10 = t0 + 10 * 100_000_000
    for cam in cameras:
        for stream in STREAMS:
            first_by_dds = (cam, stream) == ("CAM_FRONT_RIGHT", "feat")
            data, msg = producer.announce(cam, stream, stamp10, send=not first_by_dds)
            if first_by_dds:
                intake.on_ros_copy(msg, time.perf_counter())
                producer.server.send(data)
            sent.append(msg)
    settled()
    one_set(11)
    for msg in sent:
        twin.take(msg)
    assert len(twin.sets) == 6  # 1, 2, 7, 8, 10, 11: a set with a dropped tensor is superseded
    assert wait_for(lambda: len(got["sets"]) >= len(twin.sets) and len(got["drops"]) >= len(twin.drops)), got
    time.sleep(0.2)  # nothing more comes
    # the same texts, but for how far ahead a future stamp was when each judged it
    assert masked(got["drops"]) == masked(twin.drops)
    assert abs(ahead(got["drops"]) - ahead(twin.drops)) < 0.5
    assert shown(got["sets"]) == shown(twin.sets)
    assert got["sync_drops"] == twin.sync_drops
    # the core read every datagram but each stream's first and the other host's one (12 + 1 raw)
    assert intake.raw == 13 and intake.lost == 3 and producer.server.dropped == 0
    counts = intake.loop.counts()
    assert counts["intake_signal_first"] == len(sent) - 1 and counts["intake_dds_first"] == 1
    assert counts["intake_signal_copies_ignored"] == 1


def test_a_wake_or_a_new_deadline_ends_the_loops_wait_at_once():
    """The loop's thread waits in the core for datagrams and its next deadline. A wake (a stop) and a
    set offered from Python (its camera timeout: a new deadline) end that wait; it does not sleep out
    its time-out (a swallowed wake-up once made a stop take 0.5 s and a partial set's timeout late)."""
    import threading

    from bevpool_ros.handoff.native.setloop import SetLoop

    loop = SetLoop(core(), ["CAM_A", "CAM_B"])
    loop.configure(0.005, 0.2, "drop", 1, 4)
    returned = []

    def waiting_loop():
        thread = threading.Thread(target=lambda: returned.append(loop.run(60.0)), daemon=True)
        thread.start()
        time.sleep(0.2)  # in its wait by now (or about to be: then it sees the news first)
        return thread

    try:
        thread = waiting_loop()
        loop.wake()
        thread.join(10.0)
        assert not thread.is_alive() and returned == [2]  # 2: woken
        thread = waiting_loop()
        loop.offer(0, 0, time.time_ns(), 1, time.monotonic())  # CAM_A's depth alone: times out in 0.2 s
        thread.join(10.0)
        assert not thread.is_alive() and returned == [2, 1]  # 1: records wait (the set's drop)
        assert [r.head.kind for r in loop.records()]
    finally:
        loop.shutdown()
        if not thread.is_alive():
            loop.close()


def test_a_set_completed_on_another_thread_is_never_overtaken_by_the_loops_next(setup):
    """Two threads take sets from the one synchroniser: the loop's (datagrams) and the executor's (a ROS
    copy that came first). Each set reaches the pooling worker in the order it completed, however long
    the other thread takes to hand its set over (an overtaken set is dropped as a stamp regression)."""
    import threading

    rig, cameras, producer, node, intake, got = setup
    deliver, slowed = intake.deliver, threading.Event()

    def slow_off_the_loop(camera_set, inline):
        if threading.current_thread() is not intake.thread and not slowed.is_set():
            slowed.set()
            time.sleep(0.5)  # the executor between taking its set and handing it over
        return deliver(camera_set, inline)

    intake.deliver = slow_off_the_loop
    t0 = time.time_ns() - 5_000_000_000
    stamps = [t0 + k * 100_000_000 for k in range(3)]
    for cam in cameras:
        for stream in STREAMS:
            producer.announce(cam, stream, stamps[0])
    assert wait_for(lambda: len(got["sets"]) == 1), got
    last = None
    for cam in cameras:  # set 2: its last member's ROS copy comes first, on another thread
        for stream in STREAMS:
            last = producer.announce(cam, stream, stamps[1], send=(cam, stream) != (cameras[-1], STREAMS[-1]))
    assert wait_for(lambda: intake.loop.counts().get("intake_signal_first", 0) >= 23), intake.loop.counts()
    executor = threading.Thread(target=intake.on_ros_copy, args=(last[1], time.perf_counter()))
    executor.start()
    assert slowed.wait(5.0)
    for cam in cameras:  # set 3, by datagrams, while the executor hands set 2 over
        for stream in STREAMS:
            producer.announce(cam, stream, stamps[2])
    executor.join(10.0)
    assert wait_for(lambda: len(got["sets"]) == 3), got
    assert [s.stamp_ns for s in got["sets"]] == stamps and got["drops"] == []


def test_a_delivery_that_fails_is_counted_and_the_loop_goes_on(setup):
    """A delivery whose inline job fails (here: what comes back is not a job) is counted as an
    internal error; the loop's thread lives on and delivers the next set."""
    rig, cameras, producer, node, intake, got = setup
    deliver = intake.deliver
    intake.deliver = lambda camera_set, inline: "not a job"
    t0 = time.time_ns() - 5_000_000_000

    def one_set(k):
        for cam in cameras:
            for stream in STREAMS:
                producer.announce(cam, stream, t0 + k * 100_000_000)

    one_set(0)
    assert wait_for(lambda: got["drops"]), got
    assert got["drops"][0][0] == "internal_error" and "not callable" in got["drops"][0][1], got["drops"]
    intake.deliver = deliver
    one_set(1)
    assert wait_for(lambda: len(got["sets"]) == 1), got
    assert intake.thread.is_alive()


def test_the_watchdog_names_a_set_loop_stuck_in_python(setup):
    """The loop's thread is idle while blocked in the core; handling what it handed over (here a set
    whose delivery hangs) for longer than the watchdog's timeout is a stall, named with its stack."""
    import threading
    from types import SimpleNamespace

    from bevpool_ros.ros.liveness import Watchdog

    rig, cameras, producer, node, intake, got = setup
    release = threading.Event()
    intake.deliver = lambda camera_set, inline: release.wait(10.0) and None
    watchdog = Watchdog(SimpleNamespace(handoff_thread=intake, worker=None), timeout_s=0.3, backstop=False)

    def judged_after(seconds: float) -> str:
        time.sleep(seconds)
        watchdog.beat()  # the executor is fine
        return watchdog.stuck(time.monotonic())

    try:
        assert judged_after(0.5) == ""  # blocked in the core: idle, never stuck
        stamp = time.time_ns() - 1_000_000_000
        for cam in cameras:
            for stream in STREAMS:
                producer.announce(cam, stream, stamp)
        assert wait_for(lambda: intake.busy_since is not None)
        line = judged_after(0.5)
        assert line.startswith("hand-off set loop made no progress for") and "test_handoff_setloop.py" in line, line
    finally:
        release.set()
    assert wait_for(lambda: intake.busy_since is None)


def test_the_loop_stops_and_starts_again_keeping_its_links_and_templates(setup):
    """A lifecycle deactivation stops the thread (the loop and its links stay); activated again, the
    next set is read by the templates learnt before."""
    rig, cameras, producer, node, intake, got = setup

    def one_set(stamp):
        for cam in cameras:
            for stream in STREAMS:
                producer.announce(cam, stream, stamp)

    t0 = time.time_ns() - 5_000_000_000
    one_set(t0)
    assert wait_for(lambda: len(got["sets"]) == 1)
    intake.stop()
    assert intake.thread is None
    intake.start()
    one_set(t0 + 100_000_000)
    assert wait_for(lambda: len(got["sets"]) == 2), got
    assert intake.raw == 12 and got["drops"] == []  # only the first set's datagrams were raw


def test_a_calibration_change_has_every_stream_checked_in_full_again(setup):
    """The templates were checked against the old rig: after a new calibration version each stream's
    next datagram is raw again (checked in Python, learnt anew)."""
    rig, cameras, producer, node, intake, got = setup
    t0 = time.time_ns() - 5_000_000_000
    for k in range(3):
        if k == 2:
            got["version"] += 1
        for cam in cameras:
            for stream in STREAMS:
                producer.announce(cam, stream, t0 + k * 100_000_000)
        assert wait_for(lambda: len(got["sets"]) == k + 1), got
    # set 1 raw (learnt), set 2 by the templates; the set that completes after the change makes the
    # loop let its templates go: the next set's datagrams are raw once more
    for cam in cameras:
        for stream in STREAMS:
            producer.announce(cam, stream, t0 + 300_000_000)
    assert wait_for(lambda: len(got["sets"]) == 4), got
    assert intake.raw == 24 and got["drops"] == []


def test_stamps_are_judged_against_the_node_clock_as_it_moves(setup):
    """Under sim time the node's clock is not the system's and moves apart from it: the core judges
    future stamps against the node's clock as read now, not as it was at activation."""
    from bevpool_ros.node.handoff_sets import RUN_TIMEOUT_S

    rig, cameras, producer, node, intake, got = setup
    clock = [time.time_ns() - 100_000_000_000]  # a simulation 100 s behind the system clock
    intake.clock_ns = lambda: clock[0]
    time.sleep(2 * RUN_TIMEOUT_S)

    def one_set(stamp):
        for cam in cameras:
            for stream in STREAMS:
                producer.announce(cam, stream, stamp)

    one_set(time.time_ns() - 300_000_000_000)  # behind both clocks; checked in Python and learnt
    assert wait_for(lambda: len(got["sets"]) == 1), got
    one_set(time.time_ns() - 1_000_000_000)  # read by the templates: ~100 s ahead of the (stopped) node clock
    assert wait_for(lambda: len(got["drops"]) == 12), got
    assert {r for r, _ in got["drops"]} == {"stamp_in_future"} and 98.0 < ahead(got["drops"]) < 103.0
    clock[0] = time.time_ns()  # the simulation caught up
    time.sleep(2 * RUN_TIMEOUT_S)
    one_set(time.time_ns() - 500_000_000)
    assert wait_for(lambda: len(got["sets"]) == 2), got
    assert len(got["drops"]) == 12


def test_the_loop_launches_a_complete_set_only_when_the_gate_allows(setup, launching):
    """The core's launcher takes a complete set of template-read announcements as it completes, in
    the loop's thread, only while the gate's words allow it (node/handoff_launch.py writes them): a
    set without a graph is a miss and goes to Python, counted; with Python busy or the calibration
    moved on, sets go to Python without a try; a stamp not newer than the last published one is
    dropped as publishing.py drops it; a launch the driver refuses (none here) is dropped
    internal_error and the core closes the gate itself."""
    from bevpool_ros.handoff.native.setloop import GATE_ARMED, GATE_BUSY, GATE_EPOCH, GATE_STAMP, GATE_VERSION

    rig, cameras, producer, node, intake, got = setup
    launcher, gate = launching
    lib = intake.loop.lib
    t0 = time.time_ns() - 5_000_000_000

    def one_set(k):
        """Set ``k``: its (ring id, slot) key, in the loop's member order."""
        key = []
        for cam in cameras:
            for stream in STREAMS:
                producer.announce(cam, stream, t0 + k * 100_000_000)
                key.append((producer.ring_id, (producer.sequence - 1) % RING_SIZE))
        return key

    def misses():
        return intake.loop.counts().get("intake_launch_misses", 0)

    one_set(0)  # read in Python (the streams' templates learnt): its payloads are Python's
    assert wait_for(lambda: len(got["sets"]) == 1), got
    assert misses() == 0
    one_set(1)  # read by the templates: tried, no graph
    assert wait_for(lambda: len(got["sets"]) == 2), got
    assert misses() == 1
    for k, (word, value) in enumerate(((GATE_BUSY, 1), (GATE_VERSION, 1), (GATE_ARMED, -1)), start=2):
        gate[word] = value
        one_set(k)
        assert wait_for(lambda: len(got["sets"]) == k + 1), got
        gate[GATE_BUSY] = gate[GATE_VERSION] = gate[GATE_ARMED] = 0
    assert misses() == 1 and got["drops"] == []
    gate[GATE_EPOCH], gate[GATE_STAMP] = got["sets"][-1].epoch, t0 + 10**12
    one_set(6)
    assert wait_for(lambda: len(got["drops"]) == 1), got
    assert got["drops"] == [("stamp_regression", f"set {t0 + 600_000_000} ns is not newer than the last "
                             f"published {t0 + 10**12} ns")]
    assert len(got["sets"]) == 5
    if lib.bp_driver_available():
        return  # a launch with a graph would hand made-up events to a real driver
    gate[GATE_EPOCH] = -1
    launcher.ring(producer.ring_id, producer.control.block.words.ctypes.data, RING_SIZE,
                  {bytes(range(s, s + 64)): 0x1000 + s for s in range(RING_SIZE - 63)})
    key = [(producer.ring_id, (producer.sequence + i) % RING_SIZE) for i in range(2 * len(cameras))]
    launcher.remember(key, 0x2000)
    assert one_set(7) == key
    assert wait_for(lambda: len(got["drops"]) == 2), got
    reason, detail = got["drops"][1]
    assert reason == "internal_error" and detail.startswith("hand-off core launch failed: ")
    assert gate[GATE_ARMED] == -1 and intake.loop.counts()["intake_launch_failed"] == 1
    assert len(got["sets"]) == 5


def test_a_launch_in_the_core_is_seen_by_the_watchdog_while_it_runs(setup, launching):
    """A set's launch runs in the loop's thread inside the core (its GPU wait): the watchdog must see
    that thread busy meanwhile (SetLoopIntake.busy_since, read without the loop's lock), or a launch
    that never ends would leave the node silent. A launch stalled on purpose (as
    BEVPOOL_INJECT_STALL=launch does for good) shows as busy from its start, and idle once it ends."""
    rig, cameras, producer, node, intake, got = setup
    t0 = time.time_ns() - 5_000_000_000

    def one_set(k):
        for cam in cameras:
            for stream in STREAMS:
                producer.announce(cam, stream, t0 + k * 100_000_000)

    one_set(0)  # read in Python: its templates learnt
    assert wait_for(lambda: len(got["sets"]) == 1), got
    assert intake.busy_since is None or wait_for(lambda: intake.busy_since is None)
    intake.loop.inject_stall(3000)
    one_set(1)  # launchable: the launch stalls 3 s before the launcher (no graph: then a miss)
    assert wait_for(lambda: intake.busy_since is not None, 2.5)
    started = intake.busy_since
    assert abs(time.monotonic() - started) < 3.0
    assert wait_for(lambda: len(got["sets"]) == 2, 5.0), got  # the miss, pooled by Python
    assert wait_for(lambda: intake.busy_since is None, 2.0)
    assert intake.loop.counts()["intake_launch_misses"] == 1
