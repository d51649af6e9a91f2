"""bevpool_node's output side: the BevFeature, the visualisation image and the optional GPU
hand-off, published from the pooling thread. Publishers are lifecycle publishers: made on
configure, they publish only while the node is active.

The grid's dtype label comes from the pooled array itself (``PoolResult.bev``), never from the
parameter: ``output.bev_dtype`` may change between pooling and publishing."""
from __future__ import annotations

import time
from typing import Callable

from ..io.bev_message import bev_feature_msg, bev_rgb, image_msg, ns_to_time
from ..io.tensor_codec import ReusableBuffer
from ..ros.qos import make_qos
from .pooling import PoolResult


class LastStamp:
    """(epoch, stamp ns) of the last published grid, None before the first: published stamps never
    go back within a clock epoch. (With the hand-off core's launcher, words it shares: handoff_launch.py.)"""

    def __init__(self):
        self._value = None

    def get(self) -> tuple | None:
        return self._value

    def set(self, epoch: int, stamp_ns: int) -> None:
        self._value = (epoch, stamp_ns)


class Outputs:
    """``node``: the lifecycle node (publishers, logger, ``active``); ``cfg``, ``report``: what
    configure made; ``backend()``: the backend now (prepare may fall back to cpu)."""

    def __init__(self, node, *, cfg: dict, report, backend: Callable):
        from bevpool_msgs.msg import BevFeature
        from sensor_msgs.msg import Image

        self.node, self.cfg, self.report, self._backend = node, cfg, report, backend
        out_qos = make_qos(cfg["output.qos_reliability"], cfg["output.qos_depth"])
        self.bev_pub = node.create_lifecycle_publisher(BevFeature, cfg["output.bev_topic"], out_qos)
        self.image_pub = node.create_lifecycle_publisher(Image, cfg["output.image_topic"], out_qos)
        self.payload = ReusableBuffer()  # publish() copies synchronously: safe to reuse after it
        self.handoff = None
        self.handoff_off_reason = ""
        self.published = 0
        self.last = LastStamp()

    def start_handoff(self, backend) -> None:
        """output.gpu_handoff: the zero-copy GPU ring (after the backend prepared its buffers),
        or none, with one warning saying why."""
        cfg = self.cfg
        if not cfg["output.gpu_handoff"]:
            return
        from .handoff_output import HandoffOutput

        try:
            qos = make_qos(cfg["output.qos_reliability"], cfg["output.qos_depth"])
            self.handoff = HandoffOutput(self.node, backend, cfg["output.handoff_topic"],
                                         cfg["output.handoff_ring_size"], qos)
        except Exception as e:  # HandoffUnsupported, or a driver refusing the export
            self.node.get_logger().warning(f"output.gpu_handoff is off: {e}")
            self.handoff_off_reason = str(e)

    def close(self) -> None:
        node = self.node
        if self.handoff is not None:
            node.destroy_publisher(self.handoff.pub)
            self.handoff.close()
            self.handoff = None
        for pub in (self.bev_pub, self.image_pub):
            node.destroy_lifecycle_publisher(pub)

    def anyone_listening(self) -> bool:
        if self.bev_pub.get_subscription_count() > 0:
            return True
        return self.handoff is not None and self.handoff.pub.get_subscription_count() > 0

    def host_grid_needed(self) -> bool:
        """Asked by the pooling thread before each set: with the hand-off on and nobody on the
        BevFeature or image topics, the grid stays on the GPU (no 1-5 MB copy to the host on the
        hand-off consumers' path)."""
        if self.handoff is None or self.bev_pub.get_subscription_count() > 0:
            return True
        return bool(self.cfg["output.publish_image"]) and self.image_pub.get_subscription_count() > 0

    def status(self) -> dict:
        if self.handoff is not None:
            state = "on"
        elif not self.cfg["output.gpu_handoff"]:
            state = "off"
        else:
            state = f"refused: {self.handoff_off_reason}"[:200]
        return {"gpu_handoff": state}

    def publish(self, r: PoolResult) -> None:
        """Runs in the pooling thread."""
        node, s = self.node, r.camera_set
        if not node.active:
            return  # deactivated while this set was pooled: nothing leaves an inactive node
        if s.epoch is not None:
            last = self.last.get()
            if last is not None and last[0] == s.epoch and s.stamp_ns <= last[1]:
                self.report.drop("stamp_regression", f"set {s.stamp_ns} ns is not newer than the "
                                 f"last published {last[1]} ns")
                return
            self.last.set(s.epoch, s.stamp_ns)
        cfg = self.cfg
        header = self._header(s) if self.handoff is not None else None  # the BevFeature builds its own
        t_handoff = time.perf_counter()
        if self.handoff is not None:  # first: its consumers wait for no host copy or message build
            self._publish_handoff(r, header)
        t_msg = time.perf_counter()
        if self.handoff is not None and (r.bev is None or self.bev_pub.get_subscription_count() == 0):
            # hand-off consumers only: building and serialising the BevFeature (a copy of the
            # whole grid, twice; 1-3 ms on the H200 host) would serve nobody. (r.bev None: the
            # grid stayed on the GPU; a BevFeature subscriber that appeared meanwhile gets the next)
            t_pub = done = t_msg
            self.report.count("handoff_only_grids")
        else:
            backend = self._backend()
            msg = bev_feature_msg(
                r.bev, r.rig, s.stamp_ns, cfg["ego_frame"], cameras=list(s.frames),
                camera_stamps_ns=[s.camera_stamp_ns(c) for c in s.frames], missing=s.missing,
                backend=backend.name, precision=backend.precision,  # fixed per prepare()
                dtype=r.bev.dtype.name, reuse=self.payload)
            t_pub = time.perf_counter()
            self.bev_pub.publish(msg)
            done = time.perf_counter()
        self.report.published(r, t_msg, t_pub, done, handoff_s=t_msg - t_handoff)
        self.published += 1
        if r.bev is not None and cfg["output.publish_image"] and self.published % cfg["output.image_every_n"] == 0:
            if self.image_pub.get_subscription_count() > 0:  # costs a few ms: only when watched
                self.image_pub.publish(image_msg(bev_rgb(r.bev, r.rig), header or self._header(s)))

    def launched(self, announcement: bytes | None, arrivals: tuple, launched: float, done: float) -> None:
        """A grid the hand-off core pooled and announced to the linked consumers (the loop's thread,
        after its datagram left): its counts, and its ROS copy unless the core published it
        (``announcement`` None). ``arrivals``: the set's (first, last); ``launched``, ``done``: the
        core's launch and host wait's end (perf_counter s)."""
        if not self.node.active or self.handoff is None:
            return  # deactivated as it ran: the linked consumers had it, ROS gets nothing more
        t_pub = time.perf_counter()
        if announcement is not None:
            self.handoff.pub.publish(announcement)
            self.report.launched(arrivals, launched, done, t_pub, time.perf_counter())
        else:  # published by the core right after the datagram: no Python time of its own
            self.report.launched(arrivals, launched, done, done, done)
        self.report.count("handoff_only_grids")
        self.published += 1

    def _header(self, s):
        from std_msgs.msg import Header

        return Header(stamp=ns_to_time(s.stamp_ns), frame_id=self.cfg["ego_frame"])

    def _publish_handoff(self, r: PoolResult, header) -> None:
        try:
            self.handoff.publish(header, r.rig)
        except Exception as e:  # the BevFeature still goes out; only the hand-off misses this grid
            self.report.count("handoff_failed")
            self.report.warn("handoff_failed", f"GPU hand-off failed: {type(e).__name__}: {e}")
