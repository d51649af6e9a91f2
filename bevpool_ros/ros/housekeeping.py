"""The node's periodic housekeeping.

``HousekeepingTimer`` (the sync poll, the graph check): run by the executor while the node idles,
and between two sets by the pooling thread while sets flow, the timer asleep meanwhile
(PoolingWorker.between_sets says why).
``PeriodicThread``: a thread of its own, for what must keep its period while the executor is busy
with a flood of inputs: /diagnostics when the timer is late (reporting.Report.start; the status
went silent for 2.9 s at a 1 s period with the timer alone).
"""
from __future__ import annotations

import logging
import threading
import time

from ..thread_name import name_this_thread

log = logging.getLogger(__name__)


class HousekeepingTimer:
    def __init__(self, node, period_s: float, job):
        self.node, self.job = node, job
        self.timer = node.create_timer(period_s, self._tick)

    def _tick(self) -> None:
        worker = self.node.worker
        if worker is None:
            self.job()
        else:
            worker.between_sets(self.job, self.timer)

    def destroy(self) -> None:
        if self.node.worker is not None:  # never run or reset by the pooling thread again
            self.node.worker.forget(self.job)
        self.node.destroy_timer(self.timer)


class PeriodicThread:
    """``job()`` every ``period_s`` (wall clock: housekeeping follows no simulated time) in a
    daemon thread, on a fixed beat: a late run does not shift the next ones."""

    def __init__(self, name: str, period_s: float, job):
        self.job = job
        self.period_s = float(period_s)
        self._wake = threading.Event()
        self._running = True
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def set_period(self, period_s: float) -> None:
        self.period_s = float(period_s)
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._running = False
        self._wake.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _loop(self) -> None:
        name_this_thread()
        due = time.monotonic() + self.period_s
        while self._running:
            if self._wake.wait(max(0.0, due - time.monotonic())):
                self._wake.clear()  # a new period (or a stop): the next run one period from now
                due = time.monotonic() + self.period_s
                continue
            if not self._running:
                return
            try:
                self.job()
            except Exception as e:  # housekeeping never ends its thread
                log.warning("%s: %s failed: %s: %s", self._thread.name,
                            getattr(self.job, "__qualname__", self.job), type(e).__name__, e)
            due += self.period_s
            if due < time.monotonic():  # fell behind (a stalled host): no burst to catch up
                due = time.monotonic() + self.period_s
