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

REPO = Path(__file__).resolve().parent.parent
DISCOVERY_TIMEOUT = 20.0


def isolate_ros_env() -> int:
    """Unique domain per run (pid-based; 1..100 keeps DDS ports valid) + localhost discovery."""
    if "BEVPOOL_TEST_DOMAIN" not in os.environ:
        os.environ["BEVPOOL_TEST_DOMAIN"] = str(1 + (os.getpid() * 7919 + int(time.time())) % 100)
    os.environ["ROS_DOMAIN_ID"] = os.environ["BEVPOOL_TEST_DOMAIN"]
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ.pop("ROS_LOCALHOST_ONLY", None)
    from bevpool_ros.node.main import use_large_data_profile

    use_large_data_profile()  # multi-MB tensors as single shared-memory messages
    return int(os.environ["ROS_DOMAIN_ID"])


def ros_args(params: dict, name: str | None = None, namespace: str | None = None) -> list[str]:
    out = ["--ros-args"]
    for k, v in params.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (list, tuple)):
            v = "[" + ",".join(f"'{x}'" if isinstance(x, str) else repr(x) for x in v) + "]"
        out += ["-p", f"{k}:={v}"]
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
