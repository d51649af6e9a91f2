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

Wake-up: once a ring is mapped, the node also connects to the producer's signal socket
(handoff/signal.py) and takes each announcement from whichever arrives first, the Unix-socket
datagram or the ROS message; the second copy is ignored (same ring, same sequence). /diagnostics
``input_handoff`` says how many arrived first by each way.

A producer that restarts makes a new ring (new ring id, usually a new socket): the next
announcement maps it; rings no announcement named for a while are unmapped. A node that
restarts maps the producer's ring again on its first announcement.
"""
from __future__ import annotations

import functools
import math
import threading
import time
from collections import Counter, OrderedDict

import numpy as np

from ..handoff.camera_publisher import boot_id
from ..io.tensor_codec import CODE_NAMES, TensorError
from ..logtext import shown
from .configure import STREAMS

MODES = ("none", "auto", "only")  # not on/off: YAML reads those as booleans
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
          "float8_e4m3": np.dtype(np.uint8)}
RING_IDLE_S = 5.0  # a ring no announcement named for this long (and > 2 sync timeouts) is unmapped
SEEN_KEPT = 4096   # announcements remembered to ignore their second copy (socket or DDS)
# A ROS copy waits this long at most for the pooling thread to finish its set. The set was usually
# completed by the signal datagrams, and its 12 ROS copies arrive while it is pooled: taken then,
# each holds the GIL the pooling thread needs between its driver calls (on the H200 host the
# executor took ~9 of them during each set's pooling stage, 3.6 ms against 0.6 ms alone).
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
    """The hand-off subscriptions of one configured node, and the mapped rings."""

    def __init__(self, node):
        self.node = node
        self.boot = boot_id()
        self.reader = None
        self.unavailable = ""  # why this node cannot map rings (no GPU, no cuda-python)
        self.subs: list = []
        self._last_named: dict[str, float] = {}  # socket path -> monotonic time last announced
        self._signals: dict = {}                 # socket path -> signal.SignalClient
        self._seen: OrderedDict = OrderedDict()  # (socket path, ring id, sequence) taken
        self.first_by: Counter = Counter()       # which way each announcement arrived first
        self._on_payload = None
        self._lock = threading.Lock()            # the executor and the signal threads

    @property
    def mode(self) -> str:
        return self.node.cfg["input.handoff"]

    def open_reader(self) -> None:
        """The device reader (once); without it, announcements are dropped ``handoff_unavailable``."""
        if self.reader is not None or self.unavailable:
            return
        try:
            from ..handoff.reader import HandoffReader

            self.reader = HandoffReader(0)
        except Exception as e:  # no driver, no GPU, no cuda-python: one reason, said once
            self.unavailable = f"{type(e).__name__}: {e}"
            self.node.get_logger().warning(f"input hand-off announcements cannot be opened on "
                                           f"this machine ({self.unavailable}); they are dropped "
                                           "(handoff_unavailable)")

    def subscribe(self, qos, on_payload) -> None:
        """``on_payload(camera, stream, stamp_ns, view, arrival)`` gets every accepted tensor."""
        from bevpool_msgs.msg import TensorHandoff

        node = self.node
        self._on_payload = on_payload
        for (cam, stream), topic in handoff_topics(node.cfg, node.cameras).items():
            cb = functools.partial(self.on_announcement, camera=cam, stream=stream,
                                   on_payload=on_payload)
            events = node.report.subscription_events(topic)
            self.subs.append(node.create_subscription(TensorHandoff, topic, cb, qos,
                                                      event_callbacks=events))

    def unsubscribe(self) -> None:
        for sub in self.subs:
            self.node.destroy_subscription(sub)
        self.subs = []
        self._on_payload = None  # a datagram still arriving joins nothing
        with self._lock:
            clients, self._signals = list(self._signals.values()), {}
        for client in clients:  # outside the lock: their threads may be waiting for it
            if client is not None:
                client.close()

    def on_announcement(self, msg, camera: str, stream: str, on_payload, way: str = "dds") -> None:
        from ..io.bev_message import stamp_to_ns

        now = time.perf_counter()  # its arrival, before any wait
        node = self.node
        if way == "dds" and self.reader is not None and node.worker is not None:  # rings mapped here
            node.worker.wait_until_idle(DDS_COPY_WAIT_S)  # the executor sleeps, GIL released
        with self._lock:
            key = (msg.socket_path, int(msg.ring_id), int(msg.sequence))
            first = self._seen.get(key)
            if first is not None and first != way:
                return  # its copy by the other way came first
            if first is None:  # the same way twice is no copy: checked (and counted) again
                self._seen[key] = way
                self.first_by[way] += 1
                while len(self._seen) > SEEN_KEPT:
                    self._seen.popitem(last=False)
            stamp_ns = stamp_to_ns(msg.header.stamp)
            try:
                node.inputs.check_stamp(stamp_ns)
                check_announcement(msg, camera, stream, node.calibration.rig, node.cfg, self.boot)
                view = self.open(msg)
            except TensorError as e:
                node.report.drop(e.reason, f"{camera}/{stream} (hand-off): {e.detail}")
                return
            self._listen(msg.socket_path)
        on_payload(camera, stream, stamp_ns, view, now)

    def _listen(self, socket_path: str) -> None:
        """Connect to the signal socket of a ring just mapped (once; none: the ROS message only)."""
        if socket_path in self._signals:
            return
        from ..handoff.signal import SignalClient, signal_path

        try:
            self._signals[socket_path] = SignalClient(signal_path(socket_path), self._on_datagram)
        except OSError as e:  # an older producer without one: the ROS messages wake us
            self._signals[socket_path] = None
            self.node.get_logger().info(f"hand-off producer at {socket_path} has no signal "
                                        f"socket ({e}); woken by its ROS messages")

    def _on_datagram(self, data: bytes) -> None:
        """A signal-socket copy of an announcement (its own thread)."""
        from bevpool_msgs.msg import TensorHandoff
        from rclpy.serialization import deserialize_message

        on_payload = self._on_payload
        if on_payload is None:
            return
        try:
            msg = deserialize_message(data, TensorHandoff)
        except Exception as e:  # not one of ours: the producer is same-user, so a bug; say it
            self.node.report.drop("bad_handoff", f"unreadable signal datagram: {e}")
            return
        if msg.camera not in self.node.cameras or msg.stream not in STREAMS:
            self.node.report.drop("bad_handoff", f"signal datagram for {shown(msg.camera)}/"
                                  f"{shown(msg.stream)}, not a camera/stream of this rig")
            return
        self.on_announcement(msg, msg.camera, msg.stream, on_payload, way="signal")

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
            return self.reader.open(msg, wait=False)
        except HandoffOverwritten as e:
            raise TensorError("handoff_overwritten", str(e)) from None
        except (HandoffError, FdPassError, RingError, OSError, RuntimeError) as e:
            self._last_named.pop(msg.socket_path, None)  # nothing kept: retried on the next one
            raise TensorError("handoff_refused", f"{type(e).__name__}: {e}") from None

    def sweep(self) -> None:
        """Unmap the rings of producers that went away (none named them for a while)."""
        if self.reader is None:
            return
        idle = max(RING_IDLE_S, 2 * self.node.cfg["sync.camera_timeout_s"])
        now = time.monotonic()
        gone = []
        with self._lock:
            for path in self.reader.socket_paths:
                if now - self._last_named.get(path, 0.0) > idle:
                    self.reader.forget(path)
                    self._last_named.pop(path, None)
                    gone.append(self._signals.pop(path, None))
        for client in gone:  # outside the lock: their threads may be waiting for it
            if client is not None:
                client.close()

    def state(self) -> str:
        """For /diagnostics: the mode, and what this node can do with it."""
        if self.mode == "none":
            return "none"
        if self.unavailable:
            return f"{self.mode}, unavailable: {self.unavailable}"[:200]
        rings = len(self.reader.socket_paths) if self.reader is not None else 0
        links = sum(1 for c in list(self._signals.values()) if c is not None and c.connected)
        return (f"{self.mode}, {rings} producer ring(s) mapped, {links} signal link(s), first "
                f"arrival: signal {self.first_by['signal']}, dds {self.first_by['dds']}")

    def close(self) -> None:
        self.unsubscribe()
        if self.reader is not None:
            self.reader.close()
            self.reader = None
