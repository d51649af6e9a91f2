"""Lost sets: how many a run may lose (``--allow-lost``) and why each one was lost.

A *lost* set is a complete set of the bag (``sets.find_sets``) that did not come back as a grid
pooled from all of its cameras. The causes come from what the node reports: the growth of its
set-level drop counters over the replay (``/diagnostics``), as named there (``worker_busy``,
``sync_incomplete_timeout``, ...). The bag's own incomplete sets are expected among the
synchroniser's drops and are taken out first. Sets the node shows no trace of are
``not_received_by_node`` when it accepted fewer tensor messages than were played (lost between
player and node: the input history ``input.qos_depth`` overflowed, or the transport dropped them).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

from ..node_health import SET_LOSSES

# set-level counters, named as /diagnostics names them (without the "dropped_" prefix)
SET_LEVEL = tuple(k.removeprefix("dropped_") for k in SET_LOSSES) + ("skipped_no_subscribers",)
# how the synchroniser lets an incomplete set go
SYNC_SET_DROPS = ("sync_superseded", "sync_incomplete_timeout", "sync_evicted")
PARTIAL = "published_partial"        # the node zero-filled cameras the bag holds
NOT_RECEIVED = "not_received_by_node"
IN_TRANSIT = "published_not_received"  # the node published its grid; it never reached the evaluation
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class AllowLost:
    """``--allow-lost``: a number of sets (``3``) or a fraction of the complete ones
    (``0.05``, ``5%``)."""

    count: int | None = 0
    fraction: float | None = None

    @classmethod
    def parse(cls, text: str) -> "AllowLost":
        t = text.strip()
        try:
            if t.endswith("%"):
                return cls._fraction(float(t[:-1]) / 100.0, text)
            if t.isdigit():
                return cls(count=int(t))
            return cls._fraction(float(t), text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of sets (3) or a fraction of "
                                             f"them (0.05 or 5%), got {text!r}") from None

    @classmethod
    def _fraction(cls, f: float, text: str) -> "AllowLost":
        if not 0.0 <= f <= 1.0:
            raise ValueError(text)
        return cls(count=None, fraction=f)

    def of(self, complete: int) -> int:
        """The number of lost sets tolerated among ``complete``."""
        if self.fraction is not None:
            return math.floor(self.fraction * complete + 1e-9)
        return int(self.count or 0)

    def __str__(self) -> str:
        if self.fraction is not None:
            return f"{self.fraction:g} of the complete sets"
        return str(self.count)


def counter(diagnostics: dict, key: str) -> int:
    """A /diagnostics counter as an int (absent or unreadable: 0)."""
    try:
        return int(float(diagnostics.get(key, 0)))
    except (TypeError, ValueError):
        return 0


def set_level_counts(diagnostics: dict) -> dict[str, int]:
    """The node's set-level drop counters, by cause."""
    return {k: counter(diagnostics, k if k.startswith(("sync_", "skipped_")) else f"dropped_{k}")
            for k in SET_LEVEL}


def growth(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0) > 0}


def rate_mode_causes(lost: int, partial: int, counts: dict[str, int], bag_incomplete: int,
                     messages_short: int, in_transit: int = 0) -> dict[str, int]:
    """Causes of ``lost`` sets in a free-running replay, from the node's counters over the run.

    ``partial``: lost sets whose grid came out zero-filled; ``counts``: set-level counter growth;
    ``bag_incomplete``: incomplete sets of the bag the node dropped (expected, taken out of the
    synchroniser's drops); ``messages_short``: tensor messages played but never accepted by the
    node; ``in_transit``: grids the node counted published that never arrived.
    """
    counts = dict(counts)
    expected = bag_incomplete
    for k in SYNC_SET_DROPS:
        taken = min(expected, counts.get(k, 0))
        counts[k] = counts.get(k, 0) - taken
        expected -= taken
    causes = {PARTIAL: partial} if partial else {}
    causes.update({k: v for k, v in counts.items() if v > 0})
    if in_transit and lost > sum(causes.values()):
        causes[IN_TRANSIT] = min(in_transit, lost - sum(causes.values()))
    rest = lost - sum(causes.values())
    if rest > 0:
        causes[NOT_RECEIVED if messages_short > 0 else UNEXPLAINED] = rest
    return causes


def pick_cause(grew: dict[str, int]) -> str:
    """The cause of one lost set from the counters that grew while it was in flight: a drop of the
    node's own (worker, backend, input check) before the synchroniser's, which may be the bag's."""
    own = {k: v for k, v in grew.items() if not k.startswith("sync_")}
    pool = own or grew
    return max(pool, key=pool.get) if pool else UNEXPLAINED


def describe(causes: dict[str, int]) -> str:
    ranked = sorted(causes.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v}" for k, v in ranked) or "no cause reported"
