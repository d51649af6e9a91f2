"""bevpool_node's contract on /diagnostics: which counters are drops, which lose a whole set, and
the health rule that turns their recent growth into a level. The node reports by it
(node/reporting.py); the tools that read its /diagnostics judge by it (bag/). No ROS here."""
from __future__ import annotations

from collections import deque

# counters that are events, not dropped data
NOT_DROPS = ("calibration_changes", "scatter_map_rebuilds", "parameter_rejected", "handoff_failed",
             "handoff_only_grids", "skipped_no_subscribers", "wrong_type_publishers", "dds_incompatible_qos",
             "dds_incompatible_type", "launched_by_core")
# the synchroniser's counters of what it took (sync_<name>): every other sync_ counter is a drop
SYNC_TAKEN = ("sync_accepted_messages", "sync_sets_complete", "sync_sets_partial")
# Losses of a whole camera set (as opposed to one bad message, which a set may survive).
SET_LOSSES = ("dropped_internal_error", "dropped_backend_input_error", "dropped_non_finite_output",
              "dropped_calibration_invalid", "dropped_bad_shape", "dropped_worker_busy",
              "sync_incomplete_timeout", "sync_evicted", "sync_superseded")
FAILING_AFTER = 3  # sets lost in a row, none published: the node is failing, not hiccuping


def counter_key(reason: str) -> str:
    """The /diagnostics key of one of the node's own counters: dropped_<reason>, or the event's name."""
    return reason if reason in NOT_DROPS else f"dropped_{reason}"


def is_drop(key: str) -> bool:
    """A /diagnostics key that counts dropped data (dropped_*, the synchroniser's drops)."""
    return key.startswith(("dropped_", "sync_")) and key not in SYNC_TAKEN


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
    drops = {k: v for k, v in recent.items() if is_drop(k)}
    if not published and sum(losses.values()) >= FAILING_AFTER:
        cause = max(losses, key=losses.get)
        detail = last_detail.get(cause.removeprefix("dropped_"), "")
        return "ERROR", (f"no set published, {sum(losses.values())} lost: {cause}+{losses[cause]}"
                         + (f" ({detail})" if detail else ""))
    if drops:
        return "WARN", (f"{published} published, recent drops: "
                        + ", ".join(f"{k}+{v}" for k, v in sorted(drops.items())))
    return "OK", ""
