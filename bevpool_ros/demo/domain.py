"""A DDS domain to itself for one graph: a test's, a demo's, a bag evaluation's.

Topics are matched by name within a domain, so two graphs on one domain feed each other: a bag
evaluation's camera messages pooled by another bevpool_node, whose grids the evaluation then
scores as its own. Ids 1..101 keep Fast DDS's port numbers below Linux's ephemeral range; each
is claimed with an flock on a file in the temp folder, so processes on one machine that claim
their domain here (test suites running at once, evaluations, demos) never share one. A process
holds its claims until it releases them or exits (the lock goes with the process); a child
(the node) inherits the id through ROS_DOMAIN_ID, not the lock.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import time

DOMAINS = 101  # ids 1..DOMAINS
_held: dict[int, int] = {}  # domain -> the descriptor of its locked file


def lock_path(domain: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"bevpool_ros_domain_{domain}.lock")


def first_choice() -> int:
    """A domain id to try first that differs from process to process and from moment to moment
    (processes starting together rarely contend for one lock)."""
    return 1 + (os.getpid() * 7919 + time.time_ns() // 1000) % DOMAINS


def claim_domain(start: int | None = None) -> int:
    """A domain id no other process on this machine has claimed, and this one does not hold:
    ``start`` if free, else the next free one after it (default start: a per-process pick).
    RuntimeError when every id is held."""
    if start is None:
        start = first_choice()
    for step in range(DOMAINS):
        domain = 1 + (start - 1 + step) % DOMAINS
        if domain in _held:
            continue
        try:  # read-only: an flock needs no write access, so another user's lock file serves too
            fd = os.open(lock_path(domain), os.O_RDONLY | os.O_CREAT, 0o644)
        except OSError:  # another user's file we may not read: theirs
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process holds it
            os.close(fd)
            continue
        _held[domain] = fd
        return domain
    raise RuntimeError(f"no free ROS domain among 1..{DOMAINS} (other runs on this machine hold them all)")


def release_domain(domain: int) -> None:
    """Give a claimed domain back (nothing if this process does not hold it)."""
    fd = _held.pop(domain, None)
    if fd is not None:
        os.close(fd)
