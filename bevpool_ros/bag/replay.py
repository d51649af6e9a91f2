"""Play a bag into a running bevpool_node and collect what comes back: free-running or paced.

* ``rate``: the bag's messages at the recorded pace x rate, as a live camera rig would send them;
  a node that cannot keep up loses sets, and the report says how many and why.
* ``paced``: one set at a time; the next is sent only when the previous one's grid came back (or
  the node reported it lost, or ``set_timeout_s`` passed). Nothing is lost to a slow machine.

Both start with the first complete set alone, until its grid comes back: discovery is asymmetric
(our writers may match before the node's readers know them, and what is sent in between never
arrives). A set the node shows no trace of (``sync_accepted_messages`` unchanged in a
``/diagnostics`` message stamped well after it was sent) is sent again, at most ``RESENDS`` times;
the node's synchroniser would drop any copy it had already seen as a duplicate.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..demo.session import last_lines
from ..io.bev_message import stamp_to_ns
from ..progress import progress_bar
from . import losses
from .io import BagError
from .sets import BagSet, grid_key

RESENDS = 3
FRESH_S = 0.3            # a /diagnostics message this long after a send reflects it
# the node's start-up and discovery: seconds idle, over 30 s on two busy cores (seen with two CPU hogs);
# a node that dies is seen at once (spin_until stops), so only a slow one waits this long
CONNECT_TIMEOUT_S = 120.0
GRIDS_WAIT_S = 10.0      # the end of a replay -> every grid the node published has arrived
DISCOVERY_SETTLE_S = 5.0  # our node ready -> one more of its statuses (the others' have come by then)
NODE_EXITED = "node_exited"


class EvalSetupError(BagError):
    """The evaluation could not start: a node that did not come up, or never subscribed."""


def rate_mode(rate: float) -> str:
    return f"rate x{rate:g}"


@dataclass
class ReplayResult:
    mode: str
    played: dict = field(default_factory=dict)     # (camera, stamp) -> time.time_ns() of its last send
    arrivals: dict = field(default_factory=dict)   # grid stamp -> system ns when DDS received it
    handled: dict = field(default_factory=dict)    # grid stamp -> system ns when our callback ran
    causes: dict = field(default_factory=dict)     # paced: set key -> cause, sets not (yet) back
    resent: int = 0                                # sets sent again (the node had none of them)
    in_transit: int = 0                            # grids the node published that never came
    messages_sent: int = 0                         # tensor messages of its cameras, resent too
    diagnostics_start: dict = field(default_factory=dict)
    diagnostics_end: dict = field(default_factory=dict)


class Replay:
    """One replay of ``player``'s bag into the node of ``session`` (a PipelineSession)."""

    def __init__(self, session, player, sets, set_timeout_s: float = 10.0,
                 show_progress: bool = False):
        self.session, self.player, self.sets = session, player, sets
        self.set_timeout_s = set_timeout_s
        self.show_progress = show_progress
        self.keys: set = set()        # keys of the grids received
        self.grids_received = 0       # grid messages received (a set's key may come twice)
        self._attributed = 0          # sets found lost through the node's counters (paced)
        self._resent_messages = 0
        self._counts_at_last_loss: dict[str, int] = {}

    # start ------------------------------------------------------------------------------
    def connect(self) -> dict:
        """Wait until the node subscribes the bag's topics and publishes to us; its diagnostics."""
        s = self.session
        # our node alive: another graph's node on the domain would match these just as well
        matched = lambda: (s.node.alive() and self.player.subscribers_ready()  # noqa: E731
                           and s.con.bev_sub.get_publisher_count() > 0)
        if not s.spin_until(matched, CONNECT_TIMEOUT_S):
            raise EvalSetupError(self._node_failed("did not subscribe to the bag's topics"))
        # the node's own view (its diagnostics name its process: not another graph's node): they
        # stop saying "idle: no subscriber" once it sees ours
        if not s.spin_until(lambda: (d := self._ours()) is not None
                            and not d.get("message", "").startswith("idle:"), CONNECT_TIMEOUT_S):
            raise EvalSetupError(self._node_failed("published no diagnostics seeing us"))
        # one more status of ours, a period later: by then every other node on the domain has sent
        # its own once (our graph may not list another graph's publisher yet: a node that starts fast
        # is ready before discovery with the rest of the domain settles)
        seen = self._ours_stamped()
        s.spin_until(lambda: self._ours_stamped() > seen or bool(self._others()), DISCOVERY_SETTLE_S)
        self.check_alone("before the replay")
        return self._ours()

    def _ours_stamped(self) -> int:
        """The stamp (ns) of our node's latest /diagnostics, 0 before the first."""
        pid = str(self.session.node.proc.pid)
        return max((st for st, v in self._stamped() if v.get("pid") == pid), default=0)

    def _others(self) -> set[str]:
        """Process ids of bevpool nodes on this domain other than ours, from their /diagnostics."""
        pid = str(self.session.node.proc.pid)
        return {v["pid"] for _, v in self._stamped() if v.get("pid") not in (None, pid)}

    def _ours(self) -> dict | None:
        """The latest /diagnostics of our node (its pid), as a dict; None before the first."""
        from ..demo.consumer import diagnostics_dict

        pid = str(self.session.node.proc.pid)
        for arr in reversed(self.session.con.diagnostics):
            if arr.status and "bev pooling" in arr.status[0].name:
                d = diagnostics_dict(arr)
                if d.get("pid") == pid:
                    return d
        return None

    def check_alone(self, when: str) -> None:
        """EvalSetupError if a node besides ours publishes grids on this DDS domain: its grids (of
        the bag, which it would pool too) would be scored as our node's."""
        topic = self.session.con.bev_sub.topic_name
        grids = self.session.con.get_publishers_info_by_topic(topic)
        others = self._others()
        if others:
            raise EvalSetupError(
                f"another graph shares DDS domain {self.session.domain} {when}: bevpool node(s) of process "
                f"{', '.join(sorted(others))} report on /diagnostics beside ours; the evaluation needs a domain "
                "to itself (stop the other graph or free the domain)")
        if len(grids) > 1:
            names = ", ".join(sorted(f"{e.node_namespace.rstrip('/')}/{e.node_name}" for e in grids))
            raise EvalSetupError(
                f"another graph shares DDS domain {self.session.domain} {when}: {len(grids)} publishers of "
                f"{topic} ({names}); the evaluation needs a domain to itself (stop the other graph or free "
                "the domain)")

    def _node_failed(self, what: str) -> str:
        node = self.session.node
        if not node.alive():
            return f"bevpool_node exited with code {node.proc.returncode}: {last_lines(node.output())}"
        return f"bevpool_node {what} within {CONNECT_TIMEOUT_S:g} s"

    # play -------------------------------------------------------------------------------
    def run(self, on_bev, rate: float | None, drain_s: float = 2.0) -> ReplayResult:
        """``rate`` None: paced; ``on_bev(ReceivedBev)`` after each grid (the caller records it)."""
        result = ReplayResult("paced" if rate is None else rate_mode(rate))
        result.diagnostics_start = self.connect()

        def received(r):
            self.keys.add(grid_key(r.msg))
            self.grids_received += 1
            result.arrivals[r.stamp_ns] = r.arrived_ns
            result.handled[r.stamp_ns] = time.time_ns()
            on_bev(r)

        self.session.con.on_bev = received
        sent = lambda key, t: result.played.__setitem__(key, t)  # noqa: E731
        complete = self.sets.complete
        with progress_bar(total=len(complete), desc="replay", unit="set",
                          enabled=self.show_progress) as bar:
            todo = complete if rate is None else complete[:1]  # rate: the first set alone (doc)
            for s in todo:
                cause = self._deliver(s, sent, result)
                if cause is not None:
                    result.causes[s.key] = cause
                bar.update(1)
                bar.set_postfix_str(f"{self.grids_received} grids")
            if rate is not None:
                self._play_at(rate, sent, bar)
            else:
                # what follows the last set
                self.player.publish_through(len(self.player.messages) - 1, sent)
            self.session.spin_until(lambda: all(s.key in self.keys for s in complete), drain_s)
            self.check_alone("during the replay")
            result.diagnostics_end = self._fresh_diagnostics(result.diagnostics_start)
            bar.set_postfix_str(f"{self.grids_received} grids")  # late ones too: the report's "published"
        result.in_transit = max(0, losses.counter(result.diagnostics_end, "sets_published")
                                - losses.counter(result.diagnostics_start, "sets_published")
                                - self.grids_received)
        cameras = {cam for s in complete for cam, _ in s.key}
        result.messages_sent = self._resent_messages + sum(
            1 for e in self.player.entries if e.index < self.player.sent and e.camera in cameras)
        return result

    def _play_at(self, rate: float, sent, bar) -> None:
        lasts = [s.last_index for s in self.sets.complete]
        shown = [1]

        def progress() -> bool:
            played = sum(1 for i in lasts if i < self.player.sent)
            if played > shown[0]:
                bar.update(played - shown[0])
                shown[0] = played
                bar.set_postfix_str(f"{self.grids_received} grids")
            return self.player.done

        self.player.start(rate, on_sent=sent)
        self.session.spin_until(progress, self.player.duration_s / rate + 30.0)

    def _deliver(self, s: BagSet, sent, result: ReplayResult) -> str | None:
        """Send set ``s`` (and the bag's messages before it), wait for its grid: None when it came
        back, else the cause (a counter of the node's, or no answer within set_timeout_s)."""
        partial = lambda: any(k < s.key for k in self.keys)  # noqa: E731  (zero-filled cameras)
        for attempt in range(1 + RESENDS):
            before = self._diagnostics_before(time.time_ns())
            t_sent = time.time_ns()
            if attempt == 0:
                self.player.publish_through(s.last_index, sent)
            else:
                self.player.publish_again(s.indices, sent)
                result.resent += 1
                self._resent_messages += len(s.indices)
            verdict = {}

            def settled() -> bool:
                if s.key in self.keys:
                    return True
                if not self.session.node.alive():
                    verdict["cause"] = NODE_EXITED
                    return True
                if partial():
                    verdict["cause"] = losses.PARTIAL
                    return True
                d = self._diagnostics_after(t_sent + int(FRESH_S * 1e9))
                if d is None:
                    return False
                cause = self._lost_by_counters(d, s)
                if cause is not None:
                    verdict["cause"] = cause
                    return True
                accepted = "sync_accepted_messages"
                if losses.counter(d, accepted) == losses.counter(before, accepted):
                    verdict["resend"] = True  # none of it reached the node
                    return True
                return False

            if not self.session.spin_until(settled, self.set_timeout_s):
                return f"no_grid_within_{self.set_timeout_s:g}s"
            if "resend" not in verdict:
                return verdict.get("cause")
        return losses.NOT_RECEIVED

    def _lost_by_counters(self, d: dict, s: BagSet) -> str | None:
        """The node's set-level counters grew past the bag's incomplete sets sent so far and the
        losses already attributed: this set was lost, and the counter that grew says why."""
        counts = losses.set_level_counts(d)
        expected = sum(1 for i in self.sets.incomplete_at if i <= s.last_index)
        if sum(counts.values()) <= expected + self._attributed:
            return None
        self._attributed += 1
        cause = losses.pick_cause(losses.growth(counts, self._counts_at_last_loss))
        self._counts_at_last_loss = counts
        return cause

    # diagnostics ------------------------------------------------------------------------
    def _stamped(self):
        """(stamp_ns, values) of the node's diagnostics received, oldest first."""
        from ..demo.consumer import diagnostics_dict

        return [(stamp_to_ns(arr.header.stamp), diagnostics_dict(arr))
                for arr in list(self.session.con.diagnostics)
                if arr.status and "bev pooling" in arr.status[0].name]

    def _diagnostics_before(self, t_ns: int) -> dict:
        older = [v for st, v in self._stamped() if st <= t_ns]
        return older[-1] if older else {}

    def _diagnostics_after(self, t_ns: int) -> dict | None:
        newer = [v for st, v in self._stamped() if st >= t_ns]
        return newer[-1] if newer else None

    def _fresh_diagnostics(self, start: dict) -> dict:
        """A diagnostics message sent after now whose counters cover the whole replay, once every
        grid it counts has arrived: the node's ``sets_published`` grew by N over the replay, so N
        grids are on their way to us. A late grid (the last one, on a loaded machine) used to be
        scored lost although the node had published it; one that never comes is lost in transit
        (``ReplayResult.in_transit``). Waits at most GRIDS_WAIT_S."""
        t = time.time_ns()

        def published(d) -> int:
            return losses.counter(d, "sets_published") - losses.counter(start, "sets_published")

        def covers() -> bool:
            d = self._diagnostics_after(t)
            return d is not None and published(d) <= self.grids_received
        self.session.spin_until(covers, GRIDS_WAIT_S)
        return self._diagnostics_after(t) or self.session.con.latest_diagnostics() or {}
