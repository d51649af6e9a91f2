"""bevpool_node: camera topics -> synchronised set -> BEV pooling -> BevFeature (+ image, diagnostics).

Thin glue: the parameters come from ``params.PARAMS``, messages are checked and converted by
``tensor_codec``, sets are formed by ``sync.CameraSetSynchronizer`` (or message_filters when
asked and installed), pooling runs in ``pooling.PoolingWorker``'s thread.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType,
                                SetParametersResult)
from rclpy.node import Node

from .. import fp8
from ..backends import BackendUnavailable, create_backend
from ..paths import default_rig_path
from ..rig import RigError, load_rig
from . import params as P
from .calibration import LiveCalibration
from .diagnostics import RecentCounts, diagnostic_array, health
from .latency import RollingStats
from .logtext import clip, shown
from .outputs import bev_feature_msg, bev_rgb, image_msg, ns_to_time, stamp_to_ns
from .pooling import PoolingWorker, PoolResult
from .qos import camera_info_qos, make_qos
from .sync import CameraSetSynchronizer
from .tensor_codec import ReusableBuffer, TensorError, inspect_header, to_float
from .throttle import ThrottledLog

_PTYPE = {"bool": ParameterType.PARAMETER_BOOL, "integer": ParameterType.PARAMETER_INTEGER,
          "double": ParameterType.PARAMETER_DOUBLE, "string": ParameterType.PARAMETER_STRING,
          "string_array": ParameterType.PARAMETER_STRING_ARRAY}
# parameters the synchroniser reads (a change re-configures it in place)
_SYNC_PARAMS = ("sync.slop_s", "sync.camera_timeout_s", "sync.missing_camera_policy",
                "sync.min_cameras", "sync.max_pending_sets")


DEPTH_LAYOUTS = ("DHW", "")           # empty: the producer does not say; DHW is assumed
DEPTH_MAX = 1.01                      # a distribution's values lie in [0, 1]; 1 % for float16/fp8 rounding
FEATURE_LAYOUTS = ("HWC", "CHW")      # empty: input.feature_layout

# counters that are events, not dropped data
NOT_DROPS = ("calibration_changes", "scatter_map_rebuilds", "parameter_rejected", "handoff_failed",
             "skipped_no_subscribers")


def check_depth_range(arr: np.ndarray) -> None:
    """A depth distribution lies in [0, 1] (E4M3 codes, kept raw for a GPU backend, are decoded first)."""
    vals = fp8.decode(arr, np.float16) if arr.dtype == np.uint8 else arr
    lo, hi = float(vals.min()), float(vals.max())
    if not (np.isfinite(lo) and np.isfinite(hi)):  # reached here when the backend checks on its device
        raise TensorError("non_finite", "depth holds NaN or Inf")
    if not (lo >= 0 and hi <= DEPTH_MAX):
        raise TensorError("depth_out_of_range", f"depth values span [{lo:.4g}, {hi:.4g}], a distribution lies in [0, 1]")


class StartupError(RuntimeError):
    """Invalid configuration found at start-up; main() prints it and exits non-zero."""


@contextlib.contextmanager
def _captured_log(name: str):
    """Collect the messages of a Python logger instead of printing them (no double warning)."""
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logger = logging.getLogger(name)
    handler, propagate = Collect(logging.INFO), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def descriptor(spec: P.Param) -> ParameterDescriptor:
    d = ParameterDescriptor(type=_PTYPE[spec.type], description=spec.description, read_only=spec.read_only)
    if spec.choices:
        d.additional_constraints = "one of: " + ", ".join(map(str, spec.choices))
    if spec.type == "double" and spec.low is not None:
        d.floating_point_range = [FloatingPointRange(from_value=float(spec.low), to_value=float(spec.high), step=0.0)]
    if spec.type == "integer" and spec.low is not None:
        d.integer_range = [IntegerRange(from_value=int(spec.low), to_value=int(spec.high), step=1)]
    return d


class BevPoolNode(Node):
    def __init__(self, node_name: str = "bevpool_node", input_guard=None, **kwargs):
        """``input_guard(topics, depth) -> str``: told the resolved input tensor topics before
        anything heavy starts; says how their size is bounded (main.input_size_guard), or raises."""
        super().__init__(node_name, **kwargs)
        self.counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()
        self.warn = ThrottledLog(self.get_logger().warning)
        self.cfg = self._declare_and_validate()
        self.warn.period = self.cfg["log_throttle_s"]
        self.calibration = self._load_calibration()
        self.cameras = self.calibration.camera_names
        self.depth_images = self._depth_image_inputs()  # camera -> converter, for depth cameras only
        topics = [self.resolve_topic_name(t) for (cam, stream), t in self._tensor_topics().items()
                  if not (stream == "depth" and cam in self.depth_images)]  # an Image is not a CameraTensor
        self.input_size_guard = (input_guard(topics, self.cfg["input.qos_depth"]) if input_guard
                                 else "node only (no guard asked)")
        self._declare_extrinsics()
        self.backend, self.backend_requested = self._create_backend()
        self.sync = CameraSetSynchronizer(self.cameras, *self._sync_args(), on_drop=self._sync_dropped)
        self._sync_lock = threading.Lock()
        self.latency = RollingStats(self.cfg["diagnostics.latency_window"])   # last input -> published
        self.pool_time = RollingStats(self.cfg["diagnostics.latency_window"])
        self.overhead = RollingStats(self.cfg["diagnostics.latency_window"])  # latency - pool
        # where the overhead goes: waiting for the pooling thread, stacking, message build, publish
        self.stages = {k: RollingStats(self.cfg["diagnostics.latency_window"])
                       for k in ("queue_wait", "assemble", "message", "publish")}
        self._published = 0
        self._recent = RecentCounts(2.0, time.monotonic())  # counter growth behind the diagnostics level
        self._last_drop_detail: dict[str, str] = {}         # reason -> latest detail (named by ERROR)
        self._camera_info_seen: dict[str, tuple] = {}
        self._camera_frames: dict[str, str] = {}

        self._make_publishers()
        self.handoff = None
        self._bev_payload = ReusableBuffer()  # publish() copies synchronously: safe to reuse after it
        # the backend writes each grid straight into the outgoing payload, in the published dtype
        self.worker = PoolingWorker(self.backend, self.calibration, self._publish_result, self._drop,
                                    self.cfg["processing.queue_size"], on_rebuild=self._on_rebuild,
                                    out_dtype=lambda: self.cfg["output.bev_dtype"], out_buffer=self._bev_payload,
                                    on_prepare_error=self._backend_cannot_prepare)
        self.worker.start()
        self.handoff = self._make_handoff()  # after start(): the backend has prepared its buffers
        self._make_subscriptions()
        self._poll_timer = self.create_timer(self._poll_period(), self._poll_sync)
        self._diag_timer = self.create_timer(self.cfg["diagnostics.period_s"], self._publish_diagnostics)
        self._setup_tf()
        self.add_on_set_parameters_callback(self._validate_parameters)
        self.add_post_set_parameters_callback(self._apply_parameters)
        d = self.backend.describe()
        self.get_logger().info(
            f"ready: {len(self.cameras)} cameras {list(self.cameras)}, rig {self.calibration.rig.name}, "
            f"backend {d.get('backend')} ({d.get('precision')}), grid {self.calibration.rig.grid_shape} "
            f"x {self.calibration.rig.channels} ch, sync slop {self.cfg['sync.slop_s']} s, "
            f"timeout {self.cfg['sync.camera_timeout_s']} s, policy {self.cfg['sync.missing_camera_policy']}, "
            f"input size bounded by: {self.input_size_guard}")

    # start-up ---------------------------------------------------------------------------
    def _declare_and_validate(self) -> dict:
        values, errors = {}, []
        for spec in P.PARAMS:
            try:
                values[spec.name] = self._declare(spec.name, spec.default, descriptor(spec))
            except Exception as e:  # wrong type or out of range in the overrides: say which
                errors.append(f"{spec.name}: {e}")
        errors += P.check_all(values) if not errors else []
        if errors:
            raise StartupError("; ".join(errors))
        return values

    def _declare(self, name: str, default, desc: ParameterDescriptor):
        """declare_parameter, except that an empty-list default keeps the descriptor's array type
        (rclpy would infer a byte array from [] and then refuse every real value)."""
        if isinstance(default, list) and not default:
            from rclpy.exceptions import ParameterUninitializedException
            from rclpy.parameter import Parameter

            kind = {ParameterType.PARAMETER_STRING_ARRAY: Parameter.Type.STRING_ARRAY,
                    ParameterType.PARAMETER_DOUBLE_ARRAY: Parameter.Type.DOUBLE_ARRAY}[desc.type]
            self.declare_parameter(name, kind, desc)
            try:
                return list(self.get_parameter(name).value)
            except ParameterUninitializedException:
                return []
        return self.declare_parameter(name, default, desc).value

    def _load_calibration(self) -> LiveCalibration:
        path = self.cfg["rig_file"] or str(default_rig_path())
        if not Path(path).is_file():
            raise StartupError(f"rig_file: {path} does not exist")
        try:
            calib = LiveCalibration(load_rig(path), self.cfg["camera_names"])
        except RigError as e:
            raise StartupError(f"rig_file {path}: {e}") from None
        errors = P.check_all(self.cfg, num_cameras=len(calib.camera_names))  # the rules that need the rig
        if errors:
            raise StartupError("; ".join(errors))
        return calib

    def _depth_image_inputs(self) -> dict:
        """input.depth_mode 'image' cameras: their metric depth Image -> distribution (depth_image.py)."""
        from ..depth_image import converters_for

        try:
            return converters_for(self.cameras, self.cfg["input.depth_mode"], self.calibration.rig,
                                  self.cfg["input.depth_image_distribution"], self.cfg["input.depth_image_sigma_m"],
                                  self.cfg["input.max_tensor_bytes"])
        except ValueError as e:
            raise StartupError(str(e)) from None

    def _declare_extrinsics(self) -> None:
        """``extrinsics.<camera>`` overrides: [tx, ty, tz, qw, qx, qy, qz] camera->ego, [] = rig YAML."""
        for cam in self.cameras:
            name = P.extrinsics_param(cam)
            d = ParameterDescriptor(type=ParameterType.PARAMETER_DOUBLE_ARRAY,
                                    description=f"camera->ego pose of {cam}: [tx, ty, tz, qw, qx, qy, qz]; "
                                                "empty = rig YAML (TF overrides both when enabled)")
            try:
                value = self._declare(name, [], d)
            except Exception as e:
                raise StartupError(f"{name}: {e}") from None
            if value:
                err = self.calibration.check_only_extrinsics_vector(cam, value)
                if err:
                    raise StartupError(err)
                self.calibration.update_extrinsics_vector(cam, value)

    def _create_backend(self):
        requested = self.cfg["backend"]
        fallback = self.cfg["backend_fallback"]
        with _captured_log("bevpool_ros.backends") as reasons:  # re-said once below, via ROS
            try:
                backend = create_backend(requested, self.cfg["precision"], fallback=fallback,
                                         check_finite=self.cfg["input.check_finite"])
            except (BackendUnavailable, ValueError) as e:
                raise StartupError(f"backend {requested!r}: {e}") from None
            except Exception as e:  # a backend that breaks while probing must not take the node down
                if not fallback:
                    raise StartupError(f"backend {requested!r} failed to start: {type(e).__name__}: {e}") from None
                self.get_logger().warning(f"backend {requested!r} failed to start ({type(e).__name__}: {e}); "
                                          "falling back to 'cpu'")
                return create_backend("cpu", self.cfg["precision"]), requested
        if requested not in ("best", backend.name):
            why = "; ".join(r for r in reasons) or "unavailable"
            self.get_logger().warning(f"backend {requested!r} unavailable here, running {backend.name!r} "
                                      f"(precision {backend.precision}) instead: {why}")
        return backend, requested

    def _backend_cannot_prepare(self, backend, error: Exception, rig):
        """A GPU backend that cannot run ``rig`` hands over to the cpu backend with one warning that
        names the rig's sizes; with backend_fallback off (or on the cpu backend) the error stands."""
        what = (f"rig {rig.name} (C = {rig.channels}, depth {list(rig.depth_shape)}, grid "
                f"{list(rig.grid_shape)}): {type(error).__name__}: {error}")
        if backend.name == "cpu" or not self.cfg["backend_fallback"]:
            raise StartupError(f"backend {backend.name!r} cannot run {what}") from None
        self.get_logger().warning(f"backend {backend.name!r} cannot run {what}; falling back to 'cpu'")
        try:
            backend.close()
        except Exception as e:  # a half-prepared backend: whatever it holds goes with the process
            self.get_logger().warning(f"closing backend {backend.name!r}: {type(e).__name__}: {e}")
        self.backend = create_backend("cpu", self.cfg["precision"], check_finite=self.cfg["input.check_finite"])
        return self.backend

    def _sync_args(self):
        c = self.cfg
        return (c["sync.slop_s"], c["sync.camera_timeout_s"], c["sync.missing_camera_policy"],
                c["sync.min_cameras"], c["sync.max_pending_sets"])

    def _make_publishers(self) -> None:
        from bevpool_msgs.msg import BevFeature
        from diagnostic_msgs.msg import DiagnosticArray
        from sensor_msgs.msg import Image

        out_qos = make_qos(self.cfg["output.qos_reliability"], self.cfg["output.qos_depth"])
        self.bev_pub = self.create_publisher(BevFeature, self.cfg["output.bev_topic"], out_qos)
        self.image_pub = self.create_publisher(Image, self.cfg["output.image_topic"], out_qos)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)

    def _make_handoff(self):
        """output.gpu_handoff: the zero-copy GPU ring, or None (with one warning saying why)."""
        if not self.cfg["output.gpu_handoff"]:
            return None
        from .handoff_output import HandoffOutput

        try:
            return HandoffOutput(self, self.backend, self.cfg["output.handoff_topic"],
                                 self.cfg["output.handoff_ring_size"],
                                 make_qos(self.cfg["output.qos_reliability"], self.cfg["output.qos_depth"]))
        except Exception as e:  # HandoffUnsupported, or a driver refusing the export
            self.get_logger().warning(f"output.gpu_handoff is off: {e}")
            self.handoff_off_reason = str(e)
            return None

    def _tensor_topics(self) -> dict[tuple[str, str], str]:
        """(camera, stream) -> input tensor topic (relative), in subscription order."""
        return {(cam, stream): self.cfg[f"input.{stream}_topic"].format(camera=cam)
                for cam in self.cameras for stream in ("depth", "feat")}

    def _make_subscriptions(self) -> None:
        from bevpool_msgs.msg import CameraTensor
        from sensor_msgs.msg import CameraInfo, Image

        in_qos = make_qos(self.cfg["input.qos_reliability"], self.cfg["input.qos_depth"])
        events = self._event_callbacks()
        self._subs = []
        mf = self._message_filters() if self.cfg["sync.use_message_filters"] else None
        tensor_topics = self._tensor_topics()
        for cam in self.cameras:
            for stream in ("depth", "feat"):
                topic = tensor_topics[(cam, stream)]
                kind = Image if stream == "depth" and cam in self.depth_images else CameraTensor
                if mf is None:
                    cb = (lambda m, c=cam, s=stream: self._on_tensor(m, c, s))
                    self._subs.append(self.create_subscription(kind, topic, cb, in_qos, event_callbacks=events))
                else:
                    self._subs.append(mf.Subscriber(self, kind, topic, qos_profile=in_qos))
            info_topic = self.cfg["input.camera_info_topic"].format(camera=cam)
            self._subs.append(self.create_subscription(
                CameraInfo, info_topic, lambda m, c=cam: self._on_camera_info(m, c), camera_info_qos()))
        if mf is not None:
            filters = [s for s in self._subs if isinstance(s, mf.Subscriber)]
            self._mf_sync = mf.ApproximateTimeSynchronizer(
                filters, queue_size=self.cfg["sync.max_pending_sets"] * 2, slop=self.cfg["sync.slop_s"])
            self._mf_sync.registerCallback(self._on_message_filters_set)

    def _message_filters(self):
        try:
            import message_filters
        except ImportError:
            self.get_logger().warning("sync.use_message_filters is set but message_filters is not installed; "
                                      "using the built-in camera-set synchroniser")
            return None
        return message_filters

    def _event_callbacks(self):
        """Count samples the middleware reports lost (a flood beyond the queue depth)."""
        try:
            from rclpy.event_handler import SubscriptionEventCallbacks

            return SubscriptionEventCallbacks(message_lost=lambda info: self._count(
                "dds_message_lost", max(1, int(getattr(info, "total_count_change", 1)))))
        except Exception:
            return None

    def _setup_tf(self) -> None:
        self._tf_buffer = None
        if not self.cfg["calibration.use_tf"]:
            return
        try:
            from tf2_ros import Buffer, TransformListener
        except ImportError:
            self.get_logger().info("tf2_ros not installed: extrinsics from the rig YAML / extrinsics.* parameters")
            return
        self._tf_buffer = Buffer()
        self._tf_listener = TransformListener(self._tf_buffer, self)
        self._tf_timer = self.create_timer(self.cfg["calibration.tf_period_s"], self._update_from_tf)

    # input callbacks --------------------------------------------------------------------
    def _check_tensor(self, msg, camera: str, stream: str) -> np.ndarray:
        if stream == "depth" and camera in self.depth_images:  # a depth camera's Image -> [D, H, W]
            return self.depth_images[camera](msg)
        header = inspect_header(msg, self.cfg["input.max_tensor_bytes"])
        # a GPU backend takes E4M3 codes as they are and checks values on the device
        on_device = getattr(self.backend, "checks_values_on_device", False)
        arr = to_float(msg, header, self.cfg["input.check_finite"] and not on_device,
                       raw_fp8=np.dtype(np.uint8) in self.backend.wire_dtypes)
        rig = self.calibration.rig
        N, D, H, W = rig.depth_shape
        if stream == "depth":
            if header.layout not in DEPTH_LAYOUTS:
                raise TensorError("bad_layout", f"depth layout {shown(header.layout)} (expected 'DHW' or empty)")
            if self.cfg["input.check_depth_range"] and arr.size:
                check_depth_range(arr)
            want = (D, H, W)
        else:
            layout = header.layout or self.cfg["input.feature_layout"]
            if layout not in FEATURE_LAYOUTS:
                raise TensorError("bad_layout", f"feature layout {shown(layout)} (expected HWC, CHW or empty)")
            if layout == "CHW" and arr.ndim == 3:
                arr = arr.transpose(1, 2, 0)  # a view; the one copy happens when the set is stacked
            want = (H, W, rig.channels)
        if arr.shape != want:
            raise TensorError("bad_shape", f"{stream} shape {tuple(arr.shape)} != expected {want}")
        return arr

    def _check_stamp(self, stamp_ns: int) -> None:
        """Stamp 0 (never set) and stamps from the future are not capture times."""
        if stamp_ns == 0:
            raise TensorError("stamp_zero", "stamp 0 (the producer never set it)")
        ahead_s = (stamp_ns - self.get_clock().now().nanoseconds) / 1e9
        if ahead_s > self.cfg["sync.max_future_s"]:
            raise TensorError("stamp_in_future", f"stamp {ahead_s:.3f} s ahead of this node's clock "
                              f"(sync.max_future_s {self.cfg['sync.max_future_s']})")

    def _on_tensor(self, msg, camera: str, stream: str) -> None:
        now = time.perf_counter()
        stamp_ns = stamp_to_ns(msg.header.stamp)
        try:
            self._check_stamp(stamp_ns)
            arr = self._check_tensor(msg, camera, stream)
        except TensorError as e:
            self._drop(e.reason, f"{camera}/{stream}: {e.detail}")
            return
        with self._sync_lock:
            sets = self.sync.add(camera, stream, stamp_ns, arr, now)
        for s in sets:
            self._submit(s)

    def _on_message_filters_set(self, *msgs) -> None:
        """All 2N tensors of one ApproximateTime set, in subscription order (camera, depth/feat)."""
        now = time.perf_counter()
        from .sync import CameraSet

        frames = {}
        for i, msg in enumerate(msgs):
            cam, stream = self.cameras[i // 2], ("depth", "feat")[i % 2]
            try:
                self._check_stamp(stamp_to_ns(msg.header.stamp))
                arr = self._check_tensor(msg, cam, stream)
            except TensorError as e:
                self._drop(e.reason, f"{cam}/{stream}: {e.detail}")
                return
            frames.setdefault(cam, {})[stream] = (stamp_to_ns(msg.header.stamp), arr)
        self._submit(CameraSet(frames, self.cameras, (), now, now, True))

    def _on_camera_info(self, msg, camera: str) -> None:
        self._camera_frames[camera] = msg.header.frame_id
        if not self.cfg["calibration.use_camera_info"]:
            return
        key = (tuple(msg.k), msg.width, msg.height)
        if self._camera_info_seen.get(camera) == key:
            return  # unchanged: the common case at camera rate
        try:
            changed = self.calibration.update_intrinsics(camera, msg.k, msg.width, msg.height)
        except RigError as e:
            self._camera_info_seen.pop(camera, None)
            self._drop("camera_info_rejected", f"{camera}: CameraInfo inconsistent with the feature map: {e}")
            return
        self._camera_info_seen[camera] = key
        if changed:
            self._count("calibration_changes")
            self.get_logger().info(f"{camera}: new intrinsics from CameraInfo; scatter map will be rebuilt")

    def _update_from_tf(self) -> None:
        from rclpy.time import Time

        for cam, frame in list(self._camera_frames.items()):
            if not frame:
                continue
            try:
                tf = self._tf_buffer.lookup_transform(self.cfg["ego_frame"], frame, Time())
            except Exception as e:
                self.warn("tf_lookup", clip(f"TF {self.cfg['ego_frame']} <- {shown(frame)} unavailable: {e}", 300))
                continue
            t, q = tf.transform.translation, tf.transform.rotation
            try:
                if self.calibration.update_extrinsics_vector(cam, [t.x, t.y, t.z, q.w, q.x, q.y, q.z]):
                    self._count("calibration_changes")
            except RigError as e:
                self._drop("tf_rejected", f"{cam}: {e}")

    def _poll_sync(self) -> None:
        with self._sync_lock:
            sets = self.sync.poll(time.perf_counter())
        for s in sets:
            self._submit(s)

    def _submit(self, camera_set) -> None:
        """To the pooling thread, unless no one would receive the grid (the image_pipeline rule)."""
        if self.cfg["processing.skip_without_subscribers"] and not self._anyone_listening():
            self._count("skipped_no_subscribers")
            return
        self.worker.submit(camera_set)

    def _anyone_listening(self) -> bool:
        if self.bev_pub.get_subscription_count() > 0:
            return True
        return self.handoff is not None and self.handoff.pub.get_subscription_count() > 0

    def _poll_period(self) -> float:
        return min(0.05, max(0.002, self.cfg["sync.camera_timeout_s"] / 4))

    # results ----------------------------------------------------------------------------
    def _publish_result(self, r: PoolResult) -> None:
        """Runs in the pooling thread."""
        s = r.camera_set
        if self.handoff is not None:  # first: its consumers wait for no host copy or message build
            self._publish_handoff(r)
        t_msg = time.perf_counter()
        msg = bev_feature_msg(
            r.bev, r.rig, s.stamp_ns, self.cfg["ego_frame"], cameras=list(s.frames),
            camera_stamps_ns=[s.camera_stamp_ns(c) for c in s.frames], missing=s.missing,
            backend=self.backend.name, precision=self.backend.precision,  # fixed per prepare()
            dtype=self.cfg["output.bev_dtype"], reuse=self._bev_payload)
        t_pub = time.perf_counter()
        self.bev_pub.publish(msg)
        done = time.perf_counter()
        latency = done - s.last_arrival
        for k, v in (("queue_wait", r.started - s.last_arrival), ("assemble", r.assemble_s),
                     ("message", t_pub - t_msg), ("publish", done - t_pub)):
            self.stages[k].add(v * 1e3)
        self.latency.add(latency * 1e3)
        self.pool_time.add(r.pool_s * 1e3)
        self.overhead.add((latency - r.pool_s) * 1e3)
        self._published += 1
        self._count("published" if s.complete else "published_partial")
        if self.cfg["output.publish_image"] and self._published % self.cfg["output.image_every_n"] == 0:
            if self.image_pub.get_subscription_count() > 0:  # the image costs a few ms: only when watched
                self.image_pub.publish(image_msg(bev_rgb(r.bev, r.rig), msg.header))

    def _publish_handoff(self, r: PoolResult) -> None:
        from std_msgs.msg import Header

        header = Header(stamp=ns_to_time(r.camera_set.stamp_ns), frame_id=self.cfg["ego_frame"])
        try:
            self.handoff.publish(header, r.rig)
        except Exception as e:  # the BevFeature still goes out; only the hand-off misses this grid
            self._count("handoff_failed")
            self.warn("handoff_failed", f"GPU hand-off failed: {type(e).__name__}: {e}")

    def _on_rebuild(self, rig) -> None:
        self._count("scatter_map_rebuilds")
        self.get_logger().info(f"scatter map rebuilt for calibration {rig.digest()}")

    def _count(self, reason: str, n: int = 1) -> None:
        with self._counts_lock:
            self.counts[reason] += n

    def _drop(self, reason: str, detail: str) -> None:
        self._count(reason)
        self._last_drop_detail[reason] = detail = clip(detail)
        self.warn(reason, f"dropped ({reason}): {detail}")

    def _sync_dropped(self, reason: str, detail: str) -> None:
        """The synchroniser counted a drop (sync_<reason>): say so, throttled per reason."""
        self._last_drop_detail[f"sync_{reason}"] = detail = clip(detail)
        self.warn(f"sync_{reason}", f"dropped (sync_{reason}): {detail}")

    # diagnostics ------------------------------------------------------------------------
    def snapshot(self) -> dict:
        with self._counts_lock:
            counts = Counter(self.counts)
        with self._sync_lock:
            sync_counts = Counter(self.sync.counts)
            missing = Counter(self.sync.missing_by_camera)
            pending = self.sync.pending_sets
        try:  # the pooling thread may be re-preparing the backend right now (a calibration change)
            d = self.backend.describe()
        except Exception as e:  # diagnostics must never take the node down
            d = {"backend": self.backend.name, "precision": self.backend.precision,
                 "describe_error": clip(f"{type(e).__name__}: {e}")}
        lat, pool, over = self.latency.percentiles(), self.pool_time.percentiles(), self.overhead.percentiles()
        values = {
            "backend": d.get("backend", self.backend.name), "backend_requested": self.backend_requested,
            "precision": d.get("precision", ""), "regime": d.get("regime", "n/a"), "device": d.get("device", ""),
            "cameras": len(self.cameras), "calibration": self.calibration.rig.digest(),
            "sets_published": counts["published"] + counts["published_partial"],
            "sets_published_partial": counts["published_partial"],
            "latency_p50_ms": lat[50], "latency_p95_ms": lat[95], "latency_p99_ms": lat[99],
            "pool_p50_ms": pool[50], "pool_p99_ms": pool[99],
            "overhead_p50_ms": over[50], "overhead_p99_ms": over[99],
            "pending_sets": pending, "worker_queue": self.worker.queued,
            "gpu_handoff": "on" if self.handoff is not None else
            ("off" if not self.cfg["output.gpu_handoff"] else f"refused: {self.handoff_off_reason}"[:200]),
            "input_size_guard": self.input_size_guard,
        }
        if "describe_error" in d:
            values["describe_error"] = d["describe_error"]
        for k, st in self.stages.items():
            pk = st.percentiles((50, 99))
            values[f"{k}_p50_ms"], values[f"{k}_p99_ms"] = pk[50], pk[99]
        for k, v in sorted(sync_counts.items()):
            values[f"sync_{k}"] = v
        for k, v in sorted(counts.items()):
            if k not in ("published", "published_partial"):
                values[k if k in NOT_DROPS else f"dropped_{k}"] = v
        for cam, v in sorted(missing.items()):
            values[f"missing_{cam}"] = v
        for cam, why in self.calibration.invalid.items():
            values[f"invalid_calibration_{cam}"] = why
        return values

    def _publish_diagnostics(self) -> None:
        values = self.snapshot()
        totals = {k: int(v) for k, v in values.items() if k.startswith(("dropped_", "sync_"))}
        totals["published"] = int(values["sets_published"])
        # a drop stays visible a few periods, so a monitor polling slower than us still sees it
        self._recent.window_s = max(2.0, 3 * self.cfg["diagnostics.period_s"])
        level, text = health(self._recent.update(time.monotonic(), totals), self._last_drop_detail)
        if self.calibration.invalid:
            level, text = "ERROR", f"no usable calibration for {sorted(self.calibration.invalid)}"
        elif level == "OK" and self.backend_requested not in ("best", self.backend.name):
            level, text = "WARN", f"running {self.backend.name}, {self.backend_requested} unavailable"
        elif level == "OK" and self.cfg["processing.skip_without_subscribers"] and not self._anyone_listening():
            text = f"idle: no subscriber to the BEV ({values.get('skipped_no_subscribers', 0)} sets skipped)"
        elif level == "OK":
            text = f"{values['sets_published']} sets published"
        self.diag_pub.publish(diagnostic_array(self.get_clock().now().to_msg(),
                                               f"{self.get_name()}: bev pooling", str(values["device"]),
                                               level, text, values))

    # parameters at run time ---------------------------------------------------------------
    def _validate_parameters(self, changes) -> SetParametersResult:
        proposed = dict(self.cfg)
        errors = []
        for p in changes:
            if p.name.startswith("extrinsics."):
                cam = p.name.split(".", 1)[1]
                value = list(p.value or [])
                if cam not in self.cameras:
                    errors.append(f"{p.name}: unknown camera")
                elif value:
                    err = self.calibration.check_only_extrinsics_vector(cam, value)
                    errors += [err] if err else []
                continue
            if p.name in P.BY_NAME:
                proposed[p.name] = p.value
        errors += P.check_all(proposed, num_cameras=len(self.cameras))
        if errors:
            return SetParametersResult(successful=False, reason="; ".join(errors))
        return SetParametersResult(successful=True)

    def set_parameters_atomically(self, parameter_list):
        """Every change is logged, each one (not throttled: changes are rare and an operator
        wants each answer): accepted ones with their new values, rejections (by the descriptors:
        type, range, read-only; or by _validate_parameters) counted and with a reason that names
        the parameter. The parameter services and set_parameters() all come through here."""
        result = super().set_parameters_atomically(parameter_list)
        if result.successful:
            changes = ", ".join(f"{p.name} := {shown(p.value)}" for p in parameter_list)
            self.get_logger().info(f"parameter change accepted: {clip(changes, 300)}")
        else:
            result.reason = self._readable_rejection(parameter_list, result.reason)
            self._count("parameter_rejected")
            self.get_logger().warning(f"parameter change rejected: {clip(result.reason, 300)}")
        return result

    def set_parameters(self, parameter_list):
        return [self.set_parameters_atomically([p]) for p in parameter_list]

    def _readable_rejection(self, params, reason: str) -> str:
        """rclpy's descriptor messages ("Wrong parameter type, expected '3' got '4'") in words."""
        from rclpy.parameter import Parameter

        why = []
        for p in params:
            spec = P.BY_NAME.get(p.name)
            if spec is not None and spec.read_only:
                why.append(f"{p.name}: read-only (set it at start-up)")
            elif spec is not None and (err := spec.check(p.value)):
                why.append(err)
            elif reason.startswith("Wrong parameter type") and self.has_parameter(p.name):
                want = Parameter.Type(self.describe_parameter(p.name).type).name.lower()
                why.append(f"{p.name}: expected {want}, got {p.type_.name.lower()} {shown(p.value)}"
                           + (" (write 1.0, not 1)" if want == "double" and p.type_ == Parameter.Type.INTEGER else ""))
        return "; ".join(why) or reason

    def _apply_parameters(self, changes) -> None:
        for p in changes:
            if p.name.startswith("extrinsics.") and p.value:
                if self.calibration.update_extrinsics_vector(p.name.split(".", 1)[1], list(p.value)):
                    self._count("calibration_changes")
            elif p.name in P.BY_NAME:
                self.cfg[p.name] = p.value
        names = {p.name for p in changes}
        if names & set(_SYNC_PARAMS):
            with self._sync_lock:
                self.sync.configure(*self._sync_args())
            self._poll_timer.cancel()
            self.destroy_timer(self._poll_timer)
            self._poll_timer = self.create_timer(self._poll_period(), self._poll_sync)
        if "processing.queue_size" in names:
            self.worker.queue_size = self.cfg["processing.queue_size"]
        if "diagnostics.latency_window" in names:
            for s in (self.latency, self.pool_time, self.overhead, *self.stages.values()):
                s.resize(self.cfg["diagnostics.latency_window"])
        if "diagnostics.period_s" in names:
            self._diag_timer.cancel()
            self.destroy_timer(self._diag_timer)
            self._diag_timer = self.create_timer(self.cfg["diagnostics.period_s"], self._publish_diagnostics)
        if "log_throttle_s" in names:
            self.warn.period = self.cfg["log_throttle_s"]

    # shutdown ---------------------------------------------------------------------------
    def destroy_node(self):
        # also called by rclpy's context cleanup on a node whose __init__ failed half-way
        if getattr(self, "worker", None) is not None:
            self.worker.stop()
        if getattr(self, "handoff", None) is not None:
            self.handoff.close()
        if getattr(self, "backend", None) is not None:
            self.backend.close()
        return super().destroy_node()
