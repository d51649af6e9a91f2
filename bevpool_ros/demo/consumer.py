"""A downstream consumer of bevpool_node: BEV tensors, visualisation images, diagnostics.

Decodes with nothing but the message (shape, dtype, grid geometry), as any other node would.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from rclpy.node import Node

from ..io.bev_message import image_to_rgb, stamp_to_ns
from ..io.tensor_codec import decode_any
from ..ros.diagnostics import status_values
from ..ros.qos import make_qos


@dataclass
class ReceivedBev:
    stamp_ns: int
    bev: np.ndarray            # [Z, Y, X, C] as float32 or float16
    msg: object
    received: float            # perf_counter when this process handled it (its callback ran)
    arrived_ns: int = 0        # system clock when DDS received it (before this process's executor got to it)


def cell_center(msg, z: int, y: int, x: int) -> tuple[float, float, float]:
    """Ego-frame centre of a cell, from the message's geometry only."""
    return (msg.origin.x + (x + 0.5) * msg.resolution_x, msg.origin.y + (y + 0.5) * msg.resolution_y,
            msg.origin.z + (z + 0.5) * msg.resolution_z)


def diagnostics_dict(arr) -> dict:
    """A DiagnosticArray's first status as {level, message, **values}."""
    level = arr.status[0].level
    return {"level": int.from_bytes(level, "little") if isinstance(level, bytes) else int(level),
            "message": arr.status[0].message, **status_values(arr)}


class BevConsumer(Node):
    def __init__(self, bev_topic: str = "bev/features", image_topic: str = "bev/image", keep: int = 64,
                 node_name: str = "bevpool_consumer", subscribe_image: bool = True, **kw):
        super().__init__(node_name, **kw)
        from bevpool_msgs.msg import BevFeature
        from diagnostic_msgs.msg import DiagnosticArray
        from sensor_msgs.msg import Image

        qos = make_qos("reliable", 10)
        self.bevs: deque[ReceivedBev] = deque(maxlen=keep)
        self.images: deque = deque(maxlen=4)
        self.diagnostics: deque = deque(maxlen=16)
        self.count = 0
        self.on_bev = None
        self._lock = threading.Lock()
        self.bev_sub = self.create_subscription(BevFeature, bev_topic, self._on_bev, qos)
        self.image_sub = (self.create_subscription(Image, image_topic, lambda m: self.images.append(m), qos)
                          if subscribe_image else None)
        self.diag_sub = self.create_subscription(DiagnosticArray, "/diagnostics",
                                                 lambda m: self.diagnostics.append(m), 10)

    def _on_bev(self, msg, info) -> None:
        """``info``: rclpy's MessageInfo, whose received_timestamp DDS set on arrival."""
        now = time.perf_counter()
        bev = decode_any(msg.tensor).reshape(msg.layers, msg.height, msg.width, msg.channels)
        arrived = info["received_timestamp"] or time.time_ns()  # 0: an rmw that does not stamp it
        r = ReceivedBev(stamp_to_ns(msg.header.stamp), bev, msg, now, arrived)
        with self._lock:
            self.bevs.append(r)
            self.count += 1
        if self.on_bev:
            self.on_bev(r)

    def by_stamp(self) -> dict[int, ReceivedBev]:
        with self._lock:
            return {r.stamp_ns: r for r in self.bevs}

    def latest_image_rgb(self) -> np.ndarray | None:
        return image_to_rgb(self.images[-1]) if self.images else None

    def latest_diagnostics(self, name_contains: str = "bev pooling") -> dict[str, str] | None:
        for arr in reversed(self.diagnostics):
            if arr.status and name_contains in arr.status[0].name:
                return diagnostics_dict(arr)
        return None

    def publisher_matched(self) -> bool:
        return self.bev_sub.get_publisher_count() > 0
