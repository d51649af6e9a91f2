"""Every parameter of bevpool_node in one table: type, default, range/choices, description.

The node declares its parameters from this table (with ParameterDescriptors carrying the
ranges), validates them at start-up and in the on-set-parameters callback with the same
:func:`check`, the launch file and docs/parameters.md are checked against it by tests.
No ROS import here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..logtext import shown
from ..paths import DEFAULT_RIG
from ..ros.dds_guard import TENSOR_BOUND_BYTES


@dataclass(frozen=True)
class Param:
    name: str
    type: str                 # bool | integer | double | string | string_array
    default: Any
    description: str
    choices: tuple = ()
    low: float | None = None  # inclusive range for numbers
    high: float | None = None
    read_only: bool = False   # configure-time: changes only while the node is unconfigured

    def check(self, value: Any) -> str | None:
        """None when ``value`` is acceptable, else a message naming the parameter."""
        t = self.type
        ok_type = {
            "bool": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "double": isinstance(value, (int, float)) and not isinstance(value, bool),
            "string": isinstance(value, str),
            "string_array": isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value),
        }[t]
        if not ok_type:
            return f"{self.name}: expected {t}, got {shown(value)}"
        if t in ("integer", "double"):
            if not math.isfinite(float(value)):
                return f"{self.name}: must be finite, got {value}"
            if self.low is not None and value < self.low:
                return f"{self.name}: {value} below minimum {self.low}"
            if self.high is not None and value > self.high:
                return f"{self.name}: {value} above maximum {self.high}"
        if self.choices and value not in self.choices:
            return f"{self.name}: {shown(value)} not one of {list(self.choices)}"
        return None


MiB = 1 << 20
PARAMS: tuple[Param, ...] = (
    # lifecycle
    Param("autostart", "bool", True, "Configure and activate at start (as a plain node). false: stay "
          "unconfigured for a lifecycle manager (<node>/change_state).", read_only=True),
    Param("executor", "string", "single_threaded", "Executor running the node's callbacks when started as "
          "bevpool_node: single_threaded (rclpy's SingleThreadedExecutor: a wait set over the node's entities, "
          "bounded by their histories under floods), events (rclpy's EventsExecutor, ROS 2 Kilted+: C++ "
          "dispatch, 1-2 ms less per DDS set on an idle host, but one queued event per message without "
          "bound: it fell behind flood after flood), or auto: events where this rclpy has it (docs/dds.md).",
          choices=("auto", "events", "single_threaded"), read_only=True),
    Param("watchdog.timeout_s", "double", 5.0, "When bevpool_node's executor, input or pooling thread makes "
          "no progress for this long, it logs where, reports ERROR on /diagnostics and exits with code 70 "
          "for a supervisor to restart it (a calibration change's re-prepare is exempt). 0: no watchdog "
          "(docs/ros_interface.md, \"What the node promises\").", low=0.0, high=3600.0, read_only=True),
    # calibration and geometry
    Param("rig_file", "string", "", "Rig YAML (geometry, BEV grid, default calibration): a path (relative "
          "to the node's working directory) or the name of a rig in the package's config/rigs/ "
          f"(nuscenes_bevdet_r50). Empty: config/{DEFAULT_RIG} from the package.", read_only=True),
    Param("camera_names", "string_array", [], "Cameras to subscribe, a subset of the rig's, in rig "
          "order. Empty: all rig cameras.", read_only=True),
    Param("ego_frame", "string", "base_link", "frame_id of the BEV message (the ego frame) and TF target."),
    Param("calibration.use_camera_info", "bool", True, "Take intrinsics (K, width, height) from each "
          "camera's CameraInfo; a change rebuilds the scatter map."),
    Param("calibration.use_tf", "bool", True, "Take camera->ego extrinsics from TF (ego_frame <- "
          "CameraInfo.header.frame_id) when tf2_ros is installed; otherwise the rig YAML's.", read_only=True),
    Param("calibration.tf_period_s", "double", 1.0, "How often TF extrinsics are looked up.", low=0.05, high=60.0,
          read_only=True),
    # backend
    Param("backend", "string", "best", "Pooling backend; unavailable ones fall back "
          "tensorrt -> cuda -> cpu with one warning. 'best' = first available.",
          choices=("best", "tensorrt", "cuda", "cpu"), read_only=True),
    Param("precision", "string", "fp16", "Kernel precision (cpu always computes fp32). 'auto' keeps "
          "fp8 only where it measures faster and within tolerance.",
          choices=("fp32", "fp16", "fp8", "auto"), read_only=True),
    Param("backend_fallback", "bool", True, "Allow falling back to a simpler backend (else exit).", read_only=True),
    Param("tensorrt.plugin", "string", "auto", "BEVPoolV3 plugin of the tensorrt backend: "
          "'library' (libbevpool_trt_plugin.so, C++), 'python', or 'auto' = the library when "
          "found (full TensorRT only).",
          choices=("auto", "library", "python"), read_only=True),
    Param("tensorrt.plugin_library", "string", "", "Path of libbevpool_trt_plugin.so. Empty: "
          "$BEVPOOL_TRT_PLUGIN_LIBRARY, build/trt_plugin/, <prefix>/lib, /usr/local/lib.",
          read_only=True),
    # synchronisation
    Param("gpu.stream_priority", "string", "highest", "Priority of the GPU backends' streams: 'highest' "
          "(the device's greatest: a set's kernels go ahead of queued work on normal-priority streams "
          "in this process or under MPS) or 'normal'. No effect between processes without MPS "
          "(docs/gpu_sharing.md).", choices=("highest", "normal"), read_only=True),
    Param("gpu.host_memory", "string", "auto", "How a GPU backend reaches a set's host payloads and the "
          "published grid: 'copy' (copy-engine transfers), 'mapped' (pinned host memory mapped into the "
          "device, moved by kernels: a set's GPU work is kernels only, which a GPU time-sliced with "
          "other processes runs in one slice), 'auto' = mapped on an integrated GPU, else copy "
          "(docs/gpu_sharing.md).", choices=("auto", "copy", "mapped"), read_only=True),
    Param("sync.slop_s", "double", 0.02, "Largest stamp spread inside one camera set, seconds.", low=0.0, high=1.0),
    Param("sync.camera_timeout_s", "double", 0.1, "A set still incomplete this long after its first "
          "message is resolved by sync.missing_camera_policy, seconds.", low=0.001, high=10.0),
    Param("sync.missing_camera_policy", "string", "drop", "Incomplete set at timeout: 'drop' it, or "
          "'zero_fill' the missing cameras (listed in BevFeature.missing_cameras).",
          choices=("drop", "zero_fill")),
    Param("sync.min_cameras", "integer", 1, "zero_fill publishes only with at least this many cameras "
          "present (<= number of cameras).", low=1, high=64),
    Param("sync.max_pending_sets", "integer", 4, "Sets waiting for cameras at once; one more evicts the "
          "oldest (bounds memory under floods).", low=1, high=64),
    Param("sync.max_future_s", "double", 1.0, "Tensors stamped more than this ahead of the node's clock "
          "are dropped (stamp_in_future); stamp 0 is always dropped (stamp_zero), seconds.", low=0.0, high=3600.0),
    Param("sync.use_message_filters", "bool", False, "Use message_filters.ApproximateTimeSynchronizer "
          "instead of the built-in synchroniser (only when message_filters is installed).", read_only=True),
    # inputs
    Param("input.depth_topic", "string", "cameras/{camera}/depth", "Depth Tensor topic ({camera} = name).",
          read_only=True),
    Param("input.feat_topic", "string", "cameras/{camera}/feat", "Feature Tensor topic.", read_only=True),
    Param("input.camera_info_topic", "string", "cameras/{camera}/camera_info", "CameraInfo topic.", read_only=True),
    Param("input.feature_layout", "string", "HWC", "Layout assumed when a feature Tensor's layout is "
          "empty; CHW is transposed once.", choices=("HWC", "CHW")),
    Param("input.max_tensor_bytes", "integer", TENSOR_BOUND_BYTES, "Larger tensors are dropped by the "
          "node before it decodes them; the input message type bounds every tensor at 16 MiB (a larger sample "
          "fails to deserialize and is dropped; with BEVPOOL_DDS_GUARD=1 Fast DDS refuses it before "
          "reassembly: docs/ros_interface.md, \"Memory\").", low=1024, high=TENSOR_BOUND_BYTES),
    Param("input.check_finite", "bool", True, "Drop tensors holding NaN or Inf."),
    Param("input.check_depth_range", "bool", True, "Drop depth tensors with a value outside a "
          "distribution's range [0, 1.01] (depth_out_of_range)."),
    Param("input.qos_reliability", "string", "best_effort", "Input QoS (sensor-data profile by default).",
          choices=("best_effort", "reliable"), read_only=True),
    Param("input.qos_depth", "integer", 5, "Input history depth per topic (KEEP_LAST).", low=1, high=100,
          read_only=True),
    # same-host GPU hand-off of the inputs (node/handoff_input.py, docs/gpu_handoff.md)
    Param("input.handoff", "string", "auto", "Camera tensors left on this GPU by their producer "
          "(bevpool_msgs/TensorHandoff on input.handoff_topic, read in place): 'auto' subscribes to "
          "them next to the CameraTensor topics (cameras may mix both), 'only' to them alone "
          "(configure fails without a GPU), 'none' not at all.", choices=("none", "auto", "only"),
          read_only=True),
    Param("input.handoff_topic", "string", "cameras/{camera}/{stream}_handoff", "TensorHandoff "
          "topic ({camera}, {stream} = depth | feat).", read_only=True),
    # depth cameras (bevpool_ros/io/depth_image.py): a metric depth Image instead of a [D, H, W] Tensor
    Param("input.depth_mode", "string_array", ["distribution"], "Per camera: 'distribution' (Tensor "
          "[D,H,W]) or 'image' (sensor_msgs/Image 32FC1 m / 16UC1 mm on the depth topic, turned into "
          "a distribution over the rig's bins). One value for all cameras, or one per camera in order.",
          read_only=True),
    Param("input.depth_image_distribution", "string", "one_hot", "image mode: weight in the nearest "
          "bin, or a Gaussian over the bins.", choices=("one_hot", "gaussian"), read_only=True),
    Param("input.depth_image_sigma_m", "double", 0.5, "image mode, gaussian: standard deviation, metres.",
          low=0.01, high=20.0, read_only=True),
    # outputs
    Param("output.bev_topic", "string", "bev/features", "BevFeature output topic.", read_only=True),
    Param("output.image_topic", "string", "bev/image", "sensor_msgs/Image visualisation topic.", read_only=True),
    Param("output.publish_image", "bool", True, "Publish the visualisation image."),
    Param("output.image_every_n", "integer", 1, "Publish the image for every n-th BEV set.", low=1, high=1000),
    Param("output.bev_dtype", "string", "float32", "dtype of the published BEV tensor.",
          choices=("float32", "float16")),
    Param("output.qos_reliability", "string", "reliable", "Output QoS reliability.",
          choices=("best_effort", "reliable"), read_only=True),
    Param("output.qos_depth", "integer", 2, "Output history depth (KEEP_LAST), grids kept per output topic: a "
          "reliable consumer may fall this many behind before the oldest grid it lacks is dropped for it; a lagging "
          "consumer makes the node hold up to depth x grid bytes. 2: the freshest grid wins (a planner); a "
          "recorder that must get every grid raises it.", low=1, high=100, read_only=True),
    Param("output.gpu_handoff", "bool", False, "Also hand each grid to same-host GPU consumers without "
          "copying it off the GPU (bevpool_msgs/BevHandoff on output.handoff_topic; cuda backend, devices "
          "with POSIX-fd memory handles; docs/gpu_handoff.md).", read_only=True),
    Param("output.handoff_topic", "string", "bev/handoff", "BevHandoff topic (output.gpu_handoff).", read_only=True),
    Param("output.handoff_ring_size", "integer", 4, "Device buffers in the hand-off ring: a consumer may "
          "lag this many grids minus one before its grid is overwritten.", low=2, high=64, read_only=True),
    # processing and reporting
    Param("processing.queue_size", "integer", 2, "Complete sets waiting for the pooling thread; one more "
          "drops the oldest (counted worker_busy).", low=1, high=16),
    Param("processing.skip_without_subscribers", "bool", True, "Pool nothing while no one subscribes to "
          "the BEV (output.bev_topic, or the hand-off topic when on): sets are counted "
          "skipped_no_subscribers, diagnostics stay OK and say idle."),
    Param("diagnostics.period_s", "double", 1.0, "Period of /diagnostics messages, seconds (while sets flow: "
          "published right after a set, at most once per set).", low=0.05, high=60.0),
    Param("diagnostics.latency_window", "integer", 1000, "Sets in the latency percentile window.", low=10, high=100000),
    Param("log_throttle_s", "double", 2.0, "Minimum seconds between two warnings of the same kind.", low=0.0,
          high=3600.0),
)
BY_NAME = {p.name: p for p in PARAMS}


def defaults() -> dict[str, Any]:
    return {p.name: p.default for p in PARAMS}


def check(name: str, value: Any) -> str | None:
    spec = BY_NAME.get(name)
    if spec is None:
        return None  # not ours (e.g. use_sim_time, extrinsics.<camera>)
    return spec.check(value)


def check_all(values: dict[str, Any], num_cameras: int | None = None) -> list[str]:
    """Every problem with a complete parameter set, including cross-parameter rules."""
    errors = [e for n, v in values.items() if (e := check(n, v))]
    if num_cameras is not None and "sync.min_cameras" in values and not errors:
        if values["sync.min_cameras"] > num_cameras:
            errors.append(f"sync.min_cameras: {values['sync.min_cameras']} > number of cameras {num_cameras}")
    modes = values.get("input.depth_mode", [])
    if isinstance(modes, (list, tuple)) and (not modes or set(modes) - {"distribution", "image"}):
        errors.append(f"input.depth_mode: each value 'distribution' or 'image', got {list(modes)}")
    if num_cameras is not None and isinstance(modes, (list, tuple)) and len(modes) not in (1, num_cameras):
        errors.append(f"input.depth_mode: {len(modes)} values for {num_cameras} cameras (give 1 or {num_cameras})")
    for n in ("input.depth_topic", "input.feat_topic", "input.camera_info_topic",
              "input.handoff_topic"):
        v = values.get(n)
        if isinstance(v, str) and "{camera}" not in v:
            errors.append(f"{n}: must contain '{{camera}}', got {shown(v)}")
    v = values.get("input.handoff_topic")
    if isinstance(v, str) and "{stream}" not in v:
        errors.append(f"input.handoff_topic: must contain '{{stream}}', got {shown(v)}")
    return errors


def extrinsics_param(camera: str) -> str:
    """Per-camera extrinsics override: [tx, ty, tz, qw, qx, qy, qz] camera->ego (empty = rig YAML)."""
    return f"extrinsics.{camera}"
