"""One wait-for-discovery loop for the demo's nodes (never a fixed sleep)."""
from __future__ import annotations

import time


def poll_until(predicate, timeout: float, spin=None, step: float = 0.05) -> bool:
    """True once ``predicate()`` holds; between checks ``spin(step)`` (an executor's) or a sleep."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        spin(step) if spin else time.sleep(step)
    return False
