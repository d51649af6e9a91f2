"""bevpool-synthetic's publisher: wait for the node, publish, then say what the node got.

1. wait until every topic of the rig (each camera's depth, feat and camera_info) has a
   subscription, at most ``wait_s`` (a node that is not running, inactive, on another domain,
   namespace or rig is named by the topics still unmatched);
2. wait for one /diagnostics status of a bevpool node after that (at most BASELINE_S): its set
   counters before our first set are the baseline, and by then the node's readers know our writers
   too (discovery is asymmetric: a set sent while only our side had matched never arrives);
3. publish ``frames`` sets at ``rate``;
4. wait until the node's counters cover the last set (a status stamped FRESH_S after it) and stop
   changing, at most DRAIN_S, and report: sets sent, then per node the complete sets it counted, the
   grids it published and its counters that grew, by name (node_account.py); a node whose statuses
   stopped (GONE_PERIODS of them missed) is said to be gone, with its last word.
"""
from __future__ import annotations

import time

from ..io.bev_message import stamp_to_ns
from .node_account import account, count
from .synthetic_publisher import SyntheticRigPublisher

BASELINE_S = 3.0   # three periods of the node's default diagnostics.period_s
FRESH_S = 0.3      # a status stamped this long after the last set has counted it
DRAIN_S = 5.0
SHOWN_TOPICS = 3
GONE_PERIODS = 3   # statuses a live node would have sent since its last one
GONE_MIN_S = 2.0


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


class WaitingPublisher(SyntheticRigPublisher):
    """SyntheticRigPublisher that first waits for the node and at the end accounts for its sets
    (module doc); ``done`` once finished, ``exit_code`` 1 when no node subscribed in time."""

    def __init__(self, rig, wait_s: float = 30.0, say=print, complain=print, **kw):
        super().__init__(rig, **kw)
        self.wait_s = wait_s
        self.say, self.complain = say, complain  # progress lines; the one line of a failed wait
        self.counters = NodeCounters(self)
        self.phase = "idle"
        self.exit_code = 0
        self._since = time.monotonic()
        self._mark = 0            # received statuses at matching / time.time_ns() of the last set
        self._plan = (0.0, 0)
        self._step_timer = None

    def begin(self, rate_hz: float, frames: int = 0) -> None:
        self._plan = (rate_hz, frames)
        self.phase, self._since = "waiting", time.monotonic()
        self._step_timer = self.create_timer(0.05, self._step)
        self.say(self.started_line() + (f"; waiting up to {self.wait_s:g} s for subscriptions on its "
                                        f"{len(self.pubs)} topics" if self.wait_s > 0 else ""))

    @property
    def publishing_done(self) -> bool:
        return SyntheticRigPublisher.done.fget(self)

    @property
    def done(self) -> bool:
        return self.phase in ("finished", "failed")

    def _step(self) -> None:
        now = time.monotonic()
        if self.phase == "waiting":
            missing = self.topics_without_subscribers() if self.wait_s > 0 else []
            if not missing:
                self.phase, self._since, self._mark = "baseline", now, self.counters.received
            elif now - self._since > self.wait_s:
                self._fail(missing)
                return
        if self.phase == "baseline":
            fresh = self.counters.received > self._mark
            if fresh or self.wait_s <= 0 or now - self._since > BASELINE_S:
                self.counters.mark_baseline()
                self.phase = "publishing"
                self.start(*self._plan)
                if self.wait_s > 0:
                    diag = "" if self.counters.latest else ", no bevpool node's /diagnostics yet"
                    self.say(f"bevpool-synthetic: all {len(self.pubs)} topics subscribed{diag}: publishing")
        if self.phase == "publishing" and self.publishing_done:
            self.phase, self._since, self._mark = "draining", now, time.time_ns()
        if self.phase == "draining":
            if self.counters.settled(self._mark + int(FRESH_S * 1e9), self.sent) or now - self._since > DRAIN_S:
                self.phase = "finished"
                self._step_timer.cancel()

    def started_line(self) -> str:
        rate, frames = self._plan
        return (f"bevpool-synthetic: rig {self.rig.name}, {self.rig.num_cameras} cameras, {rate:g} sets/s "
                "on cameras/<camera>/{depth,feat,camera_info} "
                + (f"({frames} sets)" if frames else "(Ctrl-C stops)"))

    def _fail(self, missing: list[str]) -> None:
        shown = ", ".join(missing[:SHOWN_TOPICS]) + (" ..." if len(missing) > SHOWN_TOPICS else "")
        self.complain(f"bevpool-synthetic: no subscriber on {len(missing)} of {len(self.pubs)} topics after "
                 f"{self.wait_s:g} s ({shown}): is bevpool_node running and active on this ROS_DOMAIN_ID, "
                 "in this namespace, with this rig's cameras? (--wait 0 publishes without waiting)")
        self.phase, self.exit_code = "failed", 1
        self._step_timer.cancel()

    def summary(self) -> list[str]:
        """What to say at the end (nothing after a failed wait: that was said)."""
        if self.phase == "failed":
            return []
        if self.phase in ("idle", "waiting", "baseline"):
            return ["bevpool-synthetic: stopped before the first set"]
        lines = [f"bevpool-synthetic: sent {self.sent} sets"]
        if self.sent:
            subscribed = not self.topics_without_subscribers()
            lines += [f"bevpool-synthetic: {line}" for line in
                      self.counters.report(self.sent, drained=self.phase == "finished", subscribed=subscribed)]
        return lines
