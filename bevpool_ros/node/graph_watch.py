"""Publishers of the wrong type on the node's input topics, found in the ROS graph.

DDS never matches a writer whose type differs from the reader's, so such a producer (one still
on ``bevpool_msgs/Tensor``, a CameraTensor publisher on an image-mode depth topic) is silent:
its camera just goes missing. The graph still lists it; each one is logged once, counted
(``wrong_type_publishers``) and reported in /diagnostics while it exists.
"""
from __future__ import annotations

import time

from ..logtext import clip, shown
from .housekeeping import HousekeepingTimer

PERIOD_S = 1.0  # a graph query is a local cache read: cheap at this rate
# A writer's ROS node name arrives with ROS's discovery info, which may lag the DDS discovery of
# the writer itself (seen on a loaded machine): wait this long for it before logging a nameless one.
NAME_WAIT_S = 5.0
OUTSIDE = "a publisher outside any ROS node"


def publisher_name(info) -> str:
    ns, name = info.node_namespace, info.node_name
    if not name or name.startswith("_"):  # a DDS writer without a ROS node (rmw says "_NODE_...")
        return OUTSIDE
    return (ns.rstrip("/") + "/" + name) if ns else name


class WrongTypeWatch:
    def __init__(self, node, expected: dict[str, str]):
        """``expected``: fully qualified input topic -> its type ('pkg/msg/Type')."""
        self.node = node
        self.expected = expected
        self.seen: set[tuple] = set()   # (topic, gid) of every wrong publisher already logged
        self._nameless: dict[tuple, float] = {}  # (topic, gid) -> first seen without a node name
        self._timer = HousekeepingTimer(node, PERIOD_S, self.check)

    def close(self) -> None:
        self._timer.destroy()
        self.node.report.wrong_types.clear()

    def check(self) -> None:
        node, found, live = self.node, {}, set()
        for topic, want in self.expected.items():
            try:
                infos = node.get_publishers_info_by_topic(topic)
            except Exception:  # the graph is advisory: a failed query is retried next period
                continue
            for info in infos:
                if info.topic_type == want:
                    continue
                who = publisher_name(info)
                found[f"{topic} <- {who}"] = f"{info.topic_type} (expected {want})"
                key = (topic, bytes(info.endpoint_gid))
                live.add(key)
                if key not in self.seen:
                    first = self._nameless.setdefault(key, time.monotonic())
                    if who == OUTSIDE and time.monotonic() - first < NAME_WAIT_S:
                        continue  # its name may still come: log once, with it
                    self.seen.add(key)
                    self._nameless.pop(key, None)
                    node.report.count("wrong_type_publishers")
                    node.get_logger().warning(clip(
                        f"wrong type on input topic {shown(topic)}: {who} publishes "
                        f"{shown(info.topic_type)}, this node subscribes {want}; DDS never "
                        "delivers its messages", 400))
        for key in set(self._nameless) - live:  # gone before its name came
            del self._nameless[key]
        node.report.wrong_types.clear()  # only those that still exist
        node.report.wrong_types.update(found)
