"""The node's periodic housekeeping timers (sync poll, /diagnostics, the graph check): run by the
executor while the node idles, and between two sets by the pooling thread while sets flow, the
timer asleep meanwhile (PoolingWorker.between_sets says why)."""
from __future__ import annotations


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
