"""The node's stderr filter (ros/stderr_filter.py) in a process of its own: it owns fd 2 there."""
from __future__ import annotations

import subprocess
import sys
import textwrap

LAST_WORDS = textwrap.dedent("""
    import os, sys, time
    from bevpool_ros.ros.stderr_filter import StderrFilter

    counted = []
    f = StderrFilter(counted.append)
    f.install()
    passed_on = f._write
    def slow_write(data):  # a busy host: the filter thread gets the CPU late
        time.sleep(0.05)
        passed_on(data)
    f._write = slow_write
    os.write(2, b"sequence size exceeds remaining buffer\\n")
    os.write(2, b"watchdog: last words; exiting with code 70\\n")
    time.sleep(0.01)  # the thread has read both lines and is passing them on
    f.flush(timeout=2.0)
    os.write(f.original, ("counted %s\\n" % counted).encode())
    os._exit(70)  # as the watchdog ends the process: no atexit, no thread joined
""")


def test_flush_waits_for_lines_already_read_before_the_process_exits():
    done = subprocess.run([sys.executable, "-c", LAST_WORDS], capture_output=True, text=True, timeout=30)
    assert done.returncode == 70, done.stderr
    assert "watchdog: last words; exiting with code 70" in done.stderr, done.stderr
    assert "a sample that does not deserialize" in done.stderr and "counted ['dds_undecodable']" in done.stderr, \
        done.stderr
