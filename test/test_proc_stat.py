"""bevpool_ros/proc_stat.py: a process's and its threads' lines in /proc, read as the watchdog, the
backstop and the benchmarks read them."""
from __future__ import annotations

import ctypes
import threading
import time

from bevpool_ros.proc_stat import process_stat, thread_stat, thread_stats


def test_a_named_thread_is_read_by_its_name_state_and_cpu_time():
    started, release = threading.Event(), threading.Event()
    tids = []

    def burn():
        ctypes.CDLL(None).prctl(15, b"a (b) c", 0, 0, 0)  # PR_SET_NAME: a name with spaces and parentheses
        tids.append(threading.get_native_id())
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.05:
            pass
        started.set()
        release.wait()

    t = threading.Thread(target=burn, daemon=True)
    t.start()
    assert started.wait(10.0)
    try:
        stat = thread_stat(tids[0])
        assert stat.name == "a (b) c" and stat.state in "RS" and stat.cpu_s >= 0.03, stat
        assert "a (b) c" in [s.name for s in thread_stats()]
        assert process_stat().cpu_s >= stat.cpu_s
    finally:
        release.set()
        t.join(5.0)
    # join() returns when Python is done with the thread, a moment before the kernel reaps it
    deadline = time.monotonic() + 5.0
    while thread_stat(tids[0]) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread_stat(tids[0]) is None  # it ended


def test_a_process_that_is_gone_reads_as_none():
    assert process_stat(2 ** 22 + 1) is None and thread_stats(2 ** 22 + 1) == []
