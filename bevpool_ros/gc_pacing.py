"""Garbage collection between sets, not in the middle of one.

CPython collects whenever allocations pass a threshold, in whichever thread allocates, and holds
the GIL meanwhile: in bevpool_node that is usually a set on its way through (on the H200 host a
generation-1 collection took 1.1-2.4 ms, about 12 per 1,000 sets: the p99). ``BetweenSets`` turns
automatic collection off and collects where a pause costs nothing:

    pacing = BetweenSets()
    pacing.start()               # freezes what exists (start-up objects are never scanned again)
    ... after each set is published:  pacing.collect_if_due()
    ... from a slow timer:            pacing.collect_if_due(idle=True)
    pacing.stop()

``collect_if_due`` applies CPython's own rule (the oldest generation whose count passed its
threshold is collected, with the younger ones), so as much is collected as before, only later.
``idle=True`` (a timer, while no set flows) waits for ten times the threshold: garbage made by
other threads is still collected when the sets stop. Reference counting frees everything without
cycles at once either way. The node uses it with ``processing.gc_between_sets``; a consumer
process can do the same after each grid.
"""
from __future__ import annotations

import gc
import threading

IDLE_FACTOR = 10  # idle=True: collect once a generation holds this many times its threshold

# automatic collection is process-wide: it stays off while any BetweenSets is started
_users = 0
_users_lock = threading.Lock()
_was_enabled = True


class BetweenSets:
    def __init__(self):
        self.active = False
        self.collections = [0, 0, 0]  # per generation, by this pacing
        self._lock = threading.Lock()  # collect_if_due from the pooling and the timer threads

    def start(self) -> None:
        global _users, _was_enabled
        if self.active:
            return
        with _users_lock:
            if _users == 0:
                _was_enabled = gc.isenabled()
                gc.collect()
                gc.disable()
            gc.freeze()  # what exists now (start-up, the backend, the map) is never scanned again
            _users += 1
        self.active = True

    def stop(self) -> None:
        global _users
        if not self.active:
            return
        self.active = False
        with _users_lock:
            _users -= 1
            if _users == 0:
                gc.unfreeze()
                if _was_enabled:
                    gc.enable()

    def due(self, idle: bool = False) -> int:
        """The generation a collection would take now, or -1."""
        counts, thresholds = gc.get_count(), gc.get_threshold()
        factor = IDLE_FACTOR if idle else 1
        for gen in (2, 1, 0):
            if thresholds[gen] and counts[gen] >= factor * thresholds[gen]:
                return gen
        return -1

    def collect_if_due(self, idle: bool = False) -> int:
        """Collect the generation that is due (see ``due``); the generation collected, or -1."""
        if not self.active:
            return -1
        with self._lock:
            gen = self.due(idle)
            if gen >= 0:
                gc.collect(gen)
                self.collections[gen] += 1
        return gen
