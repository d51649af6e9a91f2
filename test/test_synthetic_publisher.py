"""The synthetic camera publisher as a user runs it (``python -m bevpool_ros.cli.synthetic``,
console script ``bevpool-synthetic``): a real process that publishes the rig's topics and stops on
Ctrl-C (a real SIGINT) with exit 0 and no traceback, also when interrupted while starting; it waits
for a node that starts after it and accounts for every set it sent from the node's /diagnostics."""
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

    proc = _start("--rate", "20", "--wait", "0")  # this listener takes one topic of 18
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


def test_waits_for_a_node_started_after_it_and_accounts_for_every_set():
    """The tool is up first; the node starts once the tool says it waits. Every one of the 20 sets
    must reach the node (it counts them complete), and the tool must say so."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor

    from bevpool_ros.demo.session import NodeProcess
    from bevpool_ros.paths import default_rig_path
    from bevpool_ros.ros.diagnostics import status_values

    proc = _start("--frames", "20", "--rate", "20", "--wait", "120")
    node = None
    try:
        line = _first_line(proc, 60)
        assert "(20 sets); waiting up to 120 s for subscriptions on its 18 topics" in line, (
            line + proc.stderr.read())
        node = NodeProcess({"rig_file": str(default_rig_path()), "backend": "cpu",
                            "diagnostics.period_s": 0.2})
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0 and "Traceback" not in err, out + err[-3000:]
        assert "bevpool-synthetic: all 18 topics subscribed: publishing" in out, out
        assert "bevpool-synthetic: sent 20 sets" in out, out
        # no one subscribes the grids, so the node pools none of them, and the tool says so by name
        assert (f"bevpool_node (pid {node.proc.pid}) counted 20 complete sets of the 20 sent and published "
                "0 grids: skipped_no_subscribers+20") in out, out
        # the node's own word, read here: 20 complete sets, no more, no fewer
        ctx = rclpy.Context()
        rclpy.init(context=ctx)
        listener = rclpy.create_node("diagnostics_listener", context=ctx)
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(listener)
        seen = []
        listener.create_subscription(DiagnosticArray, "/diagnostics",
                                     lambda m: seen.append(status_values(m)), 10)
        try:
            deadline = time.monotonic() + 30
            while not any(v.get("pid") == str(node.proc.pid) for v in seen) and time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.1)
        finally:
            executor.shutdown()
            listener.destroy_node()
            rclpy.try_shutdown(context=ctx)
        ours = [v for v in seen if v.get("pid") == str(node.proc.pid)]
        assert ours and ours[-1]["sync_sets_complete"] == "20", ours[-1:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if node is not None:
            rc, log = node.stop()
            assert rc == 0, log[-3000:]


def test_without_a_node_it_says_so_in_one_line_and_exits_1():
    proc = _start("--frames", "5", "--wait", "1")
    out, err = proc.communicate(timeout=60)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("bevpool: removed ")]
    assert proc.returncode == 1 and len(lines) == 1, out + err
    assert lines[0].startswith("bevpool-synthetic: no subscriber on 18 of 18 topics after 1 s "
                               "(/cameras/CAM_FRONT/depth,"), lines
    assert "--wait 0" in lines[0] and "sent" not in out, out


class _Subscriber:
    def create_subscription(self, *args):
        return None


def _status(pid: str, stamp_s: int, **counts):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    arr = DiagnosticArray()
    arr.header.stamp.sec = stamp_s
    st = DiagnosticStatus(name="bevpool_node: bev pooling")
    st.values = [KeyValue(key="pid", value=pid)] + [KeyValue(key=k, value=str(v)) for k, v in counts.items()]
    arr.status = [st]
    return arr


def test_missed_sets_are_counted_against_the_status_before_the_first_set():
    from bevpool_ros.demo.node_account import NodeCounters

    c = NodeCounters(_Subscriber())
    assert c.report(20, drained=True) == [
        "no bevpool node's /diagnostics seen: how many of the sets it received is unknown"]
    # the node had counted 5 sets of someone else's before ours
    c._on_status(_status("7", 100, sync_sets_complete=5, sync_accepted_messages=60))
    c.mark_baseline()
    c._on_status(_status("7", 101, sync_sets_complete=17, sync_sets_partial=1, sync_incomplete_timeout=3,
                         missing_CAM_BACK=1, sync_accepted_messages=200))
    assert not c.settled(101 * 10**9, 20)  # one status after the last set: it may still count
    c._on_status(_status("7", 102, sync_sets_complete=21, sync_sets_partial=1, sync_incomplete_timeout=3,
                         missing_CAM_BACK=1, sync_accepted_messages=248))
    assert not c.settled(101 * 10**9, 20)  # still growing
    c._on_status(_status("7", 103, sync_sets_complete=21, sync_sets_partial=1, sync_incomplete_timeout=3,
                         missing_CAM_BACK=1, sync_accepted_messages=248))
    assert c.settled(101 * 10**9, 20)      # two alike: nothing more is coming
    assert c.report(20, drained=True) == [
        "bevpool_node (pid 7) counted 16 complete sets and 1 partial of the 20 sent (4 missed): "
        "missing_CAM_BACK+1, sync_incomplete_timeout+3"]
    c._on_status(_status("7", 104, sync_sets_complete=25, sync_accepted_messages=300))
    assert c.settled(101 * 10**9, 20)      # every set counted
    assert c.report(20, drained=False) == [
        "bevpool_node (pid 7) counted 20 complete sets of the 20 sent: nothing dropped "
        "(by its last status: the last sets may still be on their way)"]


def test_sets_the_node_dropped_after_counting_them_are_named_not_called_fine():
    """All 20 sets arrived complete, but the pooling thread was busy for 2: the report names the
    counter instead of saying that none was missed."""
    from bevpool_ros.demo.node_account import NodeCounters

    c = NodeCounters(_Subscriber())
    c._on_status(_status("7", 100, sync_sets_complete=0, sets_published=0))
    c.mark_baseline()
    c._on_status(_status("7", 102, sync_sets_complete=20, sets_published=18, dropped_worker_busy=2))
    assert c.report(20, drained=True) == [
        "bevpool_node (pid 7) counted 20 complete sets of the 20 sent and published 18 grids: "
        "dropped_worker_busy+2"]


def test_a_node_that_stopped_reporting_is_called_gone_not_a_transport_loss():
    from bevpool_ros.demo.node_account import NodeCounters

    now = [0.0]
    c = NodeCounters(_Subscriber(), clock=lambda: now[0])
    for t in range(3):  # one status a second
        now[0] = float(t)
        c._on_status(_status("7", 100 + t, sync_sets_complete=0, sets_published=0))
    c.mark_baseline()
    now[0] = 3.0
    c._on_status(_status("7", 103, sync_sets_complete=5, sets_published=5))
    now[0] = 3.5
    assert c.report(20, drained=True) == [  # still reporting: not gone
        "bevpool_node (pid 7) counted 5 complete sets of the 20 sent (15 missed) and published 5 grids: "
        "no counter of the node's explains the 15 missed (lost before it, in discovery or transport)"]
    now[0] = 12.0
    assert c.report(20, drained=True, subscribed=False) == [
        "bevpool_node (pid 7) is gone: no status for 9.0 s (it sent one every 1.0 s), and no subscriber "
        "is left on the rig's topics",
        "bevpool_node (pid 7) counted 5 complete sets of the 20 sent (15 missed) and published 5 grids: "
        "it went before counting the 15 missed (by its last status, before it went)"]


def test_the_tool_says_when_the_node_dies_under_it():
    """A real node killed (SIGKILL) while the tool publishes: the tool's report says it is gone."""
    from ros_harness import kill_node_while_feeding

    from bevpool_ros.demo.session import NodeProcess
    from bevpool_ros.paths import default_rig_path

    proc = _start("--frames", "100", "--rate", "20", "--wait", "120")  # isolates this test's domain
    node = NodeProcess({"rig_file": str(default_rig_path()), "backend": "cpu", "diagnostics.period_s": 0.2})
    try:
        out, err = kill_node_while_feeding(proc, node, "publishing")
    finally:
        node.stop()
    assert proc.returncode == 0 and "Traceback" not in err, out + err[-3000:]
    gone = [ln for ln in out.splitlines() if " is gone: " in ln]
    assert gone and gone[0].startswith(f"bevpool-synthetic: bevpool_node (pid {node.proc.pid}) is gone: "
                                       "no status for "), out
    assert "discovery or transport" not in out and "before it went" in out, out
