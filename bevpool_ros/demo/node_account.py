"""What a node did with the sets a tool fed it, in one line, from its /diagnostics counters.

Shared by the tools that feed bevpool_node (``bevpool-synthetic``, ``bevpool-demo``): the complete
sets it counted of those sent, the grids it published, and every counter of the node's that grew
meanwhile, by name (``dropped_worker_busy+2``, ``skipped_no_subscribers+20``, ...), so a set that
arrived but never became a grid is never reported as fine.
"""
from __future__ import annotations

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
