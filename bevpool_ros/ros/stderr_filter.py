"""The node's stderr through a thread that throttles and counts what the middleware prints per bad
sample.

A sample whose CDR holds a sequence length beyond its bytes is dropped in the message type
support, which prints ``sequence size exceeds remaining buffer`` to stderr (C ``fprintf``, no topic,
no rate limit: a hostile publisher got ~30 such lines out of the node in a second) and returns no
message, raises no event and keeps no counter. Here fd 2 becomes a pipe read by a thread: such a
line is counted (``dropped_dds_undecodable``), shown once per throttle period with what it means,
and the rest of each period is summed up in one line; every other line passes unchanged. The topic
cannot be learnt: the type support is called inside the middleware's take, which tells the node
nothing (docs/ros_interface.md, "What the middleware reports").

The pipe is 1 MiB deep and the thread needs the interpreter lock only to copy lines; the watchdog's
C-level backstop writes to the original stderr (``original``), so a process stuck with the lock
held still prints its stacks.
"""
from __future__ import annotations

import fcntl
import os
import select
import threading
import time

# line printed by the middleware -> (counter, what it means)
KNOWN_LINES = {
    b"sequence size exceeds remaining buffer": (
        "dds_undecodable", "a sample that does not deserialize (a sequence longer than its bytes) was "
        "dropped by the middleware before the node saw it; the middleware names no topic"),
}
PIPE_BYTES = 1 << 20
PARTIAL_FLUSH_S = 0.1  # a line without its newline yet is passed on after this long


class StderrFilter:
    def __init__(self, count, period_s: float = 2.0):
        """``count(counter)`` is called once per known line; ``period_s``: one shown per period."""
        self.count = count
        self.period_s = float(period_s)
        self.original: int | None = None   # a descriptor of the stderr the process started with
        self._read: int | None = None
        self._thread: threading.Thread | None = None
        self._shown: dict[bytes, float] = {}
        self._held: dict[bytes, int] = {}  # known lines not shown since their last showing
        self._busy = False  # the thread holds bytes it read and has not passed on yet

    def install(self) -> None:
        self.original = os.dup(2)
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:  # an older kernel's limit: the default 64 KiB still works
            pass
        os.dup2(w, 2)
        os.close(w)
        self._read = r
        self._thread = threading.Thread(target=self._loop, name="bevpool-stderr", daemon=True)
        self._thread.start()

    def flush(self, timeout: float = 0.3) -> None:
        """Wait until what was written so far has been passed on (at most ``timeout``): nothing
        unread in the pipe and nothing read and not yet written (the watchdog's last line, read by
        the thread just before the process exits, was lost on a busy host when only the pipe was
        looked at)."""
        if self._read is None:
            return
        deadline = time.monotonic() + timeout
        while (self._busy or select.select([self._read], [], [], 0)[0]) and time.monotonic() < deadline:
            time.sleep(0.002)

    def close(self) -> None:
        """stderr back to the original; the thread passes on what is left and ends."""
        if self.original is not None:
            os.dup2(self.original, 2)  # the pipe's last write end: the thread reads EOF
        if self._thread is not None:
            self._thread.join(1.0)

    # the thread ----------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        while data:
            try:
                data = data[os.write(self.original, data):]
            except InterruptedError:
                continue
            except OSError:  # the original stderr is gone: nothing left to tell
                return

    def _loop(self) -> None:
        pending = b""
        while True:
            # asleep until a line comes, unless a partial line or held lines wait for their time:
            # no wake-up of its own while the node pools sets (each would take the GIL)
            waiting = pending or any(self._held.values())
            ready, _, _ = select.select([self._read], [], [], PARTIAL_FLUSH_S if waiting else None)
            if ready:
                self._busy = True
                chunk = os.read(self._read, 1 << 16)
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self._line(line)
                self._busy = False  # a partial line left in ``pending`` is written within 0.1 s
                continue
            if pending:  # a partial line and nothing more for a while
                self._write(pending)
                pending = b""
            self._summaries(time.monotonic())
        if pending:
            self._write(pending)
        self._summaries(float("inf"))
        os.close(self._read)
        self._busy = False

    def _line(self, line: bytes) -> None:
        key = line.strip()
        if key not in KNOWN_LINES:
            self._write(line + b"\n")
            return
        counter, meaning = KNOWN_LINES[key]
        self.count(counter)
        now = time.monotonic()
        if now - self._shown.get(key, -1e9) < self.period_s:
            self._held[key] = self._held.get(key, 0) + 1
            return
        self._summaries(float("inf"), only=key)
        self._shown[key] = now
        self._write(line + f"  [bevpool_node: {meaning}; counted {counter}, shown once per "
                           f"{self.period_s:g} s]\n".encode())

    def _summaries(self, now: float, only: bytes | None = None) -> None:
        for key, n in list(self._held.items()):
            if n and (only is None or key == only) and now - self._shown.get(key, -1e9) >= self.period_s:
                counter = KNOWN_LINES[key][0]
                self._write(f"bevpool_node: {n} more '{key.decode()}' since the last one shown "
                            f"(counted {counter})\n".encode())
                self._held[key] = 0
