"""Is the node's GPU work waiting for someone else's? Per set, the backend's frame reports its
wall time from submission to completion and its own device time (backends/gpu/frame.py,
FrameTiming); the difference is what the set waited: its inputs' producer and, above all, the
time slice of another process's CUDA context when networks share the GPU without MPS
(docs/gpu_sharing.md). A persistent wait logs one line naming the cause and the remedies, and
one more when it is gone."""
from __future__ import annotations

import numpy as np

from .latency import RollingStats

# A set "waits for the GPU" when its wait exceeds both of these: a fixed floor (launch and wake-up
# cost a few tens of microseconds on an idle GPU, a busy host adds some) and a multiple of its
# own device time.
WAIT_FLOOR_MS = 1.0
WAIT_FACTOR = 4.0
PERSIST_SETS = 30  # the median of this many recent sets decides, so one late set never logs


class GpuShareWatch:
    def __init__(self, log, window: int = 1000):
        self.log = log  # a logger's warning method: one line per change of state
        self.device = RollingStats(window)
        self.wait = RollingStats(window)
        self._recent_wait: list[float] = []
        self._recent_device: list[float] = []
        self.shared = False

    def add(self, timing) -> None:
        """One set's FrameTiming (None from a backend without a device: nothing to say)."""
        if timing is None or timing.device_ms is None:
            return
        self.device.add(timing.device_ms)
        self.wait.add(timing.wait_ms)
        self._recent_wait = (self._recent_wait + [timing.wait_ms])[-PERSIST_SETS:]
        self._recent_device = (self._recent_device + [timing.device_ms])[-PERSIST_SETS:]
        if len(self._recent_wait) == PERSIST_SETS:
            self._decide(float(np.median(self._recent_wait)), float(np.median(self._recent_device)))

    def _decide(self, wait_ms: float, device_ms: float) -> None:
        limit = max(WAIT_FLOOR_MS, WAIT_FACTOR * device_ms)
        if not self.shared and wait_ms > limit:
            self.shared = True
            self.log(f"GPU shared: each set's {device_ms:.3f} ms of GPU work waits {wait_ms:.2f} ms (median of "
                     f"{PERSIST_SETS}) for the GPU, most likely another process's CUDA work holding it in time "
                     "slices; run an MPS control daemon for the processes on this GPU, or pool in the network's "
                     "process (bevpool_ros.BevPooler); docs/gpu_sharing.md")
        elif self.shared and wait_ms < limit / 2:
            self.shared = False
            self.log(f"GPU no longer shared: sets wait {wait_ms:.2f} ms for the GPU (median of {PERSIST_SETS})")

    def resize(self, window: int) -> None:
        self.device.resize(window)
        self.wait.resize(window)

    def values(self) -> dict:
        """The /diagnostics keys; none before a set has been timed on a device."""
        if not self.device.count:
            return {}
        dev, wait = self.device.percentiles((50, 99)), self.wait.percentiles((50, 99))
        return {"gpu_device_p50_ms": dev[50], "gpu_device_p99_ms": dev[99],
                "gpu_wait_p50_ms": wait[50], "gpu_wait_p99_ms": wait[99],
                "gpu_shared": "yes" if self.shared else "no"}
