"""Input tensor readers renewed after a publisher leaves their topic: memory that returns after
every burst (docs/ros_interface.md, "Memory").

A best-effort Fast DDS reader reassembles a fragmented sample in a payload reserved at the
sample's full size when its first fragment arrives. When the writer leaves before the last
fragment (a producer stopped or restarted mid-sample, fragments lost under a flood), the reader
keeps that payload for as long as the reader lives (Fast DDS 3.2.2: heaptrack traced the node's
growth, ~8 MiB per flood of three producers, to ``StatelessReader::process_data_frag_msg`` ->
``reserve_cache``; deleting the reader gave it back). So after a publisher of a tensor topic
leaves, the node makes a new subscription on that topic, and deletes the old one once the new
one has matched as many publishers (or after ``RETIRE_AFTER_S``): make before break, so no
sample of the publishers that stay is lost. While both exist each sample arrives twice; the
twin is recognised by its stamp and ignored, uncounted.

Publishers leaving are found in the ROS graph (graph_watch.PublisherWatch, once a second).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable

RETIRE_AFTER_S = 3.0   # the old reader goes by then even if the new one matched fewer writers
TWIN_GRACE_S = 1.0     # twins are still recognised this long after the old reader went
TWIN_STAMPS = 32       # stamps remembered per stream while twins may arrive


class RenewableReaders:
    def __init__(self, node, on_change: Callable = lambda subscriptions: None):
        """``node``: its create/destroy subscription API and logger; ``on_change(subscriptions)``:
        told every live reader, old ones included, whenever that set changes (a thread that
        serves them, ros/subscription_thread.py)."""
        self.node = node
        self.on_change = on_change
        self._makers: dict[str, Callable] = {}     # resolved topic -> makes its subscription
        self._keys: dict[str, tuple] = {}          # resolved topic -> (camera, stream)
        self.subs: dict[str, object] = {}          # resolved topic -> its live subscription
        self._retiring: dict[str, tuple] = {}      # topic -> (old subscription, deadline)
        self._twins: dict[tuple, tuple] = {}       # (camera, stream) -> (recent stamps, until)
        self._twins_lock = threading.Lock()        # is_twin may run in another thread than renewals
        self.renewed = 0

    def add(self, topic: str, key: tuple, make: Callable):
        """Subscribe ``topic`` (resolved name) with ``make()``; ``key``: the stream it carries."""
        self._makers[topic], self._keys[topic] = make, key
        self.subs[topic] = make()
        self._changed()
        return self.subs[topic]

    def publishers_left(self, topic: str) -> None:
        """A publisher left ``topic``: a new reader for it, the old one retired later."""
        make = self._makers.get(topic)
        if make is None:
            return  # not a tensor topic (CameraInfo and announcements are never fragmented)
        if topic in self._retiring:  # renewed already: the newer reader may hold the leftover too
            self._retire(topic)
        old = self.subs[topic]
        self.subs[topic] = make()
        self._retiring[topic] = (old, time.monotonic() + RETIRE_AFTER_S)
        with self._twins_lock:
            self._twins[self._keys[topic]] = (deque(maxlen=TWIN_STAMPS), float("inf"))
        self.renewed += 1
        self._changed()

    def retire_matched(self) -> None:
        """Delete the old readers whose successor matched as many publishers, or whose time is up."""
        now = time.monotonic()
        for topic, (old, deadline) in list(self._retiring.items()):
            try:
                ready = self.subs[topic].get_publisher_count() >= old.get_publisher_count()
            except Exception:  # a count the middleware cannot give: the deadline decides
                ready = False
            if ready or now >= deadline:
                self._retire(topic)
                self._changed()

    def _retire(self, topic: str) -> None:
        old, _ = self._retiring.pop(topic)
        self.node.destroy_subscription(old)
        key = self._keys[topic]
        with self._twins_lock:
            stamps, _ = self._twins[key]
            self._twins[key] = (stamps, time.monotonic() + TWIN_GRACE_S)

    def _changed(self) -> None:
        self.on_change([*self.subs.values(), *(old for old, _ in self._retiring.values())])

    def is_twin(self, key: tuple, stamp_ns: int) -> bool:
        """This sample already came through the other reader of its topic (checked before it is
        decoded, by the subscription's callback)."""
        with self._twins_lock:
            twins = self._twins.get(key)
            if twins is None:
                return False
            stamps, until = twins
            if time.monotonic() > until:
                self._twins.pop(key, None)
                return False
            if stamp_ns in stamps:
                return True
            stamps.append(stamp_ns)
            return False

    def close(self) -> None:
        for topic in list(self._retiring):
            self._retire(topic)
        for sub in self.subs.values():
            self.node.destroy_subscription(sub)
        self.subs.clear()
        self._makers.clear()
        with self._twins_lock:
            self._twins.clear()
        self._changed()

    def status(self) -> dict:
        return {"input_readers_renewed": self.renewed}
