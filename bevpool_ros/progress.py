"""One progress bar for long command-line loops (bag fan-out, benchmarks, engine builds).

tqdm when it is installed and stderr is a terminal (tqdm's own ``disable=None`` rule, so logs and
CI output stay free of carriage-return noise); otherwise a silent stand-in with the same calls.
``BEVPOOL_PROGRESS=0`` switches bars off, ``=1`` forces them on.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def refresh(self) -> None:
        pass


@contextmanager
def progress_bar(total: int | None = None, desc: str = "", unit: str = "it", enabled: bool = True):
    forced = os.environ.get("BEVPOOL_PROGRESS")
    if forced == "0" or not enabled:
        yield _Silent()
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield _Silent()
        return
    with tqdm(total=total, desc=desc, unit=unit, disable=False if forced == "1" else None) as bar:
        yield bar


def track(items, desc: str = "", unit: str = "it", total: int | None = None):
    """Iterate ``items`` with a bar (the one-line form for call sites: ``for x in track(xs, "..."):``)."""
    items = list(items) if total is None and not hasattr(items, "__len__") else items
    with progress_bar(total if total is not None else len(items), desc, unit) as bar:
        for item in items:
            yield item
            bar.update(1)


def run_with_progress(desc: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` under a one-step bar whose elapsed time keeps ticking (one long call,
    e.g. a TensorRT engine build, that reports no progress of its own)."""
    with progress_bar(total=1, desc=desc, unit="step") as bar:
        done = threading.Event()

        def tick():
            while not done.wait(0.5):
                bar.refresh()
        threading.Thread(target=tick, daemon=True).start()
        try:
            return fn(*args, **kwargs)
        finally:
            done.set()
            bar.update(1)
