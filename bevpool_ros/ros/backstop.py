"""The watchdog's backstop, in a small process of its own: it ends a node in which no Python thread
runs any more, and it waits out a node that is paused.

The watchdog (liveness.py) is a Python thread: a thread stuck while holding the interpreter lock
stops it too. Something outside the interpreter has to notice. faulthandler's C-level timer did,
but a timer cannot tell a stuck process from a paused one: SIGSTOP / SIGCONT, a frozen container,
a debugger or a host under memory pressure stop every thread together, the timer's deadline
passes meanwhile, and on resume it ended a healthy node. So the watchdog thread beats into a pipe
that this process reads, and this process judges with what it can see from outside:
- the node stopped (``T`` / ``t`` in /proc/PID/stat): a pause, not a hang; the clock starts over
  when it runs again;
- this process itself woke late: it was paused too (a frozen cgroup holds both); it starts over;
- ``L`` from the watchdog: a long step (a kernel compile, an engine build) may hold the lock; not
  judged until ``B`` again;
- a host too busy to run the node: the time its threads waited runnable for a CPU since the last beat
  (the longest such wait of any one thread, from /proc schedstat) does not count as silence, as a
  pause does not; up to STARVED_LIMIT times the limit, so a stuck node on a starved host still ends;
- no beat for ``limit_s`` while the node runs: every thread's stack is printed (faulthandler,
  registered for SIGUSR2 in the node: C level, no lock needed), one line says why, and the node
  is killed (SIGKILL); a supervisor restarts it.
The pipe's end is the node's end: EOF, and this process exits.

    python -m bevpool_ros.ros.backstop PID LIMIT_S   (beats on stdin; started by start_backstop)
"""
from __future__ import annotations

import faulthandler
import os
import select
import signal
import subprocess
import sys
import time

from ..proc_stat import process_stat, run_delays

DUMP_SIGNAL = signal.SIGUSR2
BEAT, LONG_STEP = b"B", b"L"
TICK_S = 0.25
LATE_S = 1.0         # this process woke this much after its tick: it was paused itself
DUMP_WAIT_S = 0.5    # for the node's stack dump to reach stderr before the kill
STARVED_LIMIT = 3.0  # silence excused by starvation ends at this many times the limit (wall clock)


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat ('R', 'S', 'D', 'T' stopped, 't' traced, ...); '' when
    the process is gone."""
    stat = process_stat(pid)
    return stat.state if stat is not None else ""


class Judge:
    """The backstop's rule, apart from its pipe and clock: ``heard`` and ``tick`` return a line
    when the node must end, '' otherwise."""

    def __init__(self, limit_s: float, now: float, delays: dict | None = None):
        self.limit_s = float(limit_s)
        self.last_beat = now
        self.in_long_step = False
        self.delays_at_beat = delays or {}  # run_delays() of the node's threads at the last beat

    def heard(self, data: bytes, now: float, delays: dict | None = None) -> None:
        last = data[-1:]
        self.in_long_step = last == LONG_STEP
        self.last_beat = now
        self.delays_at_beat = delays or {}

    def tick(self, now: float, slept_late_s: float, node_state: str, delays: dict | None = None) -> str:
        """``delays``: run_delays() of the node's threads now (None: not read)."""
        if slept_late_s > LATE_S or node_state in ("T", "t"):
            self.last_beat = now  # paused (the node, or both of us): start over
            self.delays_at_beat = delays or {}
            return ""
        silent = now - self.last_beat
        if self.in_long_step or silent <= self.limit_s:
            return ""
        starved = max((d - self.delays_at_beat.get(tid, 0.0) for tid, d in (delays or {}).items()), default=0.0)
        if silent - starved <= self.limit_s and silent <= STARVED_LIMIT * self.limit_s:
            return ""  # the host did not run it: starved, not stuck
        return (f"no Python thread ran for {silent:.1f} s ({starved:.1f} s of it waiting for a CPU; the "
                f"watchdog thread did not beat; a thread holds the interpreter lock): every thread's stack above")


def watch(pid: int, limit_s: float, beats_fd: int = 0, err=sys.stderr) -> int:
    judge = Judge(limit_s, time.monotonic(), run_delays(pid))
    while True:
        asleep = time.monotonic()
        ready, _, _ = select.select([beats_fd], [], [], TICK_S)
        now = time.monotonic()
        if ready:
            data = os.read(beats_fd, 4096)
            if not data:  # the node has ended
                return 0
            judge.heard(data, now, run_delays(pid))
        silent = now - judge.last_beat > judge.limit_s  # the threads' waits are read only then
        why = judge.tick(now, now - asleep - TICK_S if not ready else 0.0, process_state(pid),
                         run_delays(pid) if silent else None)
        if why:
            try:
                os.kill(pid, DUMP_SIGNAL)
                time.sleep(DUMP_WAIT_S)
                print(f"bevpool backstop: {why}; killing process {pid} for a restart", file=err, flush=True)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return 1


class Backstop:
    """The node's side: starts the watching process and beats into its pipe (from the watchdog
    thread); the pipe closes with the process."""

    def __init__(self, limit_s: float, stderr_fd: int = 2):
        faulthandler.register(DUMP_SIGNAL, file=stderr_fd, all_threads=True, chain=False)
        read_end, self._write_end = os.pipe()
        os.set_blocking(self._write_end, False)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bevpool_ros.ros.backstop", str(os.getpid()), repr(float(limit_s))],
            stdin=read_end, stdout=subprocess.DEVNULL, stderr=stderr_fd, close_fds=True)
        os.close(read_end)

    def beat(self, long_step: bool = False) -> None:
        try:
            os.write(self._write_end, LONG_STEP if long_step else BEAT)
        except (BlockingIOError, OSError):  # a full pipe: the watcher is behind, beats are not lost
            pass

    def close(self) -> None:
        """The node is ending by itself: the watcher sees EOF and exits."""
        try:
            os.close(self._write_end)
        except OSError:
            pass
        try:
            self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()


if __name__ == "__main__":
    sys.exit(watch(int(sys.argv[1]), float(sys.argv[2])))
