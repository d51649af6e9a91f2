"""diagnostic_msgs/DiagnosticArray for /diagnostics from a snapshot of the node's state."""
from __future__ import annotations

import math
from collections import deque


def _fmt(v) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.3f}"
    return str(v)


def diagnostic_array(stamp, name: str, hardware_id: str, level: str, message: str, values: dict):
    """One DiagnosticStatus (level 'OK' | 'WARN' | 'ERROR') holding ``values`` as key/value strings."""
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    status = DiagnosticStatus()
    status.level = {"OK": DiagnosticStatus.OK, "WARN": DiagnosticStatus.WARN,
                    "ERROR": DiagnosticStatus.ERROR}[level]
    status.name = name
    status.hardware_id = hardware_id
    status.message = message
    status.values = [KeyValue(key=str(k), value=_fmt(v)) for k, v in values.items()]
    arr = DiagnosticArray()
    arr.header.stamp = stamp
    arr.status = [status]
    return arr


def status_values(arr) -> dict[str, str]:
    """Inverse for consumers and tests: the first status's values as a dict."""
    return {kv.key: kv.value for kv in arr.status[0].values} if arr.status else {}


# Losses of a whole camera set (as opposed to one bad message, which a set may survive).
SET_LOSSES = ("dropped_internal_error", "dropped_backend_input_error", "dropped_non_finite_output",
              "dropped_calibration_invalid", "dropped_bad_shape", "dropped_worker_busy",
              "sync_incomplete_timeout", "sync_evicted", "sync_superseded")
FAILING_AFTER = 3  # sets lost in a row, none published: the node is failing, not hiccuping


class RecentCounts:
    """Growth of monotonically increasing counters over the last ``window_s`` seconds."""

    def __init__(self, window_s: float, start: float):
        self.window_s = window_s
        self._history: deque[tuple[float, dict[str, int]]] = deque([(start, {})])  # all zero at start

    def update(self, now: float, totals: dict[str, int]) -> dict[str, int]:
        """Growth since the newest snapshot at least window_s old (or since the start)."""
        self._history.append((now, dict(totals)))
        while len(self._history) > 1 and now - self._history[1][0] >= self.window_s:
            self._history.popleft()
        oldest = self._history[0][1]
        return {k: v - oldest.get(k, 0) for k, v in totals.items() if v - oldest.get(k, 0) > 0}


def health(recent: dict[str, int], last_detail: dict[str, str]) -> tuple[str, str]:
    """(level, message) from the counters' growth in the recent window: ERROR while sets are
    being lost and none published (naming the cause), WARN while anything is dropped, else OK."""
    published = recent.get("published", 0) + recent.get("published_partial", 0)
    losses = {k: v for k, v in recent.items() if k in SET_LOSSES}
    drops = {k: v for k, v in recent.items() if k.startswith(("dropped_", "sync_")) and k not in (
        "sync_accepted_messages", "sync_sets_complete", "sync_sets_partial")}
    if not published and sum(losses.values()) >= FAILING_AFTER:
        cause = max(losses, key=losses.get)
        detail = last_detail.get(cause.removeprefix("dropped_"), "")
        return "ERROR", (f"no set published, {sum(losses.values())} lost: {cause}+{losses[cause]}"
                         + (f" ({detail})" if detail else ""))
    if drops:
        return "WARN", (f"{published} published, recent drops: "
                        + ", ".join(f"{k}+{v}" for k, v in sorted(drops.items())))
    return "OK", ""
