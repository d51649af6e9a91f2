"""The input hand-off's per-tensor path in the hand-off core: announcements to camera sets.

With the core (``BEVPOOL_NATIVE``), the node's hand-off announcements are taken by its set loop
(handoff/native/setloop.cpp), one thread ``bevpool-handoff-sets`` blocked in it with the GIL
released: every linked producer's datagram is read through the template of its camera stream,
checked (stamp, scale, the slot still holding it), de-duplicated with its ROS copy and offered to
the node's synchroniser, which is the loop's (handoff/native/sync.py). Python sees what it must:

  * a stream's first announcement, and any datagram no template reads (a new ring, a changed
    field), arrives raw: it is checked here in full, as the Python twin checks every one
    (``Checks``: stamp, camera and stream of the topic, boot id, dtype, shape, nbytes, layout,
    scale, then opened), and its bytes become the stream's template: from then on the template's
    fixed bytes carry all of those checks, and the core compares them;
  * a ROS copy: the one "seen" record of both ways is the loop's (``claim``);
  * the sets, the drops with their reasons and texts, closed links and gaps.
A template is only ever learnt from bytes that passed every check, and a calibration change (the
rig's shapes) forgets them all: the next datagram of each stream is checked in full again.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, NamedTuple

from ..cameras.sync import STREAMS
from ..handoff.cdr_template import CdrTemplate, TemplateError
from ..handoff.native.setloop import (
    DROP_BY_INTAKE,
    REC_CLOSED,
    REC_DROP,
    REC_GAP,
    REC_LAUNCHED,
    REC_RAW,
    RUN_SHUTDOWN,
    SetLoop,
)
from ..handoff.native.sync import NativeSynchronizer
from ..io.bev_message import stamp_to_ns
from ..io.tensor_codec import CODE_NAMES, TensorError
from ..thread_name import name_this_thread

RUN_TIMEOUT_S = 0.5  # the thread looks at its stop flag this often while no datagram comes
CLOCK_REFRESH_S = 0.05  # the node's clock (sim time moves apart from the system's) is read this often


class Checks(NamedTuple):
    """The node's checks of one announcement (handoff_input.HandoffInputs): ``stamp(stamp_ns)``,
    ``message(msg)`` -> its dtype, ``open(msg)`` -> the payload; each raises TensorError."""

    stamp: Callable
    message: Callable
    open: Callable


class Unopened(NamedTuple):
    """A member of a set the loop assembled whose tensor could not be opened any more."""

    reason: str
    detail: str


class IntakeLink:
    """One producer's signal socket linked to the loop (what signal.SignalClient is to the Python
    twin, for handoff.announcements.AnnouncementLinks): ``connected``, ``close()``."""

    def __init__(self, intake: "SetLoopIntake", link_id: int, on_closed, on_gap):
        self.intake, self.id = intake, link_id
        self.on_closed, self.on_gap = on_closed, on_gap
        self._closed = threading.Event()

    @property
    def connected(self) -> bool:
        return not self._closed.is_set()

    def closed(self) -> None:
        if not self._closed.is_set():
            try:
                self.on_closed()
            finally:
                self._closed.set()

    def close(self) -> None:
        """Unlink; returns once its ``on_closed`` ran (2 s at most), unless the loop's thread asks."""
        self.intake.loop.unlink(self.id)
        if self.intake.thread is not None and threading.current_thread() is not self.intake.thread:
            self._closed.wait(2.0)


class SetLoopIntake:
    def __init__(self, lib, msg_type, *, cameras, sync_args, max_future_s: float, checks: Checks,
                 report_drop: Callable, sync_dropped: Callable, deliver: Callable, handover=None,
                 rig_version: Callable = lambda: 0, clock_ns: Callable = time.time_ns):
        """``sync_args``: CameraSetSynchronizer's (slop, camera_timeout, policy, min_cameras,
        max_pending); ``report_drop(reason, detail)``: the node's drop counter; ``sync_dropped``: the
        synchroniser's; ``deliver(camera_set, inline)``: where complete sets go (inline: it may return
        the job that pools the set in the calling thread, run once ``handover`` is released);
        ``handover``: the reentrant lock every set leaves the synchroniser and is delivered under, on
        every thread that offers to it (the node's inputs'), so that none overtakes another; ``rig_version()``:
        the calibration's version (a new one: the templates, checked against the old rig, go);
        ``clock_ns()``: the node's clock, which stamps from the future are judged against."""
        self.msg_type, self.cameras = msg_type, tuple(cameras)
        self.clock_ns = clock_ns
        self._clock_read = -float("inf")  # monotonic time the clock was last handed to the loop
        self.rig_version = rig_version
        self._version = rig_version()
        self.checks, self.report_drop, self.deliver = checks, report_drop, deliver
        self.handover = handover if handover is not None else threading.RLock()
        self._inline_job: Callable | None = None  # (the loop's thread) the set it reserved the worker for
        self._launched: list = []  # (the loop's thread) launched sets' records, handled once the lock is free
        self._links: dict[int, IntakeLink] = {}
        self.loop = SetLoop(lib, self.cameras)
        self.sync = NativeSynchronizer(lib, self.cameras, *sync_args, on_drop=sync_dropped, resolve=self._open,
                                       on_record=self._on_record, loop=self.loop)
        self._max_future_s = float(max_future_s)
        self._templates: dict[int, tuple[CdrTemplate, int]] = {}  # template id -> (template, ring id)
        self._learnt: set = set()  # (ring id, camera, stream)
        self._lock = threading.Lock()
        self.lost = self.raw = 0
        self.thread: threading.Thread | None = None
        self._python_since: float | None = None  # monotonic, while Python handles what the loop handed over
        self._stopping = False
        self.on_launched: Callable | None = None  # (record) a set the core's launcher pooled and announced

    def _read_clock(self) -> None:
        """(the loop's thread, between runs) The core judges stamps against CLOCK_REALTIME plus the
        node's clock's lead on it (0 on the system clock; under sim time the simulation's, which
        moves: read again every CLOCK_REFRESH_S while datagrams come, as the Python path reads the
        clock at every stamp)."""
        now = time.monotonic()
        if now - self._clock_read >= CLOCK_REFRESH_S:
            self._clock_read = now
            self.loop.checks(self._max_future_s, self.clock_ns() - time.time_ns())

    # --- configuration (the node's thread) ---------------------------------------------------------
    def connect(self, signal_socket: str, *, on_closed=None, on_gap=None, timeout: float = 2.0) -> IntakeLink:
        """Link a producer's signal socket (OSError when nobody listens there). ``on_closed()``: it
        closed; ``on_gap(ring_id, lost)``: ``lost`` datagrams of that ring never came."""
        link_id = self.loop.link(signal_socket, timeout)
        link = self._links[link_id] = IntakeLink(self, link_id, on_closed or (lambda: None),
                                                 on_gap or (lambda ring_id, lost: None))
        return link

    def watch(self, ring_id: int, control_address: int, ring_size: int) -> None:
        """The loop checks the slots of this mapped ring (datagrams of a ring not watched: raw)."""
        self.loop.watch(ring_id, control_address, ring_size)

    def forget_ring(self, ring_id: int) -> None:
        """Before the caller unmaps a ring: its templates go, its checks end."""
        with self._lock:
            gone = [tid for tid, (_, rid) in self._templates.items() if rid == ring_id]
            for tid in gone:
                self._templates.pop(tid)
                self.loop.forget(tid)
            self._learnt = {k for k in self._learnt if k[0] != ring_id}
        self.loop.unwatch(ring_id)

    def forget_templates(self) -> None:
        """A calibration change: every stream's next datagram is checked in full again. (Their
        Python twins stay until their ring goes: members taken before still open by them.)"""
        with self._lock:
            for tid in self._templates:
                self.loop.forget(tid)
            self._learnt.clear()

    # --- the thread --------------------------------------------------------------------------------
    def start(self) -> None:
        """(again after ``stop``: a lifecycle activation)"""
        self._stopping = False
        self.thread = threading.Thread(target=self._run, name="bevpool-handoff-sets", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        name_this_thread()
        while not self._stopping:
            self._read_clock()
            if self.loop.run(RUN_TIMEOUT_S) == RUN_SHUTDOWN:
                break
            self._python_since = time.monotonic()
            try:
                with self.handover:
                    for camera_set in self.sync.drain():
                        self._deliver(camera_set, inline=True)
                if self.rig_version() != self._version:
                    self._version = self.rig_version()
                    self.forget_templates()
            except Exception as e:  # a callback's bug must not end every link's wake-up
                self.report_drop("internal_error", f"hand-off set loop: {type(e).__name__}: {e}")
            finally:
                self._after_handover()
                self._python_since = None

    def _after_handover(self) -> None:
        """(the loop's thread, the hand-over lock released) The launched sets' records (counters, a
        ROS copy, the housekeeping due after a set: none of it holds up another thread's offer), then
        the set this thread reserved the pooling worker for (the worker stays busy until it is pooled)."""
        launched, self._launched = self._launched, []
        job, self._inline_job = self._inline_job, None
        for rec in launched:
            self._guarded(self.on_launched, rec)
        self._guarded(job)

    def _guarded(self, call, *args) -> None:
        if call is None:
            return
        try:
            call(*args)
        except Exception as e:  # a callback's bug must not end every link's wake-up
            self.report_drop("internal_error", f"hand-off set loop: {type(e).__name__}: {e}")

    @property
    def busy_since(self) -> float | None:
        """For the watchdog: since when the thread handles what the loop handed to Python, or runs a
        set's launch in the core (a GPU wait that never ends is a stall too); None while it waits."""
        python, launch = self._python_since, self.loop.launching_since if self.loop.handle else None
        return python if launch is None else launch if python is None else min(python, launch)

    @property
    def thread_ident(self) -> int | None:
        thread = self.thread
        return thread.ident if thread is not None else None

    def stop(self, timeout: float = 2.0) -> None:
        """The thread ends (joined); ``start`` may run it again."""
        self._stopping = True
        self.loop.wake()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout)
        self.thread = None

    def close(self) -> None:
        self.stop()
        self.loop.shutdown()
        self.loop.close()

    # --- the two ways in ---------------------------------------------------------------------------
    def on_ros_copy(self, msg, arrival: float) -> None:
        """A ROS copy (executor thread): taken when its datagram did not come first."""
        if self.loop.claim(int(msg.ring_id), int(msg.sequence), "dds"):
            self._take(msg, None, arrival)

    def signalled(self, msg) -> bool:
        """This ROS copy's datagram came first."""
        return self.loop.seen(int(msg.ring_id), int(msg.sequence)) == "signal"

    def _on_record(self, rec) -> None:
        kind = rec.head.kind
        if kind == REC_DROP and rec.head.token == DROP_BY_INTAKE:
            reason, _, detail = rec.data.partition(b"\0")
            self.report_drop(reason.decode(), detail.decode(errors="replace"))
        elif kind == REC_LAUNCHED:
            if threading.current_thread() is self.thread:
                self._launched.append(rec)
            elif self.on_launched is not None:
                self.on_launched(rec)
        elif kind == REC_RAW:
            self.raw += 1
            self._on_raw(rec.data, rec.head.link, rec.head.first_arrival)
        elif kind == REC_GAP:
            self.lost += rec.head.lost
            link = self._links.get(rec.head.link)
            if link is not None:
                link.on_gap(rec.head.ring_id, rec.head.lost)
        elif kind == REC_CLOSED:
            link = self._links.pop(rec.head.link, None)
            if link is not None:
                link.closed()

    def _on_raw(self, data: bytes, link: int, arrival: float) -> None:
        from rclpy.serialization import deserialize_message

        try:
            msg = deserialize_message(data, self.msg_type)
        except Exception as e:  # the producer is same-user: a bug, say it
            self.report_drop("bad_handoff", f"unreadable signal datagram: {type(e).__name__}: {e}")
            return
        self.loop.sequence(link, int(msg.ring_id), int(msg.sequence))
        if msg.camera not in self.cameras or msg.stream not in STREAMS:
            return  # another consumer's tensor on the same ring
        if self.loop.claim(int(msg.ring_id), int(msg.sequence), "signal"):
            self._take(msg, data, arrival)

    def _take(self, msg, data: bytes | None, arrival: float) -> None:
        """An announcement checked in full (the Python twin's checks); its datagram's bytes, when
        it came as one, become its stream's template."""
        camera, stream = msg.camera, msg.stream
        stamp_ns = stamp_to_ns(msg.header.stamp)
        try:
            self.checks.stamp(stamp_ns)
            dtype = self.checks.message(msg)
            payload = self.checks.open(msg)
        except TensorError as e:
            self.report_drop(e.reason, f"{camera}/{stream} (hand-off): {e.detail}")
            return
        if data is not None:
            self._learn(msg, data, dtype)
        with self.handover:
            for camera_set in self.sync.add(camera, stream, stamp_ns, payload, arrival):
                self._deliver(camera_set, inline=data is not None)

    def _learn(self, msg, data: bytes, dtype) -> None:
        key = (int(msg.ring_id), msg.camera, msg.stream)
        with self._lock:
            if key in self._learnt:
                return
            self._learnt.add(key)
        try:
            t = CdrTemplate(msg, data=data)
            name = CODE_NAMES[int(msg.dtype)]
            tid = self.loop.learn(t, key[0], self.cameras.index(msg.camera), STREAMS.index(msg.stream), name)
        except (TemplateError, ValueError, KeyError):
            return  # this stream's datagrams stay raw: read and checked here, as the twin does
        with self._lock:
            self._templates[tid] = (t, key[0])

    # --- sets --------------------------------------------------------------------------------------
    def _open(self, member):
        """The payload of a member the loop took (checked there): its tensor opened."""
        entry = self._templates.get(member.template_id)
        if entry is None:
            return Unopened("handoff_refused", "its template was forgotten while its set formed")
        msg = entry[0].message_with(member.values.as_tuple())
        try:
            return self.checks.open(msg)
        except TensorError as e:
            return Unopened(e.reason, f"{msg.camera}/{msg.stream} (hand-off): {e.detail}")

    def _deliver(self, camera_set, inline: bool) -> None:
        """(``handover`` held) ``inline``: pooled in this thread when the pooling thread is idle, and
        only in the loop's (a set the executor's own offer drained goes to the pooling thread, as the
        Python path's), once the loop's thread released the lock."""
        inline = inline and threading.current_thread() is self.thread and self._inline_job is None
        for streams in camera_set.frames.values():
            for _, payload in streams.values():
                if isinstance(payload, Unopened):
                    self.report_drop(payload.reason, f"{payload.detail}; set not published")
                    return
        job = self.deliver(camera_set, inline)
        if inline and job is not None:
            self._inline_job = job
