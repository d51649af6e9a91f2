"""bevpool-synthetic's publisher: wait for the node, publish, then say what the node got.

The phases are node_account.FeedAccount's: wait until every topic of the rig (each camera's depth,
feat and camera_info) has a subscription, at most ``wait_s`` (a node that is not running, inactive,
on another domain, namespace or rig is named by the topics still unmatched); take the node's
counters before the first set from its /diagnostics; publish ``frames`` sets at ``rate``; wait for
its counters to cover the last set, and report: sets sent, then per node the complete sets it
counted, the grids it published and its counters that grew, by name; a node whose statuses
stopped is said to be gone, with its last word.
"""
from __future__ import annotations

from .node_account import FeedAccount
from .synthetic_publisher import SyntheticRigPublisher

SHOWN_TOPICS = 3


class WaitingPublisher(FeedAccount, SyntheticRigPublisher):
    """SyntheticRigPublisher that first waits for the node and at the end accounts for its sets
    (module doc); ``done`` once finished, ``exit_code`` 1 when no node subscribed in time."""

    def __init__(self, rig, wait_s: float = 30.0, say=print, complain=print, **kw):
        super().__init__(rig, **kw)
        self.watch_nodes(wait_s)
        self.say, self.complain = say, complain  # progress lines; the one line of a failed wait
        self.exit_code = 0
        self._plan = (0.0, 0)

    def begin(self, rate_hz: float, frames: int = 0) -> None:
        self._plan = (rate_hz, frames)
        self.begin_feed()
        self.say(self.started_line() + (f"; waiting up to {self.wait_s:g} s for subscriptions on its "
                                        f"{len(self.pubs)} topics" if self.wait_s > 0 else ""))

    def start_feeding(self) -> None:
        self.start(*self._plan)
        if self.wait_s > 0:
            diag = "" if self.counters.latest else ", no bevpool node's /diagnostics yet"
            self.say(f"bevpool-synthetic: all {len(self.pubs)} topics subscribed{diag}: publishing")

    @property
    def feeding_done(self) -> bool:
        return SyntheticRigPublisher.done.fget(self)

    @property
    def sets_fed(self) -> int:
        return self.sent

    def started_line(self) -> str:
        rate, frames = self._plan
        return (f"bevpool-synthetic: rig {self.rig.name}, {self.rig.num_cameras} cameras, {rate:g} sets/s "
                "on cameras/<camera>/{depth,feat,camera_info} "
                + (f"({frames} sets)" if frames else "(Ctrl-C stops)"))

    def unsubscribed(self, missing: list[str]) -> bool:
        shown = ", ".join(missing[:SHOWN_TOPICS]) + (" ..." if len(missing) > SHOWN_TOPICS else "")
        self.complain(f"bevpool-synthetic: no subscriber on {len(missing)} of {len(self.pubs)} topics after "
                 f"{self.wait_s:g} s ({shown}): is bevpool_node running and active on this ROS_DOMAIN_ID, "
                 "in this namespace, with this rig's cameras? (--wait 0 publishes without waiting)")
        self.exit_code = 1
        return False

    def summary(self) -> list[str]:
        """What to say at the end (nothing after a failed wait: that was said)."""
        if self.phase == "failed":
            return []
        if self.phase in ("idle", "waiting", "baseline"):
            return ["bevpool-synthetic: stopped before the first set"]
        lines = [f"bevpool-synthetic: sent {self.sent} sets"]
        return lines + (self.node_report("bevpool-synthetic") if self.sent else [])
