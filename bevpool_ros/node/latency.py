"""Rolling percentiles of per-set timings (bounded window, O(1) insert)."""
from __future__ import annotations

import threading
from collections import deque

import numpy as np


class RollingStats:
    def __init__(self, window: int = 1000):
        self._values: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self.count = 0

    def add(self, value: float) -> None:
        with self._lock:
            self._values.append(value)
            self.count += 1

    def resize(self, window: int) -> None:
        with self._lock:
            self._values = deque(self._values, maxlen=window)

    def percentiles(self, qs=(50, 95, 99)) -> dict[int, float]:
        with self._lock:
            vals = np.fromiter(self._values, dtype=np.float64)
        if vals.size == 0:
            return {q: float("nan") for q in qs}
        return dict(zip(qs, np.percentile(vals, qs).tolist()))

    def values(self) -> list[float]:
        with self._lock:
            return list(self._values)
