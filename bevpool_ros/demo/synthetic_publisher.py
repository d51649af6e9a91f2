"""Synthetic nuScenes-rig camera publisher: per camera depth + feat Tensors and CameraInfo.

Frames come from ``bevpool_ros.synthetic.SyntheticScene`` (objects around the vehicle, so the
pooled BEV grid shows them). Messages are built once per scene frame and re-stamped, so the
publisher itself costs little and can drive the node at 20 Hz and beyond.
Standalone: ``bevpool-synthetic --rate 20 --frames 200`` (``bevpool_ros/cli/synthetic.py``).
"""
from __future__ import annotations

import time

import numpy as np
from rclpy.node import Node

from ..io.bev_message import ns_to_time
from ..io.tensor_codec import make_camera_tensor
from ..rig import Rig
from ..ros.qos import make_qos
from .waiting import poll_until


def camera_info_msg(rig: Rig, index: int, stamp, frame_id: str):
    from sensor_msgs.msg import CameraInfo

    cam = rig.cameras[index]
    m = CameraInfo()
    m.header.stamp = stamp
    m.header.frame_id = frame_id
    m.width, m.height = cam.width, cam.height
    m.distortion_model = "plumb_bob"
    m.d = [0.0] * 5
    m.k = [float(v) for row in cam.K for v in row]
    m.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    m.p = [m.k[0], 0.0, m.k[2], 0.0, 0.0, m.k[4], m.k[5], 0.0, 0.0, 0.0, 1.0, 0.0]
    return m


class SyntheticRigPublisher(Node):
    def __init__(self, rig: Rig, seed: int = 0, dtype: str = "float32", feature_layout: str = "HWC",
                 cycle: int = 8, reliability: str = "reliable", depth: int = 5,
                 topic_pattern: str = "cameras/{camera}/{stream}", node_name: str = "bevpool_synthetic", **kw):
        super().__init__(node_name, **kw)
        from bevpool_msgs.msg import CameraTensor
        from sensor_msgs.msg import CameraInfo

        from ..synthetic import SyntheticScene

        self.rig = rig
        self.scene = SyntheticScene(rig, seed=seed)
        self.dtype = dtype
        self.layout = feature_layout
        self.cycle = cycle
        self._frames: dict[int, tuple] = {}
        qos = make_qos(reliability, depth)
        self.pubs = {}
        for cam in rig.cameras:
            for stream in ("depth", "feat"):
                self.pubs[(cam.name, stream)] = self.create_publisher(
                    CameraTensor, topic_pattern.format(camera=cam.name, stream=stream), qos)
            self.pubs[(cam.name, "camera_info")] = self.create_publisher(
                CameraInfo, topic_pattern.format(camera=cam.name, stream="camera_info"), qos)
        self.sent = 0
        self.last_send_time: float | None = None   # perf_counter of the last message of the last frame
        self._timer = None

    # frames -----------------------------------------------------------------------------
    def arrays(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """(depth [N,D,H,W] float32, feat [N,H,W,C] float32) of scene frame ``index % cycle``."""
        return self.scene.frame(index % self.cycle)

    def _messages(self, index: int):
        key = index % self.cycle
        if key not in self._frames:
            depth, feat = self.arrays(key)
            msgs = []
            for n, cam in enumerate(self.rig.cameras):
                f = feat[n] if self.layout == "HWC" else feat[n].transpose(2, 0, 1)
                msgs.append((cam.name,
                             make_camera_tensor(depth[n], "depth", "DHW", self.dtype),
                             make_camera_tensor(f, "feat", self.layout, self.dtype)))
            self._frames[key] = msgs
        return self._frames[key]

    def publish_frame(self, index: int, stamp_ns: int | None = None, skip=(), camera_info: bool = True,
                      stamp_offsets_ns: dict | None = None, replace: dict | None = None) -> int:
        """Publish frame ``index`` of every camera (except ``skip``) with one stamp; returns it.

        ``replace[(camera, stream)] = CameraTensor`` sends that message instead (stamped like the rest),
        which is how tests inject bad input into an otherwise valid set.
        """
        stamp_ns = time.time_ns() if stamp_ns is None else int(stamp_ns)
        for n, (name, depth_msg, feat_msg) in enumerate(self._messages(index)):
            if name in skip:
                continue
            st = ns_to_time(stamp_ns + (stamp_offsets_ns or {}).get(name, 0))
            if camera_info:
                self.pubs[(name, "camera_info")].publish(camera_info_msg(self.rig, n, st, f"{name.lower()}_optical"))
            for stream, msg in (("depth", depth_msg), ("feat", feat_msg)):
                msg = (replace or {}).get((name, stream), msg)
                msg.header.stamp = st
                msg.header.frame_id = f"{name.lower()}_optical"
                self.pubs[(name, stream)].publish(msg)
        self.last_send_time = time.perf_counter()
        self.sent += 1
        return stamp_ns

    def start(self, rate_hz: float, frames: int = 0, on_frame=None) -> None:
        """Publish at ``rate_hz`` from a timer; ``frames`` > 0 stops after that many (counted from
        this start: a session streams several runs through one publisher)."""
        first = self.sent

        def tick():
            if frames and self.sent - first >= frames:
                self._timer.cancel()
                return
            stamp = self.publish_frame(self.sent)
            if on_frame:
                on_frame(self.sent - 1, stamp, self.last_send_time)
        if self._timer is not None:
            self.destroy_timer(self._timer)
        self._timer = self.create_timer(1.0 / rate_hz, tick)

    @property
    def done(self) -> bool:
        return self._timer is not None and self._timer.is_canceled()

    def subscribers_matched(self) -> bool:
        """Every tensor topic has a subscriber."""
        return all(p.get_subscription_count() > 0 for k, p in self.pubs.items() if k[1] != "camera_info")

    def topics_without_subscribers(self) -> list[str]:
        """Every topic of the rig (CameraInfo too) that no subscription has matched yet."""
        return [p.topic_name for p in self.pubs.values() if p.get_subscription_count() == 0]

    def wait_for_subscribers(self, timeout: float = 15.0, spin=None) -> bool:
        """True once every tensor topic has a subscriber (discovery can take seconds)."""
        return poll_until(self.subscribers_matched, timeout, spin)
