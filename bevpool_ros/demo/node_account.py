"""What a node did with the sets a tool fed it, in one line, from its /diagnostics counters.

Shared by the tools that feed bevpool_node (``bevpool-synthetic``, ``bevpool-demo``, ``bevpool-bag
play``): the complete sets it counted of those sent, the grids it published, and every counter of
the node's that grew meanwhile, by name (``dropped_worker_busy+2``, ``skipped_no_subscribers+20``,
...), so a set that arrived but never became a grid is never reported as fine. ``NodeCounters``
follows every bevpool node on /diagnostics; ``FeedAccount`` is the order a tool feeds in so that
the account holds (a baseline before the first set, a drain after the last).
"""
from __future__ import annotations

import time

from ..io.bev_message import stamp_to_ns

BASELINE_S = 3.0   # three periods of the node's default diagnostics.period_s
FRESH_S = 0.3      # a status stamped this long after the last set has counted it
DRAIN_S = 5.0
GONE_PERIODS = 3   # statuses a live node would have sent since its last one
GONE_MIN_S = 2.0

# counters whose growth says where sets went: the synchroniser's, the node's drops and skips, and
# the cameras missing from partial sets
EXPLAINING = ("sync_", "dropped_", "missing_", "skipped_")
NOT_LOSSES = ("sync_accepted_messages", "sync_sets_complete", "sync_sets_partial")


def count(values: dict, key: str) -> int:
    """A /diagnostics counter as an int (absent or unreadable: 0)."""
    try:
        return int(float(values.get(key, 0)))
    except (TypeError, ValueError):
        return 0


def grown(before: dict, now: dict) -> dict[str, int]:
    """The explaining counters that grew from ``before`` to ``now``."""
    growth = {k: count(now, k) - count(before, k) for k in now
              if k.startswith(EXPLAINING) and k not in NOT_LOSSES}
    return {k: v for k, v in sorted(growth.items()) if v > 0}


def account(who: str, before: dict, now: dict, sent: int, gone: bool = False) -> str:
    """``who`` counted N complete sets of the ``sent``, published M grids: the counters that grew.
    ``gone``: the node stopped before the end, so sets it never counted are not blamed on the way."""
    complete = count(now, "sync_sets_complete") - count(before, "sync_sets_complete")
    partial = count(now, "sync_sets_partial") - count(before, "sync_sets_partial")
    line = f"{who} counted {complete} complete sets" + (f" and {partial} partial" if partial else "")
    missed = sent - complete
    if missed < 0:
        line += f" while {sent} were sent (another publisher feeds it too)"
    else:
        line += f" of the {sent} sent" + (f" ({missed} missed)" if missed else "")
    if "sets_published" in now:
        line += f" and published {count(now, 'sets_published') - count(before, 'sets_published')} grids"
    causes = grown(before, now)
    if causes:
        return line + ": " + ", ".join(f"{k}+{v}" for k, v in causes.items())
    if missed > 0 and gone:
        return line + f": it went before counting the {missed} missed"
    if missed > 0:
        return line + (f": no counter of the node's explains the {missed} missed (lost before it, "
                       "in discovery or transport)")
    return line + ": nothing dropped"


class NodeCounters:
    """The set counters of every bevpool node on /diagnostics, by process id (two nodes on one
    domain are told apart, not added up)."""

    def __init__(self, node, clock=time.monotonic):
        from diagnostic_msgs.msg import DiagnosticArray

        self.latest: dict[str, tuple[int, dict]] = {}    # pid -> (stamp_ns, values)
        self.history: dict[str, list[tuple[int, dict]]] = {}
        self.heard: dict[str, list[float]] = {}          # pid -> when its last statuses arrived
        self.clock = clock
        self.received = 0
        self.baseline: dict[str, dict] = {}
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_status, 10)

    def _on_status(self, arr) -> None:
        from ..ros.diagnostics import status_values

        if not arr.status or "bev pooling" not in arr.status[0].name:
            return
        values = status_values(arr)
        values["name"] = arr.status[0].name.removesuffix(": bev pooling")
        pid = values.get("pid", values["name"])
        entry = (stamp_to_ns(arr.header.stamp), values)
        self.latest[pid] = entry
        self.history.setdefault(pid, []).append(entry)
        del self.history[pid][:-4]
        self.heard.setdefault(pid, []).append(self.clock())
        del self.heard[pid][:-4]
        self.received += 1

    def mark_baseline(self) -> None:
        """Now: before our first set."""
        self.baseline = {pid: values for pid, (_, values) in self.latest.items()}

    def complete_since_baseline(self, pid: str) -> int:
        return (count(self.latest[pid][1], "sync_sets_complete")
                - count(self.baseline.get(pid, {}), "sync_sets_complete"))

    def silence(self, pid: str) -> tuple[float, float] | None:
        """(seconds since its last status, its status period) for a node that stopped reporting
        (no status for GONE_PERIODS periods, at least GONE_MIN_S); None while it reports."""
        times = self.heard.get(pid, [])
        if not times:
            return None
        period = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 1.0
        quiet = self.clock() - times[-1]
        return (quiet, period) if quiet > max(GONE_PERIODS * period, GONE_MIN_S) else None

    def settled(self, after_ns: int, sent: int) -> bool:
        """Every node with a baseline has a status stamped after ``after_ns`` that counts all
        ``sent`` sets, or whose counters did not change since its previous one."""
        if not self.baseline:
            return True
        for pid in self.baseline:
            fresh = [v for st, v in self.history.get(pid, []) if st >= after_ns]
            if not fresh:
                return False
            if self.complete_since_baseline(pid) >= sent:
                continue
            if len(fresh) < 2 or _counts(fresh[-1]) != _counts(fresh[-2]):
                return False
        return True

    def report(self, sent: int, drained: bool, subscribed: bool = True) -> list[str]:
        """Per node: the complete sets it counted of ours, the grids it published, the counters
        that grew (node_account.py); before that, one line for a node that is gone. ``subscribed``:
        the rig's topics still have subscribers."""
        if not self.latest:
            return ["no bevpool node's /diagnostics seen: how many of the sets it received is unknown"]
        lines = []
        for pid, (_, now) in sorted(self.latest.items()):
            who = f"{now['name']} (pid {pid})"
            silence = self.silence(pid)
            if silence:
                lines.append(f"{who} is gone: no status for {silence[0]:.1f} s (it sent one every "
                             f"{silence[1]:.1f} s)" + ("" if subscribed else
                                                         ", and no subscriber is left on the rig's topics"))
            if pid not in self.baseline:
                lines.append(f"{who}: no status before our first set, so its counters "
                             f"({count(now, 'sync_sets_complete')} complete sets in all) cannot be split")
                continue
            when = (" (by its last status, before it went)" if silence else
                    "" if drained else " (by its last status: the last sets may still be on their way)")
            lines.append(account(who, self.baseline[pid], now, sent, gone=bool(silence)) + when)
        return lines


def _counts(values: dict) -> tuple[int, ...]:
    return tuple(count(values, k) for k in ("sync_accepted_messages", "sync_sets_complete", "sync_sets_partial"))


class FeedAccount:
    """The phases of a tool (an rclpy Node) that feeds bevpool nodes and accounts for them, stepped
    by a timer from ``begin_feed``:

    1. waiting: until every topic of the tool has a subscription, at most ``wait_s`` (0: no wait);
    2. baseline: one /diagnostics status of a bevpool node after that (at most BASELINE_S): its
       counters before our first set are the baseline, and by then the node's readers know our
       writers too (discovery is asymmetric: a set sent while only our side had matched never
       arrives);
    3. feeding: ``start_feeding()`` until ``feeding_done``;
    4. draining: until the node's counters cover the last set (a status stamped FRESH_S after it)
       and stop changing, at most DRAIN_S; then ``node_report`` says what each node counted.

    The tool gives ``topics_without_subscribers()``, ``start_feeding()``, ``feeding_done``,
    ``sets_fed`` (complete sets sent so far) and ``unsubscribed(missing)``: the wait ran out with
    these topics unmatched; True feeds anyway, False fails (the tool has said why)."""

    def watch_nodes(self, wait_s: float) -> None:
        self.counters = NodeCounters(self)
        self.wait_s = wait_s
        self.phase = "idle"
        self._since = time.monotonic()
        self._mark = 0            # received statuses at matching / time.time_ns() of the last set
        self._waited_out = False  # the wait ran out: no node status by then, no baseline to wait for
        self._step_timer = None

    def begin_feed(self) -> None:
        self.phase, self._since = "waiting", time.monotonic()
        self._step_timer = self.create_timer(0.05, self._step)

    @property
    def done(self) -> bool:
        return self.phase in ("finished", "failed")

    def _step(self) -> None:
        now = time.monotonic()
        if self.phase == "waiting":
            missing = self.topics_without_subscribers() if self.wait_s > 0 else []
            if missing and now - self._since > self.wait_s:
                if not self.unsubscribed(missing):
                    self._stop("failed")
                    return
                missing, self._waited_out = [], True
            if not missing:
                self.phase, self._since, self._mark = "baseline", now, self.counters.received
        if self.phase == "baseline":
            fresh = self.counters.received > self._mark
            nobody = self._waited_out and not self.counters.latest
            if fresh or nobody or self.wait_s <= 0 or now - self._since > BASELINE_S:
                self.counters.mark_baseline()
                self.phase = "feeding"
                self.start_feeding()
        if self.phase == "feeding" and self.feeding_done:
            self.phase, self._since, self._mark = "draining", now, time.time_ns()
        if self.phase == "draining":
            if self.counters.settled(self._mark + int(FRESH_S * 1e9), self.sets_fed) or now - self._since > DRAIN_S:
                self._stop("finished")

    def _stop(self, phase: str) -> None:
        self.phase = phase
        self._step_timer.cancel()

    def node_report(self, tool: str) -> list[str]:
        """The account of every node seen (NodeCounters.report), each line led by ``tool``."""
        subscribed = not self.topics_without_subscribers()
        return [f"{tool}: {line}" for line in
                self.counters.report(self.sets_fed, drained=self.phase == "finished", subscribed=subscribed)]
