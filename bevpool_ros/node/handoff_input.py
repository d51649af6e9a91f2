"""``input.handoff``: camera tensors another process left on this GPU, taken where they are.

Per camera and stream the node subscribes to bevpool_msgs/TensorHandoff (``input.handoff_topic``,
written by handoff.camera_publisher.CameraHandoffPublisher). Each announcement is checked like a
CameraTensor (stamp, dtype, shape and size against the rig, layout), then opened: the producer's
ring is mapped once (its descriptors over its Unix socket, same user only: the producer's peer
check refuses others) and the tensor becomes a device view that joins the synchroniser as that
camera's payload, exactly where a CameraTensor's array would. The backend reads it in place
(backends/gpu/device_inputs.py; the cpu backend downloads it). A tensor whose slot the producer
claimed again before it was read is dropped (``handoff_overwritten``), at the announcement and
again after the pooling read it (the ring's seqlock).

Wake-up: once a ring is mapped, the node also connects to the producer's signal socket and
takes each announcement from whichever arrives first, the Unix-socket datagram or the ROS
message (handoff/announcements.py); while that link loses nothing, DDS itself drops the ring's
ROS copies for this node (a content filter). /diagnostics ``input_handoff`` says how many
arrived first by each way.

A producer that restarts makes a new ring (new ring id, usually a new socket): the next
announcement maps it; rings no announcement named for a while are unmapped. A node that
restarts maps the producer's ring again on its first announcement.
"""
from __future__ import annotations

import functools
import math
import threading
import time
from typing import Callable

import numpy as np

from ..handoff.camera_publisher import boot_id
from ..handoff.ring import RING_IDLE_S  # the node also waits 2 sync timeouts
from ..io.tensor_codec import CODE_NAMES, TensorError
from ..logtext import shown
from .configure import STREAMS

MODES = ("none", "auto", "only")  # not on/off: YAML reads those as booleans
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
          "float8_e4m3": np.dtype(np.uint8)}
# A ROS copy DDS did not filter out (a lossy link, a middleware without filters) of an announcement
# its datagram already delivered waits this long at most for the pooling thread to finish its set:
# the executor sleeping meanwhile takes no further copies, each of which would hold the GIL that
# thread needs between its driver calls (see handoff/announcements.py).
DDS_COPY_WAIT_S = 0.02


def handoff_topics(cfg: dict, cameras) -> dict[tuple[str, str], str]:
    """(camera, stream) -> TensorHandoff topic (relative); none with input.handoff none."""
    if cfg["input.handoff"] == "none":
        return {}
    return {(cam, stream): cfg["input.handoff_topic"].format(camera=cam, stream=stream)
            for cam in cameras for stream in STREAMS}


def check_announcement(msg, camera: str, stream: str, rig, cfg: dict, boot: str) -> np.dtype:
    """The announced tensor's dtype, or TensorError (a drop reason) when it cannot be this
    camera's ``stream`` of ``rig`` on this host. Reads the message only."""
    if msg.camera != camera or msg.stream != stream:
        raise TensorError("bad_handoff", f"announces {shown(msg.camera)}/{shown(msg.stream)} on "
                          f"the topic of {camera}/{stream}")
    if msg.boot_id != boot:
        raise TensorError("handoff_remote", f"from another host (boot id {shown(msg.boot_id)}): "
                          "its ring cannot be mapped here; the producer must publish CameraTensor")
    name = CODE_NAMES.get(int(msg.dtype))
    dtype = DTYPES.get(name)
    if dtype is None:
        raise TensorError("bad_dtype", f"hand-off dtype {name or msg.dtype} is not float32, "
                          "float16 or float8_e4m3")
    shape = tuple(int(s) for s in msg.shape)
    _, D, H, W = rig.depth_shape
    if stream == "depth":
        if msg.layout not in ("DHW", ""):
            raise TensorError("bad_layout", f"depth layout {shown(msg.layout)} (expected 'DHW' "
                              "or empty)")
        want = (D, H, W)
    else:
        layout = msg.layout or cfg["input.feature_layout"]
        if layout != "HWC":  # a transposed view cannot be a kernel input: no copy is made here
            raise TensorError("bad_layout", f"hand-off feature layout {shown(layout)}: only HWC "
                              "is read in place (publish CHW as a CameraTensor)")
        want = (H, W, rig.channels)
    if shape != want:
        raise TensorError("bad_shape", f"{stream} shape {shape} != expected {want}")
    if int(msg.nbytes) != math.prod(shape) * dtype.itemsize:
        raise TensorError("bad_size", f"nbytes {msg.nbytes} != shape {list(shape)} x "
                          f"{dtype.itemsize}")
    scale = float(msg.scale)
    if not (scale > 0 and math.isfinite(scale) and math.frexp(scale)[0] == 0.5):
        raise TensorError("bad_handoff", f"scale {scale} is not a positive power of two")
    if scale != 1.0 and dtype != DTYPES["float8_e4m3"]:
        raise TensorError("bad_handoff", f"scale {scale} on a {name} tensor (E4M3 codes only)")
    return dtype


class HandoffInputs:
    """The hand-off subscriptions of one configured node, and the mapped rings.

    ``node``: the ROS node; ``cfg``, ``cameras``, ``calibration``, ``report``: what configure
    made; ``check_stamp(stamp_ns)``: the inputs' stamp rule; ``wait_for_worker(timeout_s)``:
    waits (bounded) while the pooling thread pools a set."""

    def __init__(self, node, *, cfg: dict, cameras: tuple, calibration, report, check_stamp: Callable,
                 wait_for_worker: Callable, sync_args: tuple = (), deliver: Callable | None = None,
                 handover=None):
        """``sync_args``, ``deliver(camera_set, inline)``, ``handover``: the synchroniser's policy, where
        its sets go and the lock they go under, for the hand-off core's set loop (``intake``), made where
        the core loads."""
        self.node = node
        self.cfg, self.cameras, self.calibration, self.report = cfg, cameras, calibration, report
        self.check_stamp, self.wait_for_worker = check_stamp, wait_for_worker
        self.boot = boot_id()
        self.reader = None
        self.unavailable = ""  # why this node cannot map rings (no GPU, no cuda-python)
        self.subs: list = []
        self._last_named: dict[str, float] = {}  # socket path -> monotonic time last announced
        self.links = None                        # handoff.announcements.AnnouncementLinks
        self._lock = threading.Lock()            # the executor and the signal threads
        self.intake = self._set_loop(sync_args, deliver, handover) if deliver is not None else None
        self._watched: set[int] = set()  # ring ids the set loop checks

    def _set_loop(self, sync_args: tuple, deliver: Callable, handover):
        """The core's set loop (node/handoff_sets.py) where the core loads, else None: the Python path."""
        from ..handoff.native.core import use_native

        lib = use_native()
        if lib is None:
            return None
        from bevpool_msgs.msg import TensorHandoff

        from .handoff_sets import Checks, SetLoopIntake

        checks = Checks(self.check_stamp, self.checked, self.open)
        return SetLoopIntake(lib, TensorHandoff, cameras=self.cameras, sync_args=sync_args,
                             max_future_s=self.cfg["sync.max_future_s"], checks=checks,
                             report_drop=self.report.drop, sync_dropped=self.report.sync_dropped, deliver=deliver,
                             handover=handover,
                             rig_version=lambda: self.calibration.version,
                             clock_ns=lambda: self.node.get_clock().now().nanoseconds)

    def checked(self, msg) -> np.dtype:
        """``msg`` checked against the rig, on the topic its camera and stream name (a datagram)."""
        return check_announcement(msg, msg.camera, msg.stream, self.calibration.rig, self.cfg, self.boot)

    @property
    def mode(self) -> str:
        return self.cfg["input.handoff"]

    def open_reader(self) -> None:
        """The device reader (once); without it, announcements are dropped ``handoff_unavailable``."""
        if self.reader is not None or self.unavailable:
            return
        try:
            from ..handoff.reader import HandoffReader

            self.reader = HandoffReader(0)
            if self.intake is not None:
                self.reader.unmapping.append(self._unwatch)
        except Exception as e:  # no driver, no GPU, no cuda-python: one reason, said once
            self.unavailable = f"{type(e).__name__}: {e}"
            self.node.get_logger().warning(f"input hand-off announcements cannot be opened on "
                                           f"this machine ({self.unavailable}); they are dropped "
                                           "(handoff_unavailable)")

    def subscribe(self, qos, on_payload) -> None:
        """``on_payload(camera, stream, stamp_ns, view, arrival)`` gets every accepted tensor."""
        from bevpool_msgs.msg import TensorHandoff

        from ..handoff.announcements import AnnouncementLinks

        node = self.node
        self.links = AnnouncementLinks(
            node, TensorHandoff, functools.partial(self.on_announcement, on_payload=on_payload),
            accepts=lambda m: m.camera in self.cameras and m.stream in STREAMS,
            on_bad=lambda detail: self.report.drop("bad_handoff", detail),
            one_at_a_time=False,  # its own locks; a delivery may pool a set (reserve_or_submit)
            defer=node.after_set,  # templates learnt after a set, not while the first arrives
            intake=self.intake)
        if self.intake is not None:
            self.intake.start()
        for (cam, stream), topic in handoff_topics(self.cfg, self.cameras).items():
            events = self.report.subscription_events(topic)
            sub = node.create_subscription(TensorHandoff, topic, lambda m: None, qos,
                                           event_callbacks=events)
            sub.callback = functools.partial(self.on_ros_copy, subscription=sub, camera=cam,
                                             stream=stream)
            self.subs.append(sub)

    def unsubscribe(self) -> None:
        for sub in self.subs:
            self.node.destroy_subscription(sub)
        self.subs = []
        if self.links is not None:  # a datagram still arriving joins nothing
            self.links.close()
            self.links = None
        if self.intake is not None:
            self.intake.stop()

    def on_ros_copy(self, msg, subscription, camera: str, stream: str) -> None:
        """A TensorHandoff from DDS (executor thread), on the topic of ``camera``/``stream``."""
        links = self.links
        if links is None:
            return
        # Only a copy to drop waits: a first copy (no link, or sent before its ring's link was
        # up) is delivered at once. Held back, it let the next set's datagrams complete their set
        # first and its own be superseded: a set lost at 100 Hz as the node linked its first ring.
        if links.signalled(msg):
            self.wait_for_worker(DDS_COPY_WAIT_S)  # the executor sleeps, GIL released
        if msg.camera != camera or msg.stream != stream:  # judged before any copy is matched
            self.report.drop("bad_handoff", f"{camera}/{stream} (hand-off): announces "
                             f"{shown(msg.camera)}/{shown(msg.stream)} on the topic of {camera}/{stream}")
            return
        links.on_message(msg, subscription)

    def on_announcement(self, msg, way: str, arrival: float, on_payload) -> None:
        """The first copy of one announcement (either way): checked, opened, handed on."""
        from ..io.bev_message import stamp_to_ns

        camera, stream = msg.camera, msg.stream
        with self._lock:
            stamp_ns = stamp_to_ns(msg.header.stamp)
            try:
                self.check_stamp(stamp_ns)
                check_announcement(msg, camera, stream, self.calibration.rig, self.cfg, self.boot)
                view = self.open(msg)
            except TensorError as e:
                self.report.drop(e.reason, f"{camera}/{stream} (hand-off): {e.detail}")
                return
        if self.links is not None:
            self.links.listen(msg.socket_path)
        # a set the signal thread completes is pooled right there when the pooling thread is idle
        on_payload(camera, stream, stamp_ns, view, arrival, inline=way == "signal")

    def open(self, msg):
        """The announced tensor as a device view (HandoffView), not waited on: the backend's
        stream waits for the producer's event."""
        from ..handoff.fdpass import FdPassError
        from ..handoff.reader import HandoffError, HandoffOverwritten
        from ..handoff.ring import RingError

        self.open_reader()
        if self.reader is None:
            raise TensorError("handoff_unavailable", self.unavailable)
        self._last_named[msg.socket_path] = time.monotonic()
        try:
            view = self.reader.open(msg, wait=False)
        except HandoffOverwritten as e:
            raise TensorError("handoff_overwritten", str(e)) from None
        except (HandoffError, FdPassError, RingError, OSError, RuntimeError) as e:
            self._last_named.pop(msg.socket_path, None)  # nothing kept: retried on the next one
            raise TensorError("handoff_refused", f"{type(e).__name__}: {e}") from None
        if self.intake is not None and int(msg.ring_id) not in self._watched:
            self._watch(msg.socket_path)  # the set loop checks this ring's slots from now on
        return view

    def _watch(self, socket_path: str) -> None:
        ring = self.reader.ring(socket_path)
        if ring is not None:
            self.intake.watch(ring.ring_id, ring.control.block.words.ctypes.data, ring.ring_size)
            self._watched.add(ring.ring_id)

    def _unwatch(self, ring) -> None:
        """(reader.unmapping) Before a ring is unmapped: the loop lets it go."""
        self._watched.discard(ring.ring_id)
        self.intake.forget_ring(ring.ring_id)

    def named(self, socket_paths) -> None:
        """These producers' rings were read just now by the core's launcher (no announcement of
        theirs reached ``open``): not idle."""
        now = time.monotonic()
        with self._lock:
            for path in socket_paths:
                self._last_named[path] = now

    def sweep(self) -> None:
        """Unmap the rings of producers that went away (none named them for a while)."""
        if self.reader is None:
            return
        idle = max(RING_IDLE_S, 2 * self.cfg["sync.camera_timeout_s"])
        now = time.monotonic()
        gone = []
        with self._lock:
            for path in self.reader.socket_paths:
                if now - self._last_named.get(path, 0.0) > idle:
                    self.reader.forget(path)
                    self._last_named.pop(path, None)
                    gone.append(path)
        if self.links is not None:
            for path in gone:
                self.links.forget(path)

    def state(self) -> str:
        """For /diagnostics: the mode, and what this node can do with it."""
        if self.mode == "none":
            return "none"
        if self.unavailable:
            return f"{self.mode}, unavailable: {self.unavailable}"[:200]
        rings = len(self.reader.socket_paths) if self.reader is not None else 0
        links = self.links
        if links is None:
            return f"{self.mode}, {rings} producer ring(s) mapped, not subscribed"
        lost = f", {links.lost} datagram(s) lost" if links.lost else ""
        filtered = (f"ROS copies filtered on {links.filtered} topic(s)" if not links.filter_error
                    else "ROS copies not filtered")
        if self.intake is not None:
            raw, c = self.intake.raw, self.intake.loop.counts()
            taken = c.get("intake_signal_first", 0) + c.get("intake_signal_copies_ignored", 0)
            read = f"set loop in the core, datagrams read by template {taken - raw} of {taken}"
        else:
            t = links.templates
            read = f"datagrams read by template {t.hits} of {t.hits + t.misses}"
        return (f"{self.mode}, {rings} producer ring(s) mapped, {links.connected} signal link(s), "
                f"first arrival: signal {links.first_by['signal']}, dds {links.first_by['dds']}"
                f"{lost}, {filtered}, {read}")[:240]

    def close(self) -> None:
        self.unsubscribe()
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        if self.intake is not None:
            self.intake.close()
            self.intake = None
