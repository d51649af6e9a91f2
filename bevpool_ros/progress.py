"""One progress bar for long command-line loops (bag fan-out, benchmarks, engine builds).

tqdm when it is installed and stderr is a terminal; otherwise a silent stand-in with the same
calls. ``BEVPOOL_PROGRESS=0`` switches bars off, ``=1`` forces them on: where stderr is not a
terminal (a log, CI) that is plain lines, one every LINE_EVERY_S at most and the final state once
(tqdm's redraws there became one line each, its last state twice: at the last update and again
when it closed).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

LINE_EVERY_S = 10.0


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def refresh(self) -> None:
        pass


class _Lines:
    """Progress as plain lines for a log: one at most every LINE_EVERY_S, the final state once."""

    def __init__(self, stream, total: int | None, desc: str, unit: str):
        self.stream, self.total, self.desc, self.unit = stream, total, desc, unit
        self.n, self.postfix = 0, ""
        self._start = self._shown_at = time.monotonic()
        self._shown = ""
        self._lock = threading.Lock()  # run_with_progress refreshes from a thread

    def _state(self) -> str:
        if self.total:
            done = f"{100 * self.n // self.total}% {self.n}/{self.total} {self.unit}"
        else:
            done = f"{self.n} {self.unit}"
        return f"{self.desc}: {done}" + (f", {self.postfix}" if self.postfix else "")

    def _show(self, final: bool = False) -> None:
        with self._lock:
            state, now = self._state(), time.monotonic()
            if state == self._shown or (not final and now - self._shown_at < LINE_EVERY_S):
                return
            self._shown, self._shown_at = state, now
            print(f"{state} [{now - self._start:.1f} s]", file=self.stream, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        self._show()

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def refresh(self) -> None:
        self._show()

    def close(self) -> None:
        self._show(final=True)


@contextmanager
def progress_bar(total: int | None = None, desc: str = "", unit: str = "it", enabled: bool = True):
    forced = os.environ.get("BEVPOOL_PROGRESS")
    if forced == "0" or not enabled:
        yield _Silent()
        return
    if not sys.stderr.isatty():
        if forced != "1":  # tqdm's own rule: no bar in a log unless asked for
            yield _Silent()
            return
        bar = _Lines(sys.stderr, total, desc, unit)
        try:
            yield bar
        finally:
            bar.close()
        return
    try:
        from tqdm import tqdm
    except ImportError:
        yield _Silent()
        return
    with tqdm(total=total, desc=desc, unit=unit) as bar:
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
