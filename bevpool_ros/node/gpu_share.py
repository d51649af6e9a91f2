"""Is the node's GPU work waiting for someone else's? Per set, the backend's frame reports its
wall time from submission to completion and its work's device time (backends/gpu/frame.py,
FrameTiming). The device time alone is not the answer: on a GPU time-sliced between processes a
frame that is switched out in the middle counts the other process's slice as its own (measured on
the H200 beside an fp16 GEMM load: 2.5-6.4 ms of "device time" for 0.1-0.2 ms of work). So the
reference is the least device time of the recent sets (what the work costs when nothing is in its
way) and a set's wait is its wall time beyond that: its inputs' producer, and above all the time
slices of another process's CUDA context when networks share the GPU without MPS
(docs/gpu_sharing.md). A persistent wait logs one line naming the cause and the remedies, and one
more when it is gone."""
from __future__ import annotations

import math

import numpy as np

from .latency import RollingStats

# A set "waits for the GPU" when its wait exceeds both of these: a fixed floor (launch and wake-up
# cost a few tens of microseconds on an idle GPU, a busy host adds some) and a multiple of its
# own device time.
WAIT_FLOOR_MS = 1.0
WAIT_FACTOR = 4.0
PERSIST_SETS = 30  # the median of this many recent sets decides, so one late set never logs


class GpuShareWatch:
    BLOCK = 200  # the reference is the least device time of the current and the previous block

    def __init__(self, log, window: int = 1000):
        self.log = log  # a logger's warning method: one line per change of state
        self.device = RollingStats(window)
        self.wait = RollingStats(window)
        self._recent_wait: list[float] = []
        self._block_min = self._previous_min = math.inf
        self._block_sets = 0
        self.shared = False

    @property
    def reference_ms(self) -> float:
        """The least device time of the recent sets: the work's own cost on an uncontended GPU."""
        return min(self._block_min, self._previous_min)

    def add(self, timing) -> None:
        """One set's FrameTiming (None from a backend without a device: nothing to say)."""
        if timing is None or timing.device_ms is None:
            return
        self._block_min = min(self._block_min, timing.device_ms)
        self._block_sets += 1
        if self._block_sets == self.BLOCK:
            self._previous_min, self._block_min, self._block_sets = self._block_min, math.inf, 0
        reference = self.reference_ms
        wait = max(0.0, timing.wall_ms - reference)
        self.device.add(timing.device_ms)
        self.wait.add(wait)
        self._recent_wait = (self._recent_wait + [wait])[-PERSIST_SETS:]
        if len(self._recent_wait) == PERSIST_SETS:
            self._decide(float(np.median(self._recent_wait)), reference)

    def _decide(self, wait_ms: float, device_ms: float) -> None:
        """``device_ms``: the reference (the work's own device time)."""
        limit = max(WAIT_FLOOR_MS, WAIT_FACTOR * device_ms)
        if not self.shared and wait_ms > limit:
            self.shared = True
            self.log(f"GPU shared: each set's {device_ms:.3f} ms of GPU work waits {wait_ms:.2f} ms (median of "
                     f"{PERSIST_SETS}) for the GPU, most likely another process's CUDA work holding it in time "
                     "slices; run an MPS control daemon for the processes on this GPU (the networks' processes "
                     "with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=90 leave this node SMs), or pool in the network's "
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
