"""The process's watchdog: a node that stops making progress exits, so a supervisor restarts it.

A perception node that hangs is worse than one that is late: planners downstream wait on it. The
watchdog thread watches
- the executor thread: ``spin_until_shutdown`` beats after every ``spin_once`` (which returns
  within 0.1 s when idle), so no beat for ``watchdog.timeout_s`` means a callback or the
  middleware is stuck;
- the pooling thread (or the hand-off thread pooling a set inline): a set in progress for longer
  than that (``PoolingWorker.in_progress``; a calibration change's re-prepare is exempt: a
  TensorRT engine build takes minutes), or the thread gone;
- the input thread (``node.input_thread``, subscription_thread.py): messages being taken and
  handled for longer than that;
- the hand-off set loop (``node.handoff_thread``, node/handoff_sets.py): what the core handed to
  Python (a stream's first announcement, a set, a drop) handled for longer than that, or a set's
  launch in the core (its GPU wait) taking that long; blocked in the core, waiting for datagrams,
  it is idle.
On a stall it logs one line naming the thread and where it is (its Python stack, innermost last),
publishes an ERROR status on /diagnostics (from its own thread, waiting at most 0.5 s for it),
and exits with EXIT_STUCK.

A pause is not a hang: SIGSTOP / SIGCONT, a frozen container or a host under memory pressure stop
every thread together, the watchdog's too. The watchdog knows its own tick: when it wakes more
than PAUSE_S late, it was not running either, so it cannot say what the others did meanwhile; it
starts watching over (one log line) instead of judging the pause as theirs. A thread that is
really stuck is still caught one timeout later.

A thread stuck while holding the GIL stops every Python thread, this one included: the backstop
(backstop.py), a small process of its own that the watchdog beats to, prints every thread's stack
and kills the process; it, too, waits out a pause.

Stop signals: SIGINT/SIGTERM only ask the spin loop to stop (process.StopSignals); a loop stuck in a
callback never sees that. Their C-level handler also wakes this thread (``signal.set_wakeup_fd``),
which allows the process STOP_GRACE_S to stop by itself and then ends it (one line, EXIT_STUCK). A
teardown that is still working then (its threads used CPU time in the last grace, or one of them
ended: a host that starves the process) gets another grace, up to STOP_LIMIT_S in all; a stuck one
does not. faulthandler's C-level timer ends an exit that does not finish by STOP_LIMIT_S (exit code 1).

Fault injection for supervisors' own tests:
``BEVPOOL_INJECT_STALL=executor|pooling|input|executor_gil|launch`` stalls that thread for good: the
executor after the node's first published grid, the pooling thread after its first set, the input
thread at its first message after the first grid, the hand-off set loop in the core's first launch
of a set; ``executor_gil`` holds the interpreter lock meanwhile.
"""
from __future__ import annotations

import faulthandler
import os
import select
import signal
import sys
import threading
import time
import traceback
from contextlib import contextmanager

from ..proc_stat import thread_stat

EXIT_STUCK = 70        # sysexits' EX_SOFTWARE: an internal error, restart me
STOP_GRACE_S = 1.5     # a stop signal -> forced exit (the process gone within 2 s of SIGINT/SIGTERM) ...
STOP_LIMIT_S = 6.0     # ... unless its teardown still progresses (a starved host): at most this
STOP_PROGRESS_CPU_S = 0.01  # the teardown's threads' CPU time in a grace that counts as progress (1 tick)
BACKSTOP_MARGIN_S = 5.0  # the backstop: this much after the watchdog would have spoken
PAUSE_S = 1.0          # the watchdog woke this much after its tick: the process was paused (or starved)
STACK_FRAMES = 4
INJECT_ENV = "BEVPOOL_INJECT_STALL"
INJECTED_STALL = os.environ.get(INJECT_ENV, "")

# Steps allowed to take long (a configure, a re-prepare: kernels compiled, an engine built), by
# thread: the watchdog does not judge that thread meanwhile, and the backstop does not judge the
# process (the step may hold the GIL). The lock orders "no long step -> beat" against
# "register -> long-step beat".
_long_steps: dict[int, str] = {}
_long_lock = threading.Lock()
_backstop = None  # the running watchdog's Backstop (one per process)


@contextmanager
def long_step(what: str):
    ident = threading.get_ident()
    with _long_lock:
        outer = _long_steps.get(ident)
        _long_steps[ident] = what
        if _backstop is not None:
            _backstop.beat(long_step=True)
    try:
        yield
    finally:
        with _long_lock:
            if outer is None:
                _long_steps.pop(ident, None)
            else:
                _long_steps[ident] = outer


def short_stack(frame, frames: int = STACK_FRAMES) -> str:
    """``file.py:line function`` of the innermost ``frames`` frames, outermost first, on one line."""
    if frame is None:
        return "(no Python frame)"
    entries = traceback.extract_stack(frame)[-frames:]
    return " > ".join(f"{os.path.basename(e.filename)}:{e.lineno} {e.name}" for e in entries)


def other_threads(but: int | None) -> str:
    """Each other Python thread's name and innermost frame, on one line."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return ", ".join(f"{names.get(ident, ident)} at {short_stack(frame, 1)}"
                     for ident, frame in sys._current_frames().items()
                     if ident not in (but, threading.get_ident())) or "none"


def thread_name(ident: int | None) -> str:
    return next((t.name for t in threading.enumerate() if t.ident == ident), "a thread")


def stack_of(ident: int | None) -> str:
    return short_stack(sys._current_frames().get(ident)) if ident is not None else "(thread unknown)"


class Watchdog:
    def __init__(self, node, timeout_s: float, stop_fd: int | None = None, fault_fd: int = 2,
                 before_exit=None, exit=os._exit, backstop: bool = True):
        """``node``: its logger, ``report`` (the last status) and ``worker`` (the pooling
        thread) are watched; ``timeout_s`` > 0; ``stop_fd``: the read end of the signal wake-up
        pipe (process.StopSignals); ``fault_fd``: where the backstop prints stacks (a descriptor that
        needs no Python thread: the original stderr, stderr_filter.py); ``before_exit()``: lets
        the last line out; ``exit``: how the process ends (tests pass their own); ``backstop``:
        start the backstop process (backstop.py) with the watchdog."""
        self.node = node
        self.fault_fd = fault_fd
        self.before_exit = before_exit or (lambda: None)
        self.timeout_s = float(timeout_s)
        self.stop_fd = stop_fd
        self._exit = exit
        self._executor_ident: int | None = None
        self._executor_beat = time.monotonic()
        self._stop_asked: float | None = None
        self._stop_deadline = 0.0
        self._stop_progress: tuple[float, frozenset] = (0.0, frozenset())  # teardown_cpu() at the last grace
        self._running = True
        self._watching_since = time.monotonic()  # the last start-over (a pause): no stall is older
        self.pauses = 0
        self._tick_s = min(1.0, max(0.05, self.timeout_s / 4))
        self._with_backstop = backstop
        self._thread = threading.Thread(target=self._loop, name="bevpool-watchdog", daemon=True)

    # what the watched threads call ------------------------------------------------------------
    def start(self) -> None:
        global _backstop
        self._executor_ident = threading.get_ident()  # the thread that spins
        self._executor_beat = time.monotonic()
        if self._with_backstop:
            from .backstop import Backstop

            _backstop = Backstop(self.timeout_s + BACKSTOP_MARGIN_S, self.fault_fd)
        self._beat_backstop()
        self._thread.start()

    def beat(self) -> None:
        """The executor thread came back from a ``spin_once``."""
        self._executor_beat = time.monotonic()
        if INJECTED_STALL and self.node.report.counts.get("published"):
            injected_stall("executor")

    def stop(self) -> None:
        """The process is ending by itself: no more checks. The backstop stays armed until exit
        (a teardown that hangs is still ended)."""
        self._running = False

    # the watchdog thread -----------------------------------------------------------------------
    def _beat_backstop(self) -> None:
        with _long_lock:
            if _backstop is not None:
                _backstop.beat(long_step=bool(_long_steps))

    def _loop(self) -> None:
        while True:
            asked = self._stop_asked
            wait = self._tick_s if asked is None else max(0.0, self._stop_deadline - time.monotonic())
            before = time.monotonic()
            self._wait(wait)
            now = time.monotonic()
            if asked is None and self._stop_asked is None and now - before - wait > PAUSE_S:
                self._start_over(now, now - before - wait)
            if self._stop_asked is not None:
                if now >= self._stop_deadline and not self._stop_progressing(now):
                    self._end(f"a stop was asked {now - self._stop_asked:.1f} s ago and the process "
                              f"has not ended; executor thread at {stack_of(self._executor_ident)}; "
                              f"other threads: {other_threads(self._executor_ident)}")
                continue
            if not self._running:
                continue  # a clean teardown is under way: only the stop deadline counts
            self._beat_backstop()
            stuck = self.stuck(now)
            if stuck:
                self._end(stuck, publish=True)

    def _wait(self, seconds: float) -> None:
        """Sleep ``seconds``, or less when a stop signal arrives (then the grace period starts and
        the backstop is brought forward to its end)."""
        if self.stop_fd is None:
            time.sleep(seconds)
            return
        try:
            ready, _, _ = select.select([self.stop_fd], [], [], seconds)
            if ready and os.read(self.stop_fd, 64) and self._stop_asked is None:
                self._stop_progress = self.teardown_cpu()
                self._stop_deadline = time.monotonic() + STOP_GRACE_S
                self._stop_asked = time.monotonic()
                faulthandler.dump_traceback_later(STOP_LIMIT_S + 0.45, exit=True, file=self.fault_fd)
        except (OSError, ValueError):  # the pipe went away: keep the timing, lose the early wake
            self.stop_fd = None

    def _stop_progressing(self, now: float) -> bool:
        """(a grace has passed since the stop or the last extension) Is the teardown still working?
        Then one more grace, within STOP_LIMIT_S of the stop."""
        cpu, alive = self.teardown_cpu()
        before_cpu, before_alive = self._stop_progress
        self._stop_progress = (cpu, alive)
        if now - self._stop_asked >= STOP_LIMIT_S:
            return False
        if cpu - before_cpu >= STOP_PROGRESS_CPU_S or not before_alive <= alive:
            self._stop_deadline = min(now + STOP_GRACE_S, self._stop_asked + STOP_LIMIT_S)
            return True
        return False

    def teardown_cpu(self) -> tuple[float, frozenset]:
        """CPU seconds the threads that tear the node down have used (the spinning thread, the
        pooling, input and hand-off set-loop threads; /proc, so a thread that ends is no hazard),
        and which of them are alive."""
        idents = {self._executor_ident}
        worker = getattr(self.node, "worker", None)
        if worker is not None:
            idents.add(worker.thread_ident)
        idents.update(watched.thread_ident for _, watched in self._input_threads())
        total, alive = 0.0, set()
        for t in threading.enumerate():
            stat = thread_stat(t.native_id) if t.ident in idents and t.native_id is not None else None
            if stat is not None:  # None: not one of them, or it ended
                total += stat.cpu_s
                alive.add(t.native_id)
        return total, frozenset(alive)

    def _start_over(self, now: float, late_s: float) -> None:
        """The watchdog itself was not running for ``late_s``: a pause of the whole process (or a
        host that starved it). What the others did meanwhile is unknown: watch them afresh."""
        self.pauses += 1
        self._watching_since = now
        self._executor_beat = max(self._executor_beat, now)
        try:
            self.node.get_logger().warning(
                f"watchdog: this process did not run for {late_s:.1f} s (paused or starved); "
                f"watching its threads afresh")
        except Exception:  # noqa: BLE001 - a log line is not worth a watchdog thread
            pass

    def stuck(self, now: float) -> str:
        """One line describing a stalled thread, or ''."""
        age = now - self._executor_beat
        if age > self.timeout_s and self._executor_ident not in _long_steps:
            return (f"executor thread made no progress for {age:.1f} s: at "
                    f"{stack_of(self._executor_ident)}")
        # a set being pooled first: the inputs' threads pool inline too, and the stall is then the set's
        worker = getattr(self.node, "worker", None)
        if worker is not None:
            if not worker.thread_alive():
                return "pooling thread has ended; no set can be pooled"
            since, ident, doing = worker.in_progress()
            if since is not None:
                since = max(since, self._watching_since)
            if since is not None and now - since > self.timeout_s and ident not in _long_steps:
                inline = ident != worker.thread_ident
                name = f"{thread_name(ident)} pooling a set inline" if inline else "pooling thread"
                return f"{name} made no progress for {now - since:.1f} s ({doing}): at {stack_of(ident)}"
        for name, watched in self._input_threads():
            since = watched.busy_since
            if since is not None and watched.thread_ident in _long_steps:
                continue  # a re-prepare while it pools a set inline
            if since is not None and now - max(since, self._watching_since) > self.timeout_s:
                return (f"{name} made no progress for {now - max(since, self._watching_since):.1f} s: "
                        f"at {stack_of(watched.thread_ident)}")
        return ""

    def _input_threads(self):
        """(name, thread object) of the threads that take inputs and report ``busy_since``."""
        for name, attr in (("input thread", "input_thread"), ("hand-off set loop", "handoff_thread")):
            watched = getattr(self.node, attr, None)
            if watched is not None:
                yield name, watched

    def _end(self, what: str, publish: bool = False) -> None:
        line = f"watchdog: {what}; exiting with code {EXIT_STUCK} for a restart"
        try:
            self.node.get_logger().fatal(line)
        except Exception:  # the logger itself may be what is stuck
            print(f"bevpool_node: {line}", file=sys.stderr, flush=True)
        if publish:
            last_word = threading.Thread(target=self._publish_error, args=(line,), daemon=True)
            last_word.start()
            last_word.join(0.5)
        sys.stdout.flush()
        sys.stderr.flush()
        self.before_exit()
        self._exit(EXIT_STUCK)

    def _publish_error(self, line: str) -> None:
        try:
            self.node.report.publish_diagnostics(stuck=line)
        except Exception:  # noqa: BLE001 - the process exits anyway
            pass


def injected_stall(thread: str) -> None:
    """Stall ``thread`` for good when BEVPOOL_INJECT_STALL names it (see the module's docstring)."""
    wanted = INJECTED_STALL
    if wanted == thread:
        threading.Event().wait()
    elif wanted == f"{thread}_gil":
        import ctypes

        ctypes.PyDLL(None).sleep(3600)  # a C call made with the GIL held


def wake_fd_on_signals() -> int | None:
    """A pipe the C-level signal handler writes to (no GIL needed); its read end, or None when
    this is not the main thread."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread
        os.close(r)
        os.close(w)
        return None
    return r
