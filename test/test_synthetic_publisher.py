"""The synthetic camera publisher as a user runs it (``python -m bevpool_ros.cli.synthetic``,
console script ``bevpool-synthetic``): a real process that publishes the rig's topics and stops on
Ctrl-C (a real SIGINT) with exit 0 and no traceback, also when interrupted while starting."""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.ros


def _start(*args):
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    return subprocess.Popen([sys.executable, "-m", "bevpool_ros.cli.synthetic", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))


def _first_line(proc, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.2)[0]:
            return proc.stdout.readline()
        if proc.poll() is not None:
            break
    return ""


def _interrupt(proc) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"still running 30 s after SIGINT: {err[-2000:]}")
    return proc.returncode, err


def test_publishes_the_rig_and_stops_cleanly_on_ctrl_c():
    import rclpy
    from bevpool_msgs.msg import CameraTensor
    from rclpy.executors import SingleThreadedExecutor

    from bevpool_ros.ros.qos import make_qos

    proc = _start("--rate", "20")
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("synthetic_listener", context=ctx)
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    got = []
    node.create_subscription(CameraTensor, "cameras/CAM_FRONT/feat", got.append,
                             make_qos("best_effort", 5))
    try:
        line = _first_line(proc, 60)
        assert line.startswith("bevpool-synthetic: rig ") and "Ctrl-C stops" in line, (
            line + proc.stderr.read())
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
        assert got and got[0].layout == "HWC", "no CAM_FRONT feature tensor received"
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        rc, err = _interrupt(proc)
    assert rc == 0 and "Traceback" not in err, err[-3000:]


def test_ctrl_c_while_starting_is_a_clean_stop():
    proc = _start("--rate", "20")
    time.sleep(1.0)  # inside start-up (imports, rclpy, the scene): no output expected yet
    rc, err = _interrupt(proc)
    assert rc == 0 and "Traceback" not in err, err[-3000:]
