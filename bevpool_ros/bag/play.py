"""Publish a bag's messages as recorded (raw CDR) at the recorded pace: ``ros2 bag play`` where
rosbag2 is not installed, and the source of replay evaluation."""
from __future__ import annotations

import time
from pathlib import Path

from rclpy.node import Node

from ..ros.qos import make_qos
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
        from .sets import tensor_entries

        self.messages = list(read_bag(bag, topics))
        # the tensor messages' (camera, stream, header stamp), decoded once here, not while playing
        self.entries = tensor_entries(self.messages)
        self.keys: list[tuple[str, int] | None] = [None] * len(self.messages)
        for e in self.entries:
            self.keys[e.index] = (e.camera, e.stamp_ns)
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
        """Play the rest of the bag from now, at the recorded pace x ``rate``;
        ``on_sent((camera, stamp_ns), time.time_ns())`` after each tensor message."""
        t0_bag = self.messages[self.sent].t_ns if self.sent < len(self.messages) else 0
        t0 = time.perf_counter()

        def tick():
            now = time.perf_counter()
            while self.sent < len(self.messages):
                m = self.messages[self.sent]
                if (m.t_ns - t0_bag) / 1e9 / rate > now - t0:
                    return
                self._publish(self.sent, on_sent)
                self.sent += 1
            self._timer.cancel()

        self._timer = self.create_timer(0.001, tick)

    def publish_through(self, index: int, on_sent=None) -> None:
        """Publish every message not yet sent up to ``index`` (inclusive) now (paced replay)."""
        while self.sent <= min(index, len(self.messages) - 1):
            self._publish(self.sent, on_sent)
            self.sent += 1

    def publish_again(self, indices, on_sent=None) -> None:
        """Publish these (already sent) messages once more, as recorded."""
        for i in indices:
            self._publish(i, on_sent)

    def _publish(self, i: int, on_sent) -> None:
        self.pubs[self.messages[i].topic].publish(self.messages[i].raw)
        if on_sent and self.keys[i]:
            on_sent(self.keys[i], time.time_ns())  # the clock DDS stamps arrivals with

    @property
    def done(self) -> bool:
        return self.sent >= len(self.messages)
