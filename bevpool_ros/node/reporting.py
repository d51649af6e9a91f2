"""bevpool_node's accounting: every counter, throttled drop logs, latency windows, the state
status composed from each component's own ``status()`` and the /diagnostics message built from
it (the level: ``node_health.health``, the node's contract)."""
from __future__ import annotations

import threading
import time
from collections import Counter

from .. import heap
from ..logtext import clip
from ..node_health import RecentCounts, counter_key, health
from ..ros.diagnostics import diagnostic_array
from ..ros.housekeeping import HousekeepingTimer, PeriodicThread
from ..ros.throttle import ThrottledLog
from .gpu_share import GpuShareWatch
from .latency import RollingStats

STAGES = ("queue_wait", "assemble", "handoff", "message", "publish")


class Report:
    def __init__(self, node):
        self.node = node
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.warn = ThrottledLog(node.get_logger().warning)
        self.last_drop_detail: dict[str, str] = {}  # reason -> latest detail (named by ERROR)
        # "wrong_type|incompatible_qos topic <- publisher" -> what it offers (graph_watch.py)
        self.publisher_problems: dict[str, str] = {}
        self._recent = RecentCounts(2.0, time.monotonic())  # counter growth behind the level
        self.windows(1000)
        self.diag_pub = None
        self.sources = ()  # compose(): the components' status()
        self._pub_lock = threading.Lock()  # three threads may publish; a transition destroys
        self._publishing = threading.Lock()
        self._timer = self._late_watch = None
        self._period_s, self._published_at = 1.0, time.monotonic()

    def windows(self, size: int) -> None:
        self.latency = RollingStats(size)    # last input -> published
        self.pool_time = RollingStats(size)
        self.overhead = RollingStats(size)   # latency - pool
        # where the overhead goes: waiting for the pooling thread, stacking, the GPU hand-off's
        # announcement, the BevFeature's build and publish
        self.stages = {k: RollingStats(size) for k in STAGES}
        self.gpu = GpuShareWatch(self.node.get_logger().warning, size)

    def resize(self, size: int) -> None:
        for s in (self.latency, self.pool_time, self.overhead, *self.stages.values()):
            s.resize(size)
        self.gpu.resize(size)

    # counting -------------------------------------------------------------------------------
    def count(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self.counts[reason] += n

    def drop(self, reason: str, detail: str) -> None:
        self.count(reason)
        self.last_drop_detail[reason] = detail = clip(detail)
        self.warn(reason, f"dropped ({reason}): {detail}")

    def sync_dropped(self, reason: str, detail: str) -> None:
        """The synchroniser counted a drop (sync_<reason>): say so, throttled per reason."""
        self.last_drop_detail[f"sync_{reason}"] = detail = clip(detail)
        self.warn(f"sync_{reason}", f"dropped (sync_{reason}): {detail}")

    def subscription_events(self, topic: str):
        """The middleware's events on an input topic (docs/ros_interface.md, "What the middleware
        reports"). Under rmw_fastrtps none: taking an event locks the rmw event, then the DDS
        reader, while a Fast DDS receive thread delivering a lost sample of a fragmented burst
        locks the reader, then the event (rmw_fastrtps_shared_cpp 9.3.3; ros2/rmw_fastrtps#890).
        That inversion hung the node for good under a flood of camera sets (test_node_liveness.py).
        So there lost samples show as the cameras missing from a set (``sync_*``,
        ``missing_<camera>``) and incompatible publishers are found in the graph (graph_watch.py).
        Under another middleware: samples lost and publishers of an incompatible type, counted."""
        try:
            from rclpy.event_handler import SubscriptionEventCallbacks
        except ImportError:
            return None
        from ..ros.dds_guard import uses_fast_dds
        from ..ros.qos import quiet_events

        if uses_fast_dds():
            return quiet_events()
        return SubscriptionEventCallbacks(
            message_lost=lambda info: self.count("dds_message_lost",
                                                 max(1, int(info.total_count_change))),
            incompatible_type=lambda info: self.count("dds_incompatible_type",
                                                      max(1, int(info.total_count_change))),
            use_default_callbacks=False)

    def published(self, r, t_msg: float, t_pub: float, done: float, handoff_s: float = 0.0) -> None:
        s = r.camera_set
        self._set_out(s.last_arrival, done, r.pool_s, r.gpu, s.complete, queue_wait=r.started - s.last_arrival,
                      assemble=r.assemble_s, handoff=handoff_s, message=t_pub - t_msg, publish=done - t_pub)

    def launched(self, arrivals: tuple, launched: float, done: float, t_pub: float, published: float) -> None:
        """A set the hand-off core pooled and announced (perf_counter seconds): its queue wait is
        the loop's, from the set's last tensor to the launch; its pool, the launch to the host
        wait's end; its publish, the ROS copy of the announcement when Python published it (as
        published() measures a set Python pooled, to the end of that copy)."""
        self._set_out(arrivals[1], published, done - launched, None, True, queue_wait=launched - arrivals[1],
                      assemble=0.0, handoff=t_pub - done, message=0.0, publish=published - t_pub)
        self.count("launched_by_core")

    def _set_out(self, last_arrival: float, done: float, pool_s: float, gpu, complete: bool, **stages) -> None:
        """One published set's statistics: its stages (s), latency from its last input, pool time."""
        latency = done - last_arrival
        for k, v in stages.items():
            self.stages[k].add(v * 1e3)
        self.latency.add(latency * 1e3)
        self.pool_time.add(pool_s * 1e3)
        self.gpu.add(gpu)
        self.overhead.add((latency - pool_s) * 1e3)
        self.count("published" if complete else "published_partial")

    # /diagnostics ---------------------------------------------------------------------------
    def start(self, period_s: float) -> None:
        """/diagnostics every ``period_s``: by a housekeeping timer (the executor while the node
        idles, the pooling thread right after a set while sets flow: no extra wake-up during a
        set), and by a thread of its own when that is late by a quarter period (a flood keeps the
        executor busy and completes no set: the status went silent for 2.9 s at a 1 s period)."""
        from diagnostic_msgs.msg import DiagnosticArray

        with self._pub_lock:
            if self.diag_pub is None:
                self.diag_pub = self.node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.set_period(period_s)

    def set_period(self, period_s: float) -> None:
        self._period_s = period_s
        if self._timer is not None:
            self._timer.destroy()
        self._timer = HousekeepingTimer(self.node, period_s, self.publish_diagnostics)
        if self._late_watch is None:
            self._late_watch = PeriodicThread("bevpool-diagnostics", period_s / 4, self._publish_if_late)
        else:
            self._late_watch.set_period(period_s / 4)

    def _publish_if_late(self) -> None:
        if time.monotonic() - self._published_at > 1.25 * self._period_s:
            self.publish_diagnostics()

    def stop(self) -> None:
        if self._late_watch is not None:
            self._late_watch.stop()
            self._late_watch = None
        if self._timer is not None:
            self._timer.destroy()
            self._timer = None
        with self._pub_lock:
            if self.diag_pub is not None:
                self.node.destroy_publisher(self.diag_pub)
                self.diag_pub = None

    def compose(self, *sources) -> None:
        """The components whose own ``status()`` (a dict of /diagnostics values) makes the status,
        in this order, ahead of the report's own counters and latencies (as diagnostic_updater
        composes its tasks)."""
        self.sources = sources

    def snapshot(self) -> dict:
        values = {}
        for source in self.sources:
            values.update(source())
        with self._lock:
            counts = Counter(self.counts)
        lat, pool, over = (self.latency.percentiles(), self.pool_time.percentiles(),
                           self.overhead.percentiles())
        values.update({
            "sets_published": counts["published"] + counts["published_partial"],
            "sets_published_partial": counts["published_partial"],
            "latency_p50_ms": lat[50], "latency_p95_ms": lat[95], "latency_p99_ms": lat[99],
            "pool_p50_ms": pool[50], "pool_p99_ms": pool[99],
            "overhead_p50_ms": over[50], "overhead_p99_ms": over[99],
        })
        values.update(self.memory_values())
        values.update(self.gpu.values())  # gpu_wait_*: the set's wait for a shared GPU
        for k, st in self.stages.items():
            pk = st.percentiles((50, 99))
            values[f"{k}_p50_ms"], values[f"{k}_p99_ms"] = pk[50], pk[99]
        for k, v in sorted(counts.items()):
            if k not in ("published", "published_partial"):
                values[counter_key(k)] = v
        values.update(sorted(list(self.publisher_problems.items())))
        return values

    @staticmethod
    def memory_values() -> dict:
        """Resident memory and what malloc holds of it (in use, freed but kept), MiB."""
        rss, held = heap.resident_bytes(), heap.usage()
        values = {} if rss is None else {"memory_rss_mib": round(rss / 2**20, 1)}
        if held is not None:
            values.update({"memory_heap_in_use_mib": round(held["in_use"] / 2**20, 1),
                           "memory_heap_free_mib": round(held["free"] / 2**20, 1)})
        return values

    def publish_diagnostics(self, stuck: str = "") -> None:
        """The node's status (its own thread, every ``diagnostics.period_s``); ``stuck``: the
        watchdog's last word before the process exits (ERROR, ros/liveness.py)."""
        # another thread at it right now: a periodic status is skipped, the watchdog's last word
        # waits for it (the watchdog gives it 0.5 s in all)
        if not (self._publishing.acquire(timeout=0.4) if stuck else self._publishing.acquire(blocking=False)):
            return
        try:
            self._publish_status(stuck)
        finally:
            self._publishing.release()

    def _publish_status(self, stuck: str) -> None:
        node = self.node
        if self.diag_pub is None or node.cfg is None:  # stopped (a late tick may still come)
            return
        values = self.snapshot()
        level, text = self.level(values, stuck)
        msg = diagnostic_array(node.get_clock().now().to_msg(), f"{node.get_name()}: bev pooling",
                               str(values["device"]), level, text, values)
        with self._pub_lock:
            if self.diag_pub is not None:
                self.diag_pub.publish(msg)
                self._published_at = time.monotonic()

    def level(self, values: dict, stuck: str = "") -> tuple[str, str]:
        """(level, message) of a snapshot: the health rule (node_health.health) over the counters'
        recent growth, then what the components' values say."""
        cfg = self.node.cfg
        totals = {k: int(v) for k, v in values.items() if k.startswith(("dropped_", "sync_"))}
        totals["published"] = int(values["sets_published"])
        # a drop stays visible a few periods, so a monitor polling slower than us still sees it
        self._recent.window_s = max(2.0, 3 * cfg["diagnostics.period_s"])
        level, text = health(self._recent.update(time.monotonic(), totals), self.last_drop_detail)
        invalid = sorted(k.removeprefix("invalid_calibration_") for k in values
                         if k.startswith("invalid_calibration_"))
        if stuck:
            return "ERROR", stuck
        if invalid:
            return "ERROR", f"no usable calibration for {invalid}"
        if values["state"] != "active":
            return "OK", "inactive: configured, not subscribed to its inputs"
        if self.publisher_problems and level != "ERROR":
            return "WARN", "publisher(s) DDS never delivers on input topics: " + clip(
                "; ".join(f"{k}: {v}" for k, v in sorted(self.publisher_problems.items())), 300)
        if level != "OK":
            return level, text
        if values["backend_requested"] not in ("best", values["backend"]):
            return "WARN", f"running {values['backend']}, {values['backend_requested']} unavailable"
        if cfg["processing.skip_without_subscribers"] and not self.node.outputs.anyone_listening():
            skipped = values.get("skipped_no_subscribers", 0)
            return "OK", f"idle: no subscriber to the BEV ({skipped} sets skipped)"
        return "OK", f"{values['sets_published']} sets published"


def backend_status(backend, requested: str) -> dict:
    """What /diagnostics says of the backend running now (``requested``: what was asked for)."""
    try:  # the pooling thread may be re-preparing the backend right now (a calibration change)
        d = backend.describe()
    except Exception as e:  # diagnostics must never take the node down
        d = {"backend": backend.name, "precision": backend.precision,
             "describe_error": clip(f"{type(e).__name__}: {e}")}
    values = {"backend": d.get("backend", backend.name), "backend_requested": requested,
              "precision": d.get("precision", ""), "regime": d.get("regime", "n/a"), "device": d.get("device", "")}
    for key in ("describe_error", "trt_plugin"):  # trt_plugin: the plugin TensorRT runs
        if key in d:
            values[key] = d[key]
    return values
