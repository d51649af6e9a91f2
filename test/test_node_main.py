"""What bevpool_node's entry point sets up before rclpy starts, in real processes: the short GIL
switch interval (node/main.py) and the clean-up of segments that killed Fast DDS processes left."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from test_dds_shm import SHM_DIR, segments, start_participant

from bevpool_ros.ros.process import GIL_SWITCH_INTERVAL_S

pytestmark = pytest.mark.alone  # compares the segments in /dev/shm before and after (no other worker's)


def run_python(code: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_ros_processes_start_with_the_short_gil_switch_interval():
    assert GIL_SWITCH_INTERVAL_S < sys.getswitchinterval()  # shorter than CPython's default
    r = run_python("""
        import sys, rclpy
        from bevpool_ros.ros.process import init_without_signal_handlers
        before = sys.getswitchinterval()
        stop = init_without_signal_handlers([sys.argv[0]])
        print(before, sys.getswitchinterval(), rclpy.ok())
        rclpy.shutdown()
    """)
    assert r.returncode == 0, r.stderr
    before, after, ok = r.stdout.split()
    assert float(before) == pytest.approx(0.005) and float(after) == pytest.approx(GIL_SWITCH_INTERVAL_S)
    assert ok == "True"


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm")
def test_a_new_bevpool_process_frees_what_a_killed_one_left():
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    killed, segs = start_participant(dict(os.environ))
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    old = time.time() - 60  # as if killed a minute ago (young segments are left alone)
    for s in segs:
        os.utime(SHM_DIR / s, (old, old))
    env = {k: v for k, v in os.environ.items() if k not in ("FASTDDS_DEFAULT_PROFILES_FILE",
                                                            "FASTRTPS_DEFAULT_PROFILES_FILE")}
    r = run_python("""
        from bevpool_ros.ros.process import use_large_data_profile
        print(use_large_data_profile())
    """, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("fastdds_large_data.xml")
    assert "shared-memory segment(s) of killed Fast DDS processes" in r.stderr
    assert not (segs & segments())


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm")
def test_a_node_that_starts_and_stops_leaves_no_segment_behind():
    """With the input size guard (opt-in, BEVPOOL_DDS_GUARD=1) bevpool_node re-executes itself once
    to load its input profile (ros/dds_guard.py); the segments of the first image used to outlive
    the process (2 x 64 MiB per start)."""
    import os

    from ros_harness import isolate_ros_env

    isolate_ros_env()
    before = segments()
    node = subprocess.Popen([sys.executable, "-m", "bevpool_ros.node.main", "--ros-args", "-p", "backend:=cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, BEVPOOL_DDS_GUARD="1"))
    lines = []
    try:
        for line in node.stdout:
            lines.append(line)
            if "ready:" in line:
                break
        assert any("restarting once" in x for x in lines), "".join(lines)  # the re-execution happened
        assert any("ready:" in x for x in lines), "".join(lines)
    finally:
        node.send_signal(signal.SIGINT)
        assert node.wait(60) == 0, "".join(lines)
    assert not (segments() - before), "".join(lines)
