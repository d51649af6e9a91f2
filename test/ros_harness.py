"""Helpers for the ROS tests: isolated DDS domain, node subprocess, spin-until waits.

Isolation: every test session picks its own ROS_DOMAIN_ID and localhost-only discovery, set
before rclpy.init, inherited by the node subprocesses. Waits poll graph state or received
data with generous timeouts; no fixed sleeps.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bevpool_ros.demo.session import isolate, ros_param_args
from bevpool_ros.paths import default_rig_path

REPO = Path(__file__).resolve().parent.parent
DISCOVERY_TIMEOUT = 20.0
# The node runs the best backend of the machine: a grid is checked at the tolerance of the
# precision it says it ran (BevFeature.precision), as (rtol, atol per unit of max |reference|).
# fp16/fp8 as the GPU kernel tests (test_cuda_backend_gpu.py, precision_select.FP8_*).
TOLERANCE = {"fp32": (1e-4, 1e-5), "fp16": (1e-2, 1e-2), "fp8": (0.15, 2e-2)}
BACKEND_PRECISIONS = {"cpu": ("fp32",), "cuda": ("fp16", "fp8"), "tensorrt": ("fp16", "fp8")}


def assert_bev_matches(bev, ref, msg) -> None:
    """``bev`` (from BevFeature ``msg``) equals the FP64 reference at the tolerance of the
    backend and precision the node actually chose."""
    assert msg.precision in BACKEND_PRECISIONS.get(msg.backend, ()), (msg.backend, msg.precision)
    rtol, atol = TOLERANCE[msg.precision]
    np.testing.assert_allclose(bev, ref, rtol=rtol, atol=atol * max(1.0, float(np.abs(ref).max())))


def no_gpu_env() -> dict:
    """Environment in which a node sees no GPU (cuda and tensorrt unavailable on any machine)."""
    return dict(os.environ, CUDA_VISIBLE_DEVICES="")


def isolate_ros_env() -> int:
    """Own domain per run + localhost discovery. Domain ids 1..101 keep Fast DDS's port numbers
    below Linux's ephemeral port range; pid and time spread concurrent runs over them."""
    if "BEVPOOL_TEST_DOMAIN" not in os.environ:
        os.environ["BEVPOOL_TEST_DOMAIN"] = str(1 + (os.getpid() * 7919 + time.time_ns() // 1000) % 101)
    os.environ.pop("ROS_LOCALHOST_ONLY", None)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    return isolate(int(os.environ["BEVPOOL_TEST_DOMAIN"]))  # + the node's DDS profile


def ros_args(params: dict, name: str | None = None, namespace: str | None = None) -> list[str]:
    out = ["--ros-args", *ros_param_args(params)]
    if name:
        out += ["-r", f"__node:={name}"]
    if namespace:
        out += ["-r", f"__ns:={namespace}"]
    return out


class NodeProcess:
    """bevpool_node in its own process; stopped with SIGINT, output kept for assertions."""

    def __init__(self, params: dict | None = None, extra_args=(), name: str | None = None,
                 namespace: str | None = None, module: str = "bevpool_ros.node.main"):
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"bevpool_node_{os.getpid()}_{time.time_ns()}.log"
        self._log = open(self.log_path, "w+")
        cmd = [sys.executable, "-m", module, *extra_args, *ros_args(params or {}, name, namespace)]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()
        return self.proc.returncode


def spin_until(executor, predicate, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        executor.spin_once(timeout_sec=step)
    return bool(predicate())


class RosGraph:
    """The test side of a real graph: rclpy in this process (synthetic publisher + consumer),
    bevpool_node in a subprocess. Use as a context manager (module-scoped fixtures)."""

    def __init__(self, node_params: dict, rig_path=None, publisher_kwargs=None):
        isolate_ros_env()
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from bevpool_ros.demo.consumer import BevConsumer
        from bevpool_ros.demo.synthetic_publisher import SyntheticRigPublisher
        from bevpool_ros.rig import load_rig

        self.rig = load_rig(rig_path or default_rig_path())
        self.node = NodeProcess(node_params)
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.pub = SyntheticRigPublisher(self.rig, context=self.context, **(publisher_kwargs or {}))
        self.con = BevConsumer(context=self.context)
        self.executor.add_node(self.pub)
        self.executor.add_node(self.con)
        self._stamp = 1_000 * 1_000_000_000
        ok = self.spin_until(lambda: self.pub.subscribers_matched() and self.con.publisher_matched(),
                             DISCOVERY_TIMEOUT)
        if not ok or not self.warm_up():
            out = self.node.output()
            self.close()
            raise RuntimeError(f"bevpool_node not ready within {DISCOVERY_TIMEOUT} s; its output:\n{out}")

    def warm_up(self) -> bool:
        """Discovery is asymmetric: our writers may match before the node's readers know them,
        and best-effort samples sent in between are lost. Publish until one BEV comes back."""
        import time

        deadline = time.monotonic() + DISCOVERY_TIMEOUT
        while time.monotonic() < deadline:
            stamp = self.pub.publish_frame(0, self.next_stamp())
            if self.spin_until(lambda: stamp in self.con.by_stamp(), 1.0):
                return True
        return False

    def spin_until(self, predicate, timeout: float) -> bool:
        return spin_until(self.executor, predicate, timeout)

    def next_stamp(self, step_ms: int = 100) -> int:
        """Strictly increasing stamps across the whole module (the node remembers every stream)."""
        self._stamp += step_ms * 1_000_000
        return self._stamp

    def publish_and_wait(self, index: int, timeout: float = 10.0, **kw):
        """Publish one frame, wait for its BEV; returns the ReceivedBev (None on timeout)."""
        stamp = self.pub.publish_frame(index, self.next_stamp(), **kw)
        self.spin_until(lambda: stamp in self.con.by_stamp(), timeout)
        return self.con.by_stamp().get(stamp)

    def diagnostics_where(self, predicate, timeout: float = 10.0) -> dict | None:
        """The first diagnostics snapshot (published from now on) that satisfies predicate."""
        self.con.diagnostics.clear()
        found = {}

        def check():
            d = self.con.latest_diagnostics()
            if d is not None and predicate(d):
                found.update(d)
                return True
            return False
        self.spin_until(check, timeout)
        return found or None

    def counter(self, d: dict | None, key: str) -> int:
        return int((d or {}).get(key, 0))

    def close(self) -> int:
        import rclpy

        rc = self.node.stop()
        self.executor.shutdown()
        self.pub.destroy_node()
        self.con.destroy_node()
        rclpy.try_shutdown(context=self.context)
        return rc
