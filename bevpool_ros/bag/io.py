"""rosbag2 files (MCAP, or SQLite3 ``.db3`` as older ROS 2 releases record) through ``rosbags``,
with rclpy messages on both sides.

Messages are (de)serialised by rclpy itself (CDR), so a bag written here replays into any ROS 2
node and ``ros2 bag play`` reads it; ``rosbags`` only handles the container and the message
definitions it stores (``bevpool_msgs`` registered from its .msg files).
"""
from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from rosbags.rosbag2 import Reader, StoragePlugin, Writer
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from ..logtext import clip

OUR_TYPES = ("bevpool_msgs/msg/Tensor", "bevpool_msgs/msg/BevFeature", "bevpool_msgs/msg/BoundedHeader",
             "bevpool_msgs/msg/CameraTensor")


class BagError(ValueError):
    """A bag that cannot be read or written (truncated, bad metadata, output already there)."""


@contextlib.contextmanager
def _bag_errors(path, doing: str):
    """Whatever rosbags, mcap or CDR raise on a damaged bag becomes one BagError naming the file."""
    try:
        yield
    except BagError:
        raise
    except Exception as e:
        why = " ".join(str(e).split())  # one line, whatever the parser printed
        raise BagError(clip(f"{path}: cannot {doing} ({type(e).__name__}: {why})", 300)) from None


def _msg_dir() -> Path:
    from ..paths import msg_dir

    return msg_dir()


def typestore():
    """ROS 2 kilted standard types plus bevpool_msgs."""
    store = get_typestore(Stores.ROS2_KILTED)
    folder = _msg_dir()
    types = {}
    for name in OUR_TYPES:
        types.update(get_types_from_msg((folder / f"{name.rsplit('/', 1)[1]}.msg").read_text(), name))
    store.register(types)
    return store


def camera_stream(topic: str) -> tuple[str, str] | None:
    """'/ns/cameras/CAM_FRONT/depth' -> ('CAM_FRONT', 'depth'): the node's default topic pattern."""
    parts = topic.strip("/").split("/")
    if len(parts) >= 3 and parts[-1] in ("depth", "feat", "camera_info"):
        return parts[-2], parts[-1]
    return None


def message_class(msgtype: str):
    """'pkg/msg/Name' -> the rclpy message class."""
    pkg, kind, name = msgtype.split("/")
    return getattr(importlib.import_module(f"{pkg}.{kind}"), name)


STORAGES = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}


class BagWriter:
    """Write rclpy messages into a new rosbag2 directory (MCAP storage, or ``sqlite3``: .db3)."""

    def __init__(self, path: str | Path, storage: str = "mcap"):
        self.path = Path(path)
        if self.path.exists():
            raise BagError(f"{self.path} already exists: choose another output or remove it")
        self.store = typestore()
        self._writer = Writer(self.path, version=9, storage_plugin=STORAGES[storage])
        self._connections = {}

    def __enter__(self) -> "BagWriter":
        self._writer.open()
        return self

    def __exit__(self, *exc) -> None:
        self._writer.close()

    def write(self, topic: str, msg, t_ns: int) -> None:
        from rclpy.serialization import serialize_message

        conn = self._connections.get(topic)
        if conn is None:
            t = type(msg)
            msgtype = f"{t.__module__.split('.')[0]}/msg/{t.__name__}"
            conn = self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=self.store)
        self._writer.write(conn, int(t_ns), serialize_message(msg))

    def write_raw(self, topic: str, msgtype: str, raw: bytes, t_ns: int) -> None:
        """A message as CDR bytes (copied from another bag: no decode, no re-encode)."""
        conn = self._connections.get(topic)
        if conn is None:
            conn = self._connections[topic] = self._writer.add_connection(topic, msgtype, typestore=self.store)
        self._writer.write(conn, int(t_ns), raw)


@dataclass(frozen=True)
class BagMessage:
    topic: str
    msgtype: str
    t_ns: int          # receive (log) time in the bag
    raw: bytes         # CDR, publishable as is

    def decode(self):
        from rclpy.serialization import deserialize_message

        with _bag_errors(self.topic, f"decode a {self.msgtype} message"):
            return deserialize_message(self.raw, message_class(self.msgtype))


def read_bag(path: str | Path, topics=None) -> Iterator[BagMessage]:
    """Messages in log-time order (all topics, or those in ``topics``); BagError on a damaged bag."""
    with _bag_errors(path, "read the bag"), Reader(Path(path)) as reader:
        conns = [c for c in reader.connections if topics is None or c.topic in topics]
        for conn, t_ns, raw in reader.messages(connections=conns):
            yield BagMessage(conn.topic, conn.msgtype, t_ns, bytes(raw))


def bag_summary(path: str | Path) -> dict:
    with _bag_errors(path, "read the bag"), Reader(Path(path)) as reader:
        return {"path": str(path), "messages": reader.message_count,
                "duration_s": reader.duration / 1e9 if reader.message_count else 0.0,
                "topics": {c.topic: {"type": c.msgtype, "count": c.msgcount} for c in reader.connections}}
