"""Publish a bag's messages as recorded (raw CDR) at the recorded pace: ``ros2 bag play`` where
rosbag2 is not installed, and the source of replay evaluation."""
from __future__ import annotations

import time
from pathlib import Path

from rclpy.node import Node

from ..node.qos import make_qos
from .io import camera_stream, message_class, read_bag


def played_type(m) -> str:
    """The type a message is published as. Camera tensors recorded as ``Tensor`` (before the node
    took the bounded ``CameraTensor``) go out as CameraTensor: the two share one CDR layout
    (bounded strings and sequences serialize like unbounded ones), so the raw bytes stay valid."""
    where = camera_stream(m.topic)
    if m.msgtype == "bevpool_msgs/msg/Tensor" and where is not None and where[1] != "camera_info":
        return "bevpool_msgs/msg/CameraTensor"
    return m.msgtype


class BagPlayer(Node):
    def __init__(self, bag: str | Path, topics=None, reliability: str = "reliable", depth: int = 10,
                 node_name: str = "bevpool_bag_player", **kw):
        super().__init__(node_name, **kw)
        from ..io.bev_message import stamp_to_ns

        self.messages = list(read_bag(bag, topics))
        # (camera, header stamp) of each tensor message, decoded once here, not while playing
        self.keys = []
        for m in self.messages:
            where = camera_stream(m.topic)
            tensor = where is not None and where[1] != "camera_info"
            self.keys.append((where[0], stamp_to_ns(m.decode().header.stamp)) if tensor else None)
        qos = make_qos(reliability, depth)
        self.pubs = {}
        for m in self.messages:
            if m.topic not in self.pubs:
                self.pubs[m.topic] = self.create_publisher(message_class(played_type(m)), m.topic, qos)
        self.sent = 0
        self._timer = None

    @property
    def duration_s(self) -> float:
        return (self.messages[-1].t_ns - self.messages[0].t_ns) / 1e9 if self.messages else 0.0

    def subscribers_ready(self) -> bool:
        """Every topic but CameraInfo has a subscriber (discovery can take seconds)."""
        return all(p.get_subscription_count() > 0 for t, p in self.pubs.items() if not t.endswith("camera_info"))

    def start(self, rate: float = 1.0, on_sent=None) -> None:
        """Play from now; ``on_sent((camera, stamp_ns), perf_counter)`` after each tensor message."""
        t0_bag = self.messages[0].t_ns if self.messages else 0
        t0 = time.perf_counter()

        def tick():
            now = time.perf_counter()
            while self.sent < len(self.messages):
                m = self.messages[self.sent]
                if (m.t_ns - t0_bag) / 1e9 / rate > now - t0:
                    return
                self.pubs[m.topic].publish(m.raw)
                if on_sent and self.keys[self.sent]:
                    on_sent(self.keys[self.sent], time.perf_counter())
                self.sent += 1
            self._timer.cancel()

        self._timer = self.create_timer(0.001, tick)

    @property
    def done(self) -> bool:
        return self.sent >= len(self.messages)
