"""One process's or thread's line in /proc (``/proc/<pid>/stat``, ``/proc/<pid>/task/<tid>/stat``):
its name, state letter and CPU time. Linux only; a process or thread that is gone reads as None."""
from __future__ import annotations

import os
from typing import NamedTuple

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Stat(NamedTuple):
    name: str          # the command or thread name (threads carry theirs: thread_name.py)
    state: str         # 'R', 'S', 'D', 'T' stopped, 't' traced, ...
    cpu_s: float       # user + system time so far


def read_stat(path: str) -> Stat | None:
    try:
        with open(path, "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    name, rest = text.split("(", 1)[1].rsplit(")", 1)  # the name may hold spaces and parentheses
    fields = rest.split()
    return Stat(name, fields[0], (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS)  # utime, stime


def process_stat(pid: int | str = "self") -> Stat | None:
    return read_stat(f"/proc/{pid}/stat")


def thread_stat(tid: int, pid: int | str = "self") -> Stat | None:
    return read_stat(f"/proc/{pid}/task/{tid}/stat")


def _thread_ids(pid: int | str) -> list[int]:
    """Process ``pid``'s threads now (none: it is gone)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def thread_stats(pid: int | str = "self") -> list[Stat]:
    """Every thread of process ``pid`` that is still there."""
    return [s for s in (thread_stat(t, pid) for t in _thread_ids(pid)) if s is not None]


def run_delays(pid: int | str = "self") -> dict[int, float]:
    """Seconds each thread of process ``pid`` has spent runnable but waiting for a CPU so far
    (``/proc/<pid>/task/<tid>/schedstat``, its second field): what a host too busy to run it denied
    it. Empty where the kernel keeps no schedstat or the process is gone."""
    out = {}
    for tid in _thread_ids(pid):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                out[tid] = int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass  # ended meanwhile
    return out
