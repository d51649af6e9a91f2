"""The upstream node's side of the input hand-off, over ROS: camera tensors in, announcements out.

    pub = CameraHandoffPublisher(node, rig)            # one ring for every camera and stream
    pub.publish("CAM_FRONT", "depth", depth_tensor, stamp_ns, cuda_stream=torch_stream)
    pub.publish("CAM_FRONT", "feat", feat_tensor, stamp_ns, layout="HWC")

Each ``publish`` copies the tensor into the next slot of the ring on the producer's stream
(camera_producer.CameraTensorProducer) and announces it as bevpool_msgs/TensorHandoff on
``cameras/{camera}/{stream}_handoff``: a message of a few hundred bytes, whatever the tensor's
size. The same bytes go first to every same-host consumer connected to the ring's signal socket
(signal.py: a Unix-socket datagram wakes the consumer sooner than a DDS hop). Where the hand-off
cannot work, the same call publishes the tensor as a CameraTensor on ``cameras/{camera}/{stream}``
instead (downloaded once), after ONE warning saying why:
  * this GPU exports no POSIX-fd memory or no interprocess events (vmm.unsupported_reason), or
    there is no GPU at all;
  * the announcements have subscribers, but none opened the ring within ``connect_timeout_s``:
    they run on another host (or cannot map it);
  * nobody subscribes to the announcements while the CameraTensor topic has subscribers
    (a bevpool_node with ``input.handoff: none``); hand-off resumes once someone subscribes.
``mode="on"`` never falls back (raises HandoffUnsupported); ``mode="off"`` always publishes
CameraTensor.
"""
from __future__ import annotations

import logging
import time
from collections import OrderedDict

import numpy as np

from ..io.tensor_codec import make_camera_tensor
from .cdr_template import TemplateWriter
from .producer import Written
from .vmm import HandoffUnsupported

log = logging.getLogger(__name__)

HANDOFF_TOPIC = "cameras/{camera}/{stream}_handoff"
TENSOR_TOPIC = "cameras/{camera}/{stream}"
STREAMS = ("depth", "feat")
MODES = ("auto", "on", "off")
E4M3 = np.dtype(np.uint8)


def boot_id() -> str:
    """This host's boot id: equal in two processes only when they run on the same boot of the
    same machine (containers of one host share it)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def ring_for_rig(rig, itemsize: int = 4, sets: int = 3) -> tuple[int, int]:
    """(slot_bytes, ring_size) for ``sets`` camera sets of ``rig`` in flight: one slot per tensor."""
    n, d, h, w = rig.depth_shape
    slot = max(d * h * w, h * w * rig.channels) * int(itemsize)
    return slot, 2 * n * int(sets)


def announcement(handoff, camera: str, stream: str, layout: str, stamp_ns: int, frame_id: str,
                 boot: str):
    """The bevpool_msgs/TensorHandoff of ``handoff`` (camera_producer.TensorHandoff)."""
    from bevpool_msgs.msg import TensorHandoff

    from ..io.bev_message import ns_to_time

    m = TensorHandoff()
    m.header.stamp = ns_to_time(int(stamp_ns))
    m.header.frame_id = frame_id
    m.camera, m.stream, m.layout = camera, stream, layout
    m.socket_path = handoff.socket_path
    m.ring_id, m.ring_size = handoff.ring_id, handoff.ring_size
    m.slot, m.sequence = handoff.slot, handoff.sequence
    m.offset, m.nbytes, m.dtype = handoff.offset, handoff.nbytes, handoff.dtype
    m.shape = [int(s) for s in handoff.shape]
    m.scale = float(handoff.scale)
    m.event_handle = np.frombuffer(handoff.event_handle, np.uint8)
    m.device_ordinal = handoff.device_ordinal
    m.device_uuid = np.frombuffer(handoff.device_uuid, np.uint8)
    m.boot_id = boot
    return m


def host_tensor(tensor, scale: float) -> tuple[np.ndarray, str | None]:
    """(host array, CameraTensor dtype) of a tensor the hand-off could not take: E4M3 codes
    with a scale other than 1 are decoded (CameraTensor carries no scale)."""
    from ..device.device_payloads import download

    arr = download(tensor, "tensor")
    if arr.dtype != E4M3:
        return arr, None
    if scale == 1.0:
        return arr, "float8_e4m3"
    from ..fp8 import decode

    return decode(arr, np.float32) / np.float32(scale), None


class CameraHandoffPublisher:
    def __init__(self, node, rig=None, *, cameras=None, slot_bytes: int | None = None,
                 ring_size: int | None = None, device: int = 0, qos=None, mode: str = "auto",
                 handoff_topic: str = HANDOFF_TOPIC, tensor_topic: str = TENSOR_TOPIC,
                 connect_timeout_s: float = 3.0, producer=None, native: bool | None = None):
        """``rig`` sizes the ring (ring_for_rig) and names the cameras; or give ``cameras``,
        ``slot_bytes`` and ``ring_size``. ``producer``: a CameraTensorProducer to use (tests).
        ``native``: each set's copies and datagrams in the hand-off core (True, False, or None: as
        BEVPOOL_NATIVE says; docs/gpu_handoff.md)."""
        from bevpool_msgs.msg import CameraTensor, TensorHandoff

        from ..ros.qos import make_qos

        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
        self.node, self.mode = node, mode
        self.cameras = tuple(cameras or [c.name for c in rig.cameras])
        qos = qos or make_qos("reliable", 5)
        self.boot = boot_id()
        self.connect_timeout_s = float(connect_timeout_s)
        self.fallback_reason = "input hand-off off (mode off)" if mode == "off" else ""
        self.warned = False
        self.handed_off = self.sent_tensors = 0
        self._first_announced: float | None = None
        self.producer = producer
        if mode != "off" and producer is None:
            self.producer = self._make_producer(rig, slot_bytes, ring_size, device, native)
        self.handoff_pubs, self.tensor_pubs = {}, {}
        self._announcements = TemplateWriter(TensorHandoff)
        self._native_ids: OrderedDict = OrderedDict()  # a tensor stream's fixed fields -> its template in the core
        for cam in self.cameras:
            for stream in STREAMS:
                key = (cam, stream)
                if self.producer is not None and self.producer.available:
                    self.handoff_pubs[key] = node.create_publisher(
                        TensorHandoff, handoff_topic.format(camera=cam, stream=stream), qos)
                self.tensor_pubs[key] = node.create_publisher(
                    CameraTensor, tensor_topic.format(camera=cam, stream=stream), qos)
        if self.fallback_reason:
            self._warn_once()

    def _make_producer(self, rig, slot_bytes, ring_size, device, native):
        from ..errors import BackendUnavailable
        from ..logtext import captured_log
        from .camera_producer import CameraTensorProducer

        if slot_bytes is None or ring_size is None:
            slot, size = ring_for_rig(rig)
            slot_bytes, ring_size = slot_bytes or slot, ring_size or size
        try:  # its own warning is said once below, through ROS
            with captured_log("bevpool_ros.handoff.camera_producer"):
                producer = CameraTensorProducer(slot_bytes, ring_size, device, native=native)
        except (BackendUnavailable, ImportError, OSError, RuntimeError) as e:  # no GPU, no driver
            if self.mode == "on":
                raise HandoffUnsupported(f"input hand-off impossible here: {e}") from None
            self.fallback_reason = f"no usable GPU ({type(e).__name__}: {e})"
            return None
        if not producer.available:
            if self.mode == "on":
                producer.close()
                raise HandoffUnsupported(producer.fallback_reason)
            self.fallback_reason = producer.fallback_reason
        return producer

    # --- per tensor -------------------------------------------------------------------------------
    @property
    def handing_off(self) -> bool:
        """True while tensors go through the ring (False once fallen back for good)."""
        return bool(self.handoff_pubs) and not self.fallback_reason

    def publish(self, camera: str, stream: str, tensor, stamp_ns: int, *, layout: str = "",
                frame_id: str = "", cuda_stream=None, scale: float = 1.0) -> str:
        """Hand ``tensor`` over (or publish it); returns "handoff" or "camera_tensor"."""
        return self.publish_set([(camera, stream, tensor, layout, scale)], stamp_ns, frame_id=frame_id,
                                cuda_stream=cuda_stream)[0]

    def publish_set(self, tensors, stamp_ns: int, *, frame_id: str = "", cuda_stream=None) -> list[str]:
        """A camera set at once: ``tensors`` is [(camera, stream, tensor, layout, scale)]. Every
        copy into the ring is enqueued before any announcement goes out, so the set's GPU work is
        one burst: on a GPU that another process's networks share without MPS each separate burst
        waits for a time slice of its own (docs/gpu_sharing.md). Then each announcement goes as a
        datagram to the ring's linked consumers, then as a ROS message (the same bytes), CameraTensor
        fallbacks in their place. With the hand-off core the copies and the datagrams are one native
        call (``_hand_over_native``). Returns "handoff" or "camera_tensor" per tensor."""
        stamp_ns = int(stamp_ns)
        plan = []
        for camera, stream, tensor, layout, scale in tensors:
            key = (camera, stream)
            if key not in self.tensor_pubs:
                raise KeyError(f"{camera}/{stream}: not a camera/stream of this publisher "
                               f"({list(self.cameras)} x {STREAMS})")
            plan.append((key, layout, tensor, scale, self._use_handoff(key)))
        handed = [p for p in plan if p[4]]
        if handed:
            native = self.producer.ring.native is not None
            announced = iter((self._hand_over_native if native else self._hand_over)(
                handed, stamp_ns, frame_id, cuda_stream))
        ways = []
        for key, layout, tensor, scale, handoff in plan:
            if handoff:
                self.handoff_pubs[key].publish(next(announced))
                self.handed_off += 1
                ways.append("handoff")
            else:
                self._publish_tensor(key, layout, tensor, scale, stamp_ns, frame_id)
                ways.append("camera_tensor")
        return ways

    def _hand_over(self, handed, stamp_ns: int, frame_id: str, cuda_stream) -> list[bytes]:
        """The Python twin: each tensor copied into the ring, then each announcement written from
        its template and sent to the linked consumers; the announcements' bytes."""
        written = [(key, layout, self.producer.publish(tensor, stream=cuda_stream, scale=scale))
                   for key, layout, tensor, scale, _ in handed]
        out = []
        for key, layout, h in written:
            data = self._serialize(key, layout, frame_id, h, stamp_ns)
            self.producer.ring.announce(data)  # same-host consumers linked to the ring are woken first
            out.append(data)
        return out

    def _hand_over_native(self, handed, stamp_ns: int, frame_id: str, cuda_stream) -> list[bytes]:
        """The same in the core (native/ring.py): the set's claims, copies, event records, patched
        announcements and datagrams in one call, the GIL released."""
        ring = self.producer.ring
        items, tensors = [], []
        for key, layout, tensor, scale, _ in handed:
            t, stream = self.producer.prepare(tensor, cuda_stream)
            items.append((t.ptr, t.nbytes, int(stream), self._native_template(key, layout, frame_id, t, scale),
                          float(scale)))
            tensors.append((key, layout, t, scale))
        out = []
        for (slot, seq, data), (key, layout, t, scale) in zip(ring.native.publish_set(items, stamp_ns), tensors):
            if data is None:  # no template for this one: rclpy serialises it
                h = self.producer.describe(t, Written(slot, seq, ring.event_handles[slot]), scale)
                data = self._serialize(key, layout, frame_id, h, stamp_ns)
                ring.announce(data)
            out.append(data)
        return out

    def _native_template(self, key, layout: str, frame_id: str, t, scale: float) -> int:
        """The core's template of this tensor stream's announcements (-1: none can be made)."""
        stream_key = (key, layout, frame_id, t.nbytes, t.dtype.str, tuple(t.shape))
        tid = self._native_ids.get(stream_key)
        if tid is None:
            ring = self.producer.ring
            h = self.producer.describe(t, Written(0, 0, ring.event_handles[0]), scale)  # the fixed fields
            camera, stream = key
            made = self._announcements.template(
                self._template_key(key, layout, frame_id, h),
                lambda: announcement(h, camera, stream, layout, 0, frame_id, self.boot))
            tid = self._native_ids[stream_key] = ring.native.templates.add(made) if made is not None else -1
            if len(self._native_ids) > TemplateWriter.KEPT:
                _, old = self._native_ids.popitem(last=False)
                if old >= 0:
                    ring.native.templates.remove(old)
        return tid

    @staticmethod
    def _template_key(key, layout: str, frame_id: str, h) -> tuple:
        """Everything an announcement holds but its stamp, slot, sequence, event handle and scale
        (a ring id names its socket, size and device)."""
        return (*key, layout, frame_id, h.ring_id, h.offset, h.nbytes, h.dtype, h.shape)

    def _serialize(self, key, layout: str, frame_id: str, h, stamp_ns: int) -> bytes:
        """The announcement's bytes from its template: only the stamp, slot, sequence, event handle
        and scale are written per tensor (cdr_template.py)."""
        camera, stream = key
        return self._announcements.serialize(
            self._template_key(key, layout, frame_id, h),
            lambda: announcement(h, camera, stream, layout, stamp_ns, frame_id, self.boot),
            (stamp_ns // 1_000_000_000, stamp_ns % 1_000_000_000, h.slot, h.sequence, h.event_handle,
             float(h.scale)))

    def _publish_tensor(self, key, layout: str, tensor, scale: float, stamp_ns: int, frame_id: str) -> None:
        from ..io.bev_message import ns_to_time

        arr, dtype = host_tensor(tensor, float(scale))
        msg = make_camera_tensor(arr, key[1], layout, dtype)
        msg.header.stamp = ns_to_time(int(stamp_ns))
        msg.header.frame_id = frame_id
        self.tensor_pubs[key].publish(msg)
        self.sent_tensors += 1

    def _use_handoff(self, key) -> bool:
        if not self.handing_off:
            return False
        if self.mode == "on":
            return True
        pub = self.handoff_pubs[key]
        if pub.get_subscription_count() == 0:
            # nobody takes announcements; a CameraTensor subscriber (input.handoff: none) does
            return self.tensor_pubs[key].get_subscription_count() == 0
        now = time.monotonic()
        if self._first_announced is None:
            self._first_announced = now
        elif (now - self._first_announced > self.connect_timeout_s
              and self.producer.ring.server.served == 0):
            self.fallback_reason = (f"the subscribers of {pub.topic_name} did not open the "
                                    f"hand-off ring in {self.connect_timeout_s:g} s: they run on "
                                    "another host or cannot map it")
            self._warn_once()
            return False
        return True

    def _warn_once(self) -> None:
        if not self.warned:
            self.warned = True
            self.node.get_logger().warning(
                f"input hand-off unavailable, publishing CameraTensor messages: {self.fallback_reason}")

    def close(self) -> None:
        for pub in (*self.handoff_pubs.values(), *self.tensor_pubs.values()):
            self.node.destroy_publisher(pub)
        self.handoff_pubs, self.tensor_pubs = {}, {}
        if self.producer is not None:
            self.producer.close()
            self.producer = None
