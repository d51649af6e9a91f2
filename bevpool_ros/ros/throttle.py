"""At most one log line per kind per period; the suppressed count goes into the next line."""
from __future__ import annotations

import threading
import time


class ThrottledLog:
    def __init__(self, log_fn, period_s: float = 2.0):
        self._log = log_fn
        self.period = period_s
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, kind: str, text: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self.period:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return False
            self._last[kind] = now
            n = self._suppressed.pop(kind, 0)
        self._log(text + (f" ({n} more like this suppressed)" if n else ""))
        return True
