"""The watchdog and its backstop tell a paused process from a stuck one (ros/liveness.py,
ros/backstop.py). Rules with explicit clocks, and the backstop process on real processes: one
that is stopped (SIGSTOP) and one whose beats stop."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types

import pytest

from bevpool_ros.ros import backstop, liveness
from bevpool_ros.ros.backstop import BEAT, LONG_STEP, Judge, process_state


def test_the_judge_ends_a_node_whose_beats_stop():
    j = Judge(limit_s=6.0, now=0.0)
    assert j.tick(5.0, 0.0, "S") == ""
    assert "no Python thread ran for 6.5 s" in j.tick(6.5, 0.0, "S")


def test_a_beat_or_a_long_step_keeps_it_quiet():
    j = Judge(limit_s=6.0, now=0.0)
    j.heard(BEAT, 5.0)
    assert j.tick(10.0, 0.0, "R") == ""
    j.heard(BEAT + LONG_STEP, 10.0)  # the last byte counts: a long step began
    assert j.tick(100.0, 0.0, "R") == ""
    j.heard(LONG_STEP + BEAT, 100.0)
    assert j.tick(107.0, 0.0, "R") != ""


def test_a_stopped_node_or_a_late_judge_starts_the_clock_over():
    j = Judge(limit_s=6.0, now=0.0)
    assert j.tick(60.0, 0.0, "T") == ""       # SIGSTOP: stopped, not stuck
    assert j.tick(65.0, 0.0, "R") == ""       # running again: 5 s since the pause ended
    assert j.tick(67.0, 0.0, "R") != ""
    j = Judge(limit_s=6.0, now=0.0)
    assert j.tick(60.0, 59.0, "R") == ""      # the judge slept 59 s past its tick: frozen too
    assert j.tick(66.5, 0.0, "S") != ""


def test_time_the_host_did_not_run_the_node_is_not_silence_up_to_a_bound():
    """A starved host (the node's threads runnable, waiting for a CPU) is no stuck node, as a pause is
    not: the longest wait of one thread since the last beat is taken off the silence. A stuck node on
    a starved host still ends, at STARVED_LIMIT times the limit."""
    j = Judge(limit_s=6.0, now=0.0, delays={1: 2.0, 2: 0.5})
    assert "no Python thread ran for 6.5 s" in j.tick(6.5, 0.0, "R", {1: 2.1, 2: 0.6})  # ran, and beat not
    j = Judge(limit_s=6.0, now=0.0, delays={1: 2.0, 2: 0.5})
    assert j.tick(10.1, 0.0, "R", {1: 11.0, 2: 0.7, 3: 0.2}) == ""  # 9 of its 10.1 s waiting: 1.1 s silent
    line = j.tick(18.5, 0.0, "R", {1: 19.0, 2: 0.7})  # still waiting, but past 3 x 6 s
    assert "no Python thread ran for 18.5 s (17.0 s of it waiting for a CPU" in line, line
    j.heard(BEAT, 20.0, {1: 19.0})
    assert j.tick(26.5, 0.0, "R", {1: 19.1, 4: 0.3}) != ""  # the wait counts from the last beat


def test_run_delays_read_how_long_a_starved_thread_waited_for_a_cpu():
    """Three busy processes share one CPU with a fourth: in 2 s it waits for that CPU about 1.5 s,
    and its schedstat says so (ros/backstop.py judges a starved node by it)."""
    from bevpool_ros.proc_stat import run_delays

    if not run_delays():
        pytest.skip("this kernel keeps no schedstat")
    cpu = min(os.sched_getaffinity(0))
    busy = [subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
            for _ in range(4)]
    try:
        time.sleep(0.5)  # all four pinned and spinning
        before = run_delays(busy[0].pid)
        time.sleep(2.0)
        after = run_delays(busy[0].pid)
        waited = max(after[t] - before.get(t, 0.0) for t in after)
        assert waited >= 0.8, (before, after)
        assert run_delays(2 ** 22 + 1) == {}
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_process_state_reads_a_stopped_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_state(child.pid) in ("R", "S")
        child.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while process_state(child.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_state(child.pid) == "T"
        child.send_signal(signal.SIGCONT)
    finally:
        child.kill()
        child.wait()
    assert process_state(child.pid) == ""  # gone


def run_watcher(target_pid: int, limit_s: float):
    """The backstop process on ``target_pid``; returns (proc, the write end of its beats)."""
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "bevpool_ros.ros.backstop", str(target_pid), str(limit_s)],
                            stdin=r, stderr=subprocess.PIPE, text=True)
    os.close(r)
    return proc, w


def test_the_backstop_process_waits_out_a_stopped_target_and_kills_a_silent_one():
    target = subprocess.Popen([sys.executable, "-c", "import faulthandler, signal, time; "
                               "faulthandler.register(signal.SIGUSR2, all_threads=True); time.sleep(60)"],
                              stderr=subprocess.PIPE, text=True)
    watcher, beats = run_watcher(target.pid, 1.0)
    try:
        target.send_signal(signal.SIGSTOP)
        time.sleep(3.0)  # three limits long, but stopped
        assert watcher.poll() is None and target.poll() is None
        target.send_signal(signal.SIGCONT)
        assert target.wait(10.0) == -signal.SIGKILL  # running and silent: killed after the limit
        assert watcher.wait(5.0) == 1
        assert "no Python thread ran for" in watcher.stderr.read()
        assert "most recent call first" in target.stderr.read()  # its stacks, printed first
    finally:
        target.kill()
        os.close(beats)


def test_the_backstop_process_ends_with_the_pipe():
    watcher, beats = run_watcher(os.getpid(), 60.0)
    os.write(beats, BEAT)
    os.close(beats)
    assert watcher.wait(5.0) == 0


class FakeWorker:
    thread_ident = 1

    def __init__(self, since):
        self.since = since

    def thread_alive(self):
        return True

    def in_progress(self):
        return self.since, self.thread_ident, "pooling a set"


def quiet_node(worker=None):
    logs = []
    logger = types.SimpleNamespace(warning=logs.append, fatal=logs.append)
    return types.SimpleNamespace(get_logger=lambda: logger, worker=worker), logs


def test_the_watchdog_starts_over_after_its_own_late_wake():
    """A pause stops the watchdog thread too: after it, the old beat and the set in progress are
    not judged as stalls; a stall that goes on after the pause still is, one timeout later."""
    now = time.monotonic()
    node, logs = quiet_node(FakeWorker(since=now - 30.0))
    dog = liveness.Watchdog(node, 2.0, backstop=False)
    dog._executor_beat = now - 30.0
    assert "made no progress for 30" in dog.stuck(now)  # without the start-over: a stall
    dog._start_over(now, 29.0)
    assert dog.stuck(now + 1.0) == "" and dog.pauses == 1
    assert "did not run for 29.0 s" in logs[0]
    assert "made no progress for 2.5 s" in dog.stuck(now + 2.5)  # the executor, first


def test_a_set_pooled_inline_by_the_set_loop_is_named_as_a_set_not_as_the_loop():
    """The hand-off set loop (or the input thread) pools a set inline when the pooling thread is idle:
    a stall there is the set's, named with its thread; a re-prepare (a long step) there is not one."""
    now = time.monotonic()
    loop_thread = threading.current_thread()
    worker = FakeWorker(since=now - 30.0)
    worker.in_progress = lambda: (worker.since, loop_thread.ident, "pooling a set")
    handoff = types.SimpleNamespace(busy_since=now - 30.0, thread_ident=loop_thread.ident)
    node, _ = quiet_node(worker)
    node.handoff_thread = handoff
    dog = liveness.Watchdog(node, 2.0, backstop=False)
    dog._executor_beat, dog._watching_since = now, now - 60.0
    line = dog.stuck(now)
    assert line.startswith(f"{loop_thread.name} pooling a set inline made no progress for 30"), line
    with liveness.long_step("compiling kernels"):
        assert dog.stuck(now) == ""


def test_a_late_wake_in_the_running_watchdog_is_a_pause(monkeypatch):
    """The watchdog's own loop measures its lateness: a wait that returns PAUSE_S late starts over."""
    node, logs = quiet_node()
    dog = liveness.Watchdog(node, 0.2, backstop=False, exit=lambda code: None)
    real_wait, slept = dog._wait, []

    def late_once(seconds):
        real_wait(seconds)
        if not slept:
            slept.append(seconds)
            time.sleep(liveness.PAUSE_S + 0.3)  # as if the process had been stopped here
    monkeypatch.setattr(dog, "_wait", late_once)
    dog._executor_beat = time.monotonic()
    dog._executor_ident = threading.get_ident()
    dog._thread.start()
    deadline = time.monotonic() + 5
    while dog.pauses == 0 and time.monotonic() < deadline:
        dog.beat()
        time.sleep(0.02)
    dog.stop()
    assert dog.pauses == 1 and "watching its threads afresh" in logs[0], logs


@pytest.mark.parametrize("teardown", ["stuck", "working", "working_past_the_limit"])
def test_a_stop_waits_for_a_teardown_still_at_work_not_for_a_stuck_one(monkeypatch, teardown):
    """After a stop signal the watchdog allows a grace; a teardown whose threads still use CPU time
    (a host that starves the process) gets another, up to STOP_LIMIT_S; a stuck one does not. The
    spinning thread here burns CPU for ``burn_s``, then waits as a stuck thread would."""
    armed = []
    monkeypatch.setattr(liveness.faulthandler, "dump_traceback_later", lambda s, **k: armed.append(s))
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the SystemExit that ends its thread
    burn_s = {"stuck": 0.0, "working": 3.0, "working_past_the_limit": 60.0}[teardown]
    release = threading.Event()

    def tearing_down():
        t0 = time.monotonic()
        while time.monotonic() - t0 < burn_s and not release.is_set():
            pass  # the teardown's work
        release.wait()

    spinning = threading.Thread(target=tearing_down, daemon=True)
    spinning.start()
    ended = []
    node, logs = quiet_node()
    read_end, write_end = os.pipe()
    dog = liveness.Watchdog(node, 60.0, stop_fd=read_end, backstop=False,
                            exit=lambda code: (ended.append((code, time.monotonic())), sys.exit()))
    dog._executor_ident = spinning.ident
    try:
        dog._thread.start()
        asked = time.monotonic()
        os.write(write_end, b"\x02")  # what the C-level signal handler writes
        dog._thread.join(liveness.STOP_LIMIT_S + 10)
    finally:
        release.set()
        os.close(write_end)
        os.close(read_end)
    assert [code for code, _ in ended] == [liveness.EXIT_STUCK], (ended, logs)
    took = ended[0][1] - asked
    assert "a stop was asked" in logs[-1] and armed == [liveness.STOP_LIMIT_S + 0.45]
    if teardown == "stuck":
        assert took < liveness.STOP_LIMIT_S - 1.0, took  # one grace, not the limit
    elif teardown == "working":
        assert 3.0 <= took < liveness.STOP_LIMIT_S + 1.0, took  # not ended while it worked
    else:
        assert liveness.STOP_LIMIT_S <= took < liveness.STOP_LIMIT_S + 2.0, took  # the limit holds


def test_a_long_step_reaches_the_backstop(monkeypatch):
    sent = []
    heard = types.SimpleNamespace(beat=lambda long_step=False: sent.append(long_step))
    monkeypatch.setattr(liveness, "_backstop", heard)
    with liveness.long_step("compiling"):
        pass
    assert sent == [True]
    assert backstop.LONG_STEP != backstop.BEAT
