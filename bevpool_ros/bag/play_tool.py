"""bevpool-bag play's player: wait for the node, play the bag, then say what the node got.

The phases are demo/node_account.FeedAccount's, as bevpool-synthetic's: wait until the bag's
camera tensor topics have subscriptions (at most ``wait_s``; then it plays anyway, saying which
topics nobody took), take the node's counters before the first message from its /diagnostics,
play, wait for its counters to cover the last set, and report: messages and complete camera sets
played, then per node the complete sets it counted, the grids it published and its counters that
grew, by name; a node whose statuses stopped during play is said to be gone. Without any bevpool
node's /diagnostics on the graph, one line says so.
"""
from __future__ import annotations

from bisect import bisect_left

from ..demo.node_account import FeedAccount
from ..params.table import BY_NAME
from .play import BagPlayer
from .sets import find_sets

TOOL = "bevpool-bag play"
SHOWN_TOPICS = 3


class AccountedBagPlayer(FeedAccount, BagPlayer):
    """BagPlayer that first waits for the node and at the end accounts for the sets it played
    (module doc); ``done`` once finished."""

    def __init__(self, bag, rate: float = 1.0, wait_s: float = 5.0, say=print, **kw):
        super().__init__(bag, **kw)
        self.watch_nodes(wait_s)
        self.rate, self.say = rate, say
        self.tensor_topics = sorted({self.messages[e.index].topic for e in self.entries})
        # the complete sets of the bag's cameras, as a node with the default sync.slop_s forms them:
        # where each one's last message is, so the sets played so far are counted by position
        cameras = list(dict.fromkeys(e.camera for e in self.entries))
        sets = find_sets(self.entries, cameras, BY_NAME["sync.slop_s"].default).complete
        self._set_ends = sorted(s.last_index for s in sets)

    def topics_without_subscribers(self) -> list[str]:
        return [t for t in self.tensor_topics if self.pubs[t].get_subscription_count() == 0]

    def unsubscribed(self, missing: list[str]) -> bool:
        shown = ", ".join(missing[:SHOWN_TOPICS]) + (" ..." if len(missing) > SHOWN_TOPICS else "")
        self.say(f"{TOOL}: no subscriber on {len(missing)} of {len(self.tensor_topics)} camera topics after "
                 f"{self.wait_s:g} s ({shown}): playing anyway")
        return True

    def start_feeding(self) -> None:
        self.say(f"playing {len(self.messages)} messages over {self.duration_s:.2f} s x {1 / self.rate:.2f}")
        self.start(self.rate)

    @property
    def feeding_done(self) -> bool:
        return BagPlayer.done.fget(self)

    @property
    def sets_fed(self) -> int:
        """Complete camera sets whose every message has been played."""
        return bisect_left(self._set_ends, self.sent)

    def summary(self) -> list[str]:
        """What to say at the end: what was played, then what each node counted of it."""
        if self.phase in ("idle", "waiting", "baseline"):
            return [f"{TOOL}: stopped before the first message"]
        lines = [f"{TOOL}: played {self.sent} of {len(self.messages)} messages, {self.sets_fed} complete "
                 "camera sets"]
        return lines + self.node_report(TOOL)
