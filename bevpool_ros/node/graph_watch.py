"""Publishers on the node's input topics that DDS never delivers, found in the ROS graph.

Two kinds are silent on the wire, so their camera just goes missing:
- a publisher of the wrong type (one still on ``bevpool_msgs/Tensor``, a CameraTensor publisher
  on an image-mode depth topic): DDS never matches a writer whose type differs from the reader's;
- a publisher whose QoS is incompatible with the node's subscription (best effort on a reliable
  input). The middleware's ``incompatible_qos`` event says so too, but under rmw_fastrtps the node
  takes no QoS events at all: taking one locks the event, then the reader, while a Fast DDS
  receive thread locks them in the other order, a deadlock under bursts
  (reporting.subscription_events).
The graph lists both; each publisher is logged once, counted (``wrong_type_publishers``,
``dds_incompatible_qos``) and reported in /diagnostics while it exists.

It also sees publishers leave: ``on_check(left)`` gets, after every check, the topics that a
publisher of the expected type has left since the last one (reader_renewal.py renews their readers).
"""
from __future__ import annotations

import time

from ..logtext import clip, shown
from ..ros.housekeeping import HousekeepingTimer

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


def incompatible_qos(offered, requested) -> str | None:
    """Why a publisher offering ``offered`` never reaches a subscription requesting
    ``requested`` (None when it does, or when the graph cannot tell)."""
    from rclpy.qos import QoSCompatibility, qos_check_compatible

    try:
        compatibility, reason = qos_check_compatible(offered, requested)
    except Exception:  # an RMW that reports no QoS in its graph: nothing to conclude
        return None
    if compatibility != QoSCompatibility.ERROR:
        return None
    reason = (reason or "").removeprefix("ERROR:").strip().rstrip(";").strip()
    return reason or "incompatible QoS"


class PublisherWatch:
    def __init__(self, node, expected: dict[str, tuple], report, on_check=None):
        """``expected``: fully qualified input topic -> (its type 'pkg/msg/Type', the node's
        subscription QoS or None where no publisher can be incompatible); ``node``: the graph,
        its logger and timers; ``report``: where problems are counted and listed;
        ``on_check(left)``: called after each check with the topics publishers have left."""
        self.node, self.report, self.on_check = node, report, on_check
        self.expected = expected
        self._publishers: dict[str, set] = {}  # topic -> gids of its publishers of the expected type
        self.seen: set[tuple] = set()   # (kind, topic, gid) of every publisher already logged
        self._nameless: dict[tuple, float] = {}  # (kind, topic, gid) -> first seen without a name
        self._timer = HousekeepingTimer(node, PERIOD_S, self.check)

    def close(self) -> None:
        self._timer.destroy()
        self.report.publisher_problems.clear()

    def check(self) -> None:
        node, found, live, left = self.node, {}, set(), []
        for topic, (want, qos) in self.expected.items():
            try:
                infos = node.get_publishers_info_by_topic(topic)
            except Exception:  # the graph is advisory: a failed query is retried next period
                continue
            gids = {bytes(i.endpoint_gid) for i in infos if i.topic_type == want}
            if self._publishers.get(topic, set()) - gids:
                left.append(topic)
            self._publishers[topic] = gids
            for info in infos:
                if info.topic_type != want:
                    kind, what = "wrong_type", f"{info.topic_type} (expected {want})"
                    line = (f"wrong type on input topic {shown(topic)}: {{who}} publishes "
                            f"{shown(info.topic_type)}, this node subscribes {want}; DDS never "
                            "delivers its messages")
                else:
                    why = incompatible_qos(info.qos_profile, qos) if qos is not None else None
                    if why is None:
                        continue
                    kind, what = "incompatible_qos", clip(why, 200)
                    line = (f"incompatible QoS on input topic {shown(topic)}: {{who}} offers QoS "
                            f"this node's subscription cannot take ({what}); its messages never "
                            "arrive")
                who = publisher_name(info)
                found[f"{kind} {topic} <- {who}"] = what
                key = (kind, topic, bytes(info.endpoint_gid))
                live.add(key)
                if key not in self.seen:
                    first = self._nameless.setdefault(key, time.monotonic())
                    if who == OUTSIDE and time.monotonic() - first < NAME_WAIT_S:
                        continue  # its name may still come: log once, with it
                    self.seen.add(key)
                    self._nameless.pop(key, None)
                    self.report.count("wrong_type_publishers" if kind == "wrong_type"
                                      else "dds_incompatible_qos")
                    node.get_logger().warning(clip(line.format(who=who), 400))
        for key in set(self._nameless) - live:  # gone before its name came
            del self._nameless[key]
        self.report.publisher_problems.clear()  # only those that still exist
        self.report.publisher_problems.update(found)
        if self.on_check is not None:
            self.on_check(left)
