"""bevpool_node's input side: subscriptions (made on activate, gone on deactivate), the checks
every tensor passes before it may join a set, CameraInfo and TF calibration updates, and the
hand-over of complete sets to the pooling thread."""
from __future__ import annotations

import functools
import threading
import time
from typing import Callable

import numpy as np

from .. import fp8
from ..cameras.sync import CameraSet, CameraSetSynchronizer
from ..io.bev_message import stamp_to_ns
from ..io.tensor_codec import TensorError, inspect_header, to_float
from ..logtext import clip, shown
from ..rig import RigError
from ..ros.executor import executor_kind
from ..ros.housekeeping import HousekeepingTimer
from ..ros.qos import camera_info_qos, make_qos, quiet_events
from ..ros.subscription_thread import SubscriptionThread
from .configure import STREAMS, StartupError, tensor_topics
from .handoff_input import HandoffInputs
from .reader_renewal import RenewableReaders

DEPTH_LAYOUTS = ("DHW", "")           # empty: the producer does not say; DHW is assumed
DEPTH_MAX = 1.01                      # a distribution lies in [0, 1]; 1 % for float16/fp8 rounding
FEATURE_LAYOUTS = ("HWC", "CHW")      # empty: input.feature_layout


def _range_limit_code(dtype) -> int:
    """The largest bit pattern of ``dtype`` whose value is at most DEPTH_MAX."""
    if dtype == np.uint8:  # E4M3 codes: 0x38 is 1.0, 0x39 is 1.125
        codes = np.arange(0x80, dtype=np.uint8)
        return int(codes[fp8.decode(codes, np.float32) <= DEPTH_MAX].max())
    uint = np.dtype(f"u{np.dtype(dtype).itemsize}")
    code = int(np.array(DEPTH_MAX, dtype).view(uint))
    return code - 1 if float(np.array(code, uint).view(dtype)) > DEPTH_MAX else code


LIMIT_CODES = {np.dtype(t): _range_limit_code(np.dtype(t)) for t in (np.float16, np.float32, np.uint8)}


def check_depth_range(arr: np.ndarray) -> None:
    """A depth distribution lies in [0, 1] (E4M3 codes, kept raw for a GPU backend, are decoded
    first).

    Fast path: a non-negative float's bit pattern grows with its value, and every negative value,
    NaN and Inf has a larger pattern than DEPTH_MAX's, so the array is in range when its largest
    pattern is at most DEPTH_MAX's: one integer max (float16 min/max in numpy is ~20x slower:
    0.4 ms per nuScenes depth map). Anything else (-0.0 too) takes the exact path below, which
    decides and says why."""
    limit = LIMIT_CODES.get(arr.dtype)
    if limit is not None and arr.dtype.isnative and arr.size:
        codes = arr.view(f"u{arr.dtype.itemsize}")
        if int(codes.max()) <= limit:
            return
    vals = fp8.decode(arr, np.float16) if arr.dtype == np.uint8 else arr
    lo, hi = float(vals.min()), float(vals.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):  # reached when the backend checks on its device
        raise TensorError("non_finite", "depth holds NaN or Inf")
    if not (lo >= 0 and hi <= DEPTH_MAX):
        raise TensorError("depth_out_of_range", f"depth values span [{lo:.4g}, {hi:.4g}], "
                          "a distribution lies in [0, 1]")


def check_tensor(msg, header, stream: str, rig, cfg: dict, backend) -> np.ndarray:
    """A CameraTensor's payload as an array of the rig's shape, or TensorError (a drop reason)."""
    # a GPU backend takes E4M3 codes as they are and checks values on the device
    on_device = getattr(backend, "checks_values_on_device", False)
    arr = to_float(msg, header, cfg["input.check_finite"] and not on_device,
                   raw_fp8=np.dtype(np.uint8) in backend.wire_dtypes)
    N, D, H, W = rig.depth_shape
    if stream == "depth":
        if header.layout not in DEPTH_LAYOUTS:
            raise TensorError("bad_layout",
                              f"depth layout {shown(header.layout)} (expected 'DHW' or empty)")
        if cfg["input.check_depth_range"] and arr.size:
            check_depth_range(arr)
        want = (D, H, W)
    else:
        layout = header.layout or cfg["input.feature_layout"]
        if layout not in FEATURE_LAYOUTS:
            raise TensorError("bad_layout",
                              f"feature layout {shown(layout)} (expected HWC, CHW or empty)")
        if layout == "CHW" and arr.ndim == 3:
            arr = arr.transpose(1, 2, 0)  # a view; the one copy happens when the set is stacked
        want = (H, W, rig.channels)
    if arr.shape != want:
        raise TensorError("bad_shape", f"{stream} shape {tuple(arr.shape)} != expected {want}")
    return arr


def check_stamp(stamp_ns: int, clock_ns: int, max_future_s: float) -> None:
    """Stamp 0 (never set) and stamps from the future (beyond ``max_future_s`` ahead of the node's
    clock, ``clock_ns``) are not capture times. The hand-off core checks the same (setloop.cpp)."""
    if stamp_ns == 0:
        raise TensorError("stamp_zero", "stamp 0 (the producer never set it)")
    ahead_s = (stamp_ns - clock_ns) / 1e9
    if ahead_s > max_future_s:
        raise TensorError("stamp_in_future", f"stamp {ahead_s:.3f} s ahead of this node's "
                          f"clock (sync.max_future_s {max_future_s})")


class Inputs:
    """Everything between the input topics and the pooling thread.

    ``node``: the ROS node (subscriptions, timers, clock, logger); ``cfg``, ``cameras``,
    ``calibration``, ``report``: what configure made; ``backend()``: the backend now (prepare may
    fall back to cpu); ``deliver(camera_set, inline)``: where complete sets go;
    ``wait_for_worker(timeout_s)``: waits (bounded) while the pooling thread pools a set."""

    def __init__(self, node, depth_images: dict, *, cfg: dict, cameras: tuple, calibration, report,
                 backend: Callable, deliver: Callable, wait_for_worker: Callable):
        self.node = node
        self.depth_images = depth_images  # camera -> converter, for depth cameras only
        self.cfg, self.cameras, self.calibration, self.report = cfg, cameras, calibration, report
        self._backend, self._deliver = backend, deliver
        # the hand-over lock: the synchroniser's sets leave it and reach the pooling worker under it, so
        # that no set overtakes an earlier one between two threads (reentrant: the core's set loop
        # offers a raw datagram's payload while it drains)
        self.lock = threading.RLock()
        self.subs: list = []                       # CameraInfo, message_filters' subscriptions
        self.readers = RenewableReaders(node)      # the tensor subscriptions of the built-in sync
        self.thread = None                         # SubscriptionThread taking them, if any (the watchdog's)
        self.mf_sync = None
        self.camera_frames: dict[str, str] = {}
        self._camera_info_seen: dict[str, tuple] = {}
        self._poll_timer = None
        self._tf_buffer = self._tf_timer = self._tf_listener = None
        self.handoff = None
        if cfg["input.handoff"] != "none":
            self.handoff = HandoffInputs(node, cfg=cfg, cameras=cameras, calibration=calibration, report=report,
                                         check_stamp=self.check_stamp, wait_for_worker=wait_for_worker,
                                         sync_args=self.sync_args(), deliver=self.submit,
                                         handover=self.lock)
        # one synchroniser: where the hand-off core's set loop takes the announcements, it is the loop's
        intake = self.handoff.intake if self.handoff is not None else None
        self.sync = intake.sync if intake is not None else CameraSetSynchronizer(
            cameras, *self.sync_args(), on_drop=report.sync_dropped)
        if cfg["input.handoff"] == "only":  # a node that cannot map rings would receive nothing
            self.handoff.open_reader()
            if self.handoff.unavailable:
                raise StartupError(f"input.handoff only, but this node cannot map hand-off rings: "
                                   f"{self.handoff.unavailable}")
        if cfg["calibration.use_tf"]:
            self._setup_tf()

    def sync_args(self):
        c = self.cfg
        return (c["sync.slop_s"], c["sync.camera_timeout_s"], c["sync.missing_camera_policy"],
                c["sync.min_cameras"], c["sync.max_pending_sets"])

    def reconfigure_sync(self) -> None:
        with self.lock:
            self.sync.configure(*self.sync_args())
        if self._poll_timer is not None:
            self._restart_poll_timer()

    # activate / deactivate ------------------------------------------------------------------
    def subscribe(self) -> None:
        from bevpool_msgs.msg import CameraTensor
        from sensor_msgs.msg import CameraInfo, Image

        node, cfg = self.node, self.cfg
        in_qos = make_qos(cfg["input.qos_reliability"], cfg["input.qos_depth"])
        mf = self._message_filters() if cfg["sync.use_message_filters"] else None
        topics = tensor_topics(cfg, self.cameras)
        group = self._start_tensor_thread() if mf is None else None
        for cam in self.cameras:
            for stream in STREAMS:
                kind = Image if stream == "depth" and cam in self.depth_images else CameraTensor
                if kind is CameraTensor and cfg["input.handoff"] == "only" and mf is None:
                    continue  # hand-off only: the announcements below carry this stream
                topic = topics[(cam, stream)]
                if mf is None:
                    cb = functools.partial(self.on_tensor, camera=cam, stream=stream)
                    events = self.report.subscription_events(topic)
                    self.readers.add(node.resolve_topic_name(topic), (cam, stream), functools.partial(
                        node.create_subscription, kind, topic, cb, in_qos, callback_group=group,
                        event_callbacks=events))
                else:
                    self.subs.append(mf.Subscriber(node, kind, topic, qos_profile=in_qos))
            self.subs.append(node.create_subscription(
                CameraInfo, cfg["input.camera_info_topic"].format(camera=cam),
                lambda m, c=cam: self.on_camera_info(m, c), camera_info_qos(),
                event_callbacks=quiet_events()))
        if mf is not None:
            filters = [s for s in self.subs if isinstance(s, mf.Subscriber)]
            self.mf_sync = mf.ApproximateTimeSynchronizer(
                filters, queue_size=cfg["sync.max_pending_sets"] * 2, slop=cfg["sync.slop_s"])
            self.mf_sync.registerCallback(self.on_message_filters_set)
        if self.handoff is not None and mf is not None:  # 'only' asked for them: say it louder
            say = node.get_logger().warning if cfg["input.handoff"] == "only" else \
                node.get_logger().info
            say("input.handoff needs the built-in synchroniser (sync.use_message_filters is on): "
                "hand-off topics unused, CameraTensor topics subscribed")
        elif self.handoff is not None:
            self.handoff.subscribe(in_qos, self.on_payload)
        self._restart_poll_timer()

    def _start_tensor_thread(self):
        """Under rclpy's SingleThreadedExecutor the tensor readers are taken by a thread of their own
        (ros/executor.py); the callback group that keeps them out of the executor, or None."""
        if executor_kind(self.cfg["executor"]) != "single_threaded":
            return None
        self.thread = SubscriptionThread(self.node.context, "bevpool-input", self._tensor_thread_error,
                                         stall_when=lambda: self.report.counts.get("published"))
        self.readers.on_change = self.thread.follow
        self.thread.start()
        return self.thread.group

    def _tensor_thread_error(self, sub, error: Exception) -> None:
        where = f"{sub.topic_name}: " if sub is not None else "waiting: "
        self.report.drop("internal_error", f"input thread, {where}{type(error).__name__}: {error}")

    def unsubscribe(self) -> None:
        """No more input: subscriptions and the poll timer go, pending sets are forgotten."""
        if self.thread is not None and not self.thread.stop():
            self.node.get_logger().warning("input thread still busy in a callback; its readers go "
                                           "once it returns")
        for sub in self.subs:
            if hasattr(sub, "handle"):
                self.node.destroy_subscription(sub)
            elif hasattr(sub, "sub"):  # message_filters.Subscriber wraps one
                self.node.destroy_subscription(sub.sub)
        self.subs = []
        self.readers.close()
        self.mf_sync = None
        if self.handoff is not None:
            self.handoff.unsubscribe()
        if self._poll_timer is not None:
            self._poll_timer.destroy()
            self._poll_timer = None
        with self.lock:
            self.sync.reset()

    def close(self) -> None:
        self.unsubscribe()
        if self._tf_timer is not None:
            self.node.destroy_timer(self._tf_timer)
            self._tf_timer = None
        if hasattr(self._tf_listener, "unregister"):  # tf2_ros: its /tf subscriptions go too
            self._tf_listener.unregister()
        self._tf_buffer = self._tf_listener = None
        if self.handoff is not None:
            self.handoff.close()

    @property
    def uses_message_filters(self) -> bool:
        return self.mf_sync is not None

    def status(self) -> dict:
        """What /diagnostics says of the inputs: cameras, sets pending, the synchroniser's counters
        (sync_*), cameras missing from sets (missing_*), the input hand-off."""
        with self.lock:
            sync_counts = dict(self.sync.counts)
            missing = dict(self.sync.missing_by_camera)
            pending = self.sync.pending_sets
        return {"cameras": len(self.cameras), "pending_sets": pending,
                "input_handoff": "none" if self.handoff is None else self.handoff.state(),
                **self.readers.status(),
                **{f"sync_{k}": v for k, v in sorted(sync_counts.items())},
                **{f"missing_{cam}": v for cam, v in sorted(missing.items())}}

    def publishers_left(self, topics: list[str]) -> None:
        """After each graph check: renew the readers of the tensor topics publishers left, retire
        the readers their successors replace (reader_renewal.py)."""
        for topic in topics:
            self.readers.publishers_left(topic)
        self.readers.retire_matched()

    def most_writers(self) -> int:
        """The most publishers matched on one input topic (each may hold a sample being reassembled)."""
        subs = [*self.subs, *self.readers.subs.values()]
        return max((getattr(s, "sub", s).get_publisher_count() for s in subs), default=1)

    def _restart_poll_timer(self) -> None:
        if self._poll_timer is not None:
            self._poll_timer.destroy()
        period = min(0.05, max(0.002, self.cfg["sync.camera_timeout_s"] / 4))
        # while sets flow the pooling thread polls after each set and this timer sleeps; a
        # message's arrival polls too (CameraSync.add)
        self._poll_timer = HousekeepingTimer(self.node, period, self.poll_sync)

    def _message_filters(self):
        try:
            import message_filters
        except ImportError:
            self.node.get_logger().warning("sync.use_message_filters is set but message_filters "
                                           "is not installed; using the built-in camera-set "
                                           "synchroniser")
            return None
        return message_filters

    def _setup_tf(self) -> None:
        try:
            from tf2_ros import Buffer, TransformListener
        except ImportError:
            self.node.get_logger().info("tf2_ros not installed: extrinsics from the rig YAML / "
                                        "extrinsics.* parameters")
            return
        self._tf_buffer = Buffer()
        self._tf_listener = TransformListener(self._tf_buffer, self.node)
        period = self.cfg["calibration.tf_period_s"]
        self._tf_timer = self.node.create_timer(period, self.update_from_tf)

    # callbacks ------------------------------------------------------------------------------
    def check_stamp(self, stamp_ns: int) -> None:
        check_stamp(stamp_ns, self.node.get_clock().now().nanoseconds, self.cfg["sync.max_future_s"])

    def checked(self, msg, camera: str, stream: str) -> np.ndarray:
        if stream == "depth" and camera in self.depth_images:  # a depth camera's Image -> [D, H, W]
            return self.depth_images[camera](msg)
        header = inspect_header(msg, self.cfg["input.max_tensor_bytes"])
        return check_tensor(msg, header, stream, self.calibration.rig, self.cfg, self._backend())

    def on_tensor(self, msg, camera: str, stream: str) -> None:
        now = time.perf_counter()
        stamp_ns = stamp_to_ns(msg.header.stamp)
        if self.readers.is_twin((camera, stream), stamp_ns):
            return  # the same sample through the topic's other reader (reader_renewal.py)
        try:
            self.check_stamp(stamp_ns)
            arr = self.checked(msg, camera, stream)
        except TensorError as e:
            self.report.drop(e.reason, f"{camera}/{stream}: {e.detail}")
            return
        self.on_payload(camera, stream, stamp_ns, arr, now)

    def on_payload(self, camera: str, stream: str, stamp_ns: int, payload, now: float,
                   inline: bool = False) -> None:
        """A checked payload (a CameraTensor's array, a depth image's distribution, or a hand-off
        view) joins the synchroniser as that camera's ``stream``. ``inline``: a set it completes
        may be pooled in this thread (PoolingWorker.reserve_or_submit), after the lock is released."""
        job = None
        try:
            with self.lock:
                for s in self.sync.add(camera, stream, stamp_ns, payload, now):
                    job = self.submit(s, inline) or job  # reserved once: the rest queue behind it
        finally:
            if job is not None:
                job()

    def on_message_filters_set(self, *msgs) -> None:
        """All 2N tensors of one ApproximateTime set, in subscription order (camera, depth/feat)."""
        now = time.perf_counter()
        frames = {}
        for i, msg in enumerate(msgs):
            cam, stream = self.cameras[i // 2], STREAMS[i % 2]
            try:
                self.check_stamp(stamp_to_ns(msg.header.stamp))
                arr = self.checked(msg, cam, stream)
            except TensorError as e:
                self.report.drop(e.reason, f"{cam}/{stream}: {e.detail}")
                return
            frames.setdefault(cam, {})[stream] = (stamp_to_ns(msg.header.stamp), arr)
        self.submit(CameraSet(frames, self.cameras, (), now, now, True))

    def on_camera_info(self, msg, camera: str) -> None:
        self.camera_frames[camera] = msg.header.frame_id
        if not self.cfg["calibration.use_camera_info"]:
            return
        key = (tuple(msg.k), msg.width, msg.height)
        if self._camera_info_seen.get(camera) == key:
            return  # unchanged: the common case at camera rate
        try:
            changed = self.calibration.update_intrinsics(camera, msg.k, msg.width, msg.height)
        except RigError as e:
            self._camera_info_seen.pop(camera, None)
            self.report.drop("camera_info_rejected", f"{camera}: CameraInfo rejected, sets of this "
                             f"camera dropped until a usable one arrives: {e}")
            return
        self._camera_info_seen[camera] = key
        if changed:
            self.report.count("calibration_changes")
            self.node.get_logger().info(f"{camera}: new intrinsics from CameraInfo; scatter map will "
                                   "be rebuilt")

    def update_from_tf(self) -> None:
        from rclpy.time import Time

        ego = self.cfg["ego_frame"]
        for cam, frame in list(self.camera_frames.items()):
            if not frame:
                continue
            try:
                tf = self._tf_buffer.lookup_transform(ego, frame, Time())
            except Exception as e:
                text = clip(f"TF {ego} <- {shown(frame)} unavailable: {e}", 300)
                self.report.warn("tf_lookup", text)
                continue
            t, q = tf.transform.translation, tf.transform.rotation
            try:
                pose = [t.x, t.y, t.z, q.w, q.x, q.y, q.z]
                if self.calibration.update_extrinsics_vector(cam, pose):
                    self.report.count("calibration_changes")
            except RigError as e:
                self.report.drop("tf_rejected", f"{cam}: {e}")

    def poll_sync(self) -> None:
        if self.handoff is not None:
            self.handoff.sweep()
        with self.lock:
            for s in self.sync.poll(time.perf_counter()):
                self.submit(s)

    def submit(self, camera_set, inline: bool = False):
        """A complete set, delivered (the hand-over lock held). ``inline``: the job that pools it in
        this thread may come back, to run once the lock is released."""
        return self._deliver(camera_set, inline)
