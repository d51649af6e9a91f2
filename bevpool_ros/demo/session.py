"""One synthetic pipeline run: bevpool_node in a child process, publisher + consumer here.

Shared by ``bevpool-demo`` and ``bench/latency.py``. The end-to-end latency of a set is
measured on one clock (this process): from the moment the last input message of the set has
been published to the moment the consumer receives its BEV message. The node's own split
(input->publish latency, pool time, overhead) comes from its /diagnostics.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .waiting import poll_until


def isolate(domain: int | None = None) -> int:
    """Localhost-only discovery, the node's DDS profile, and a domain: ``domain``, else
    ROS_DOMAIN_ID where the caller chose one, else one claimed to this process (domain.py)."""
    from ..ros.process import use_large_data_profile
    from .domain import claim_domain

    if domain is None:
        domain = int(os.environ.get("ROS_DOMAIN_ID") or claim_domain())
    os.environ["ROS_DOMAIN_ID"] = str(domain)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    use_large_data_profile()
    return domain


def ros_param_args(params: dict) -> list[str]:
    """``-p name:=value`` pairs for a node's command line (bools and lists in ROS syntax)."""
    out = []
    for k, v in params.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (list, tuple)):
            v = "[" + ",".join(f"'{x}'" if isinstance(x, str) else repr(x) for x in v) + "]"
        out += ["-p", f"{k}:={v}"]
    return out


def run_until_done(make_node, ros_args=None, start=lambda node: node.start(), finish=None) -> int:
    """Standalone tools (synthetic publisher, bag player): large-data DDS profile, rclpy up,
    ``start(node)``, spin until ``node.done`` or Ctrl-C / SIGTERM, ``finish(node)``, then shut down
    cleanly: a signal only asks for a stop (also while the node is being built), as in bevpool_node,
    so the teardown runs in order on a live context and no traceback is printed. The exit code:
    ``node.exit_code`` where it has one, else 0."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from ..ros.process import init_without_signal_handlers, use_large_data_profile

    use_large_data_profile()  # same Fast DDS profile as the node (multi-MB bursts)
    stop = init_without_signal_handlers(ros_args)
    executor = SingleThreadedExecutor()
    node = None
    try:
        node = make_node()
        executor.add_node(node)
        if not stop.requested:
            start(node)
        while not stop.requested and rclpy.ok() and not node.done:
            executor.spin_once(timeout_sec=0.05)
        if finish is not None:
            finish(node)
    except ExternalShutdownException:
        pass
    finally:
        executor.shutdown()
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
        stop.restore()
    return getattr(node, "exit_code", 0)


def resident_mib(pid: int) -> float | None:
    """A process's resident memory (VmRSS), MiB; None when it is gone (or not on Linux)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
    except (OSError, StopIteration):
        return None


def last_lines(log: str, count: int = 1) -> str:
    """A process's last ``count`` non-empty output lines, joined into one (why it exited)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return " | ".join(lines[-count:]) if lines else "no output"


class NodeProcess:
    """bevpool_node (or another node's ``module``) in a child process: output kept in a log file
    (readable while it runs), stopped with SIGINT (then killed if it does not exit)."""

    def __init__(self, params: dict | None = None, params_file: str | None = None,
                 module: str = "bevpool_ros.node.main", env: dict | None = None):
        args = [sys.executable, "-m", module, "--ros-args"]
        if params_file:
            args += ["--params-file", params_file]
        args += ros_param_args(params or {})
        self._log = tempfile.NamedTemporaryFile("w+", prefix="bevpool_node_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return Path(self._log.name).read_text()

    def stop(self, timeout: float = 15.0) -> tuple[int | None, str]:
        """(exit code, whole output); the log file is removed."""
        if self.alive():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        log = self.output()
        self._log.close()
        os.unlink(self._log.name)
        return self.proc.returncode, log


@dataclass
class RunResult:
    sent: int
    received: int
    e2e_ms: list[float] = field(default_factory=list)     # per set: last input published -> BEV received
    diagnostics: dict = field(default_factory=dict)       # the node's last /diagnostics values
    last_bev: object = None                               # ReceivedBev of the last set
    last_index: int = -1                                  # its scene frame index
    node_rc: int | None = None
    node_log: str = ""

    def percentiles(self, qs=(50, 95, 99)) -> dict:
        if not self.e2e_ms:
            return {q: float("nan") for q in qs}
        return dict(zip(qs, np.percentile(self.e2e_ms, qs).tolist()))


class PipelineSession:
    def __init__(self, rig_path: str | None = None, node_params: dict | None = None,
                 params_file: str | None = None, subscribe_image: bool = False, publisher: bool = True,
                 publisher_kwargs: dict | None = None, domain: int | None = None,
                 node_env: dict | None = None):
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from ..paths import default_rig_path
        from ..rig_yaml import load_rig
        from .consumer import BevConsumer
        from .synthetic_publisher import SyntheticRigPublisher

        self.domain = isolate(domain)
        rig_path = rig_path or str(default_rig_path())
        self.rig = load_rig(rig_path)
        self.node = NodeProcess({"rig_file": rig_path, **(node_params or {})}, params_file, env=node_env)
        self.context = rclpy.Context()
        rclpy.init(args=[sys.argv[0]], context=self.context)  # our own argv is not ROS arguments
        self.executor = SingleThreadedExecutor(context=self.context)
        # publisher=False: the caller brings its own source (a bag player, a test's publisher)
        self.pub = (SyntheticRigPublisher(self.rig, context=self.context, **(publisher_kwargs or {}))
                    if publisher else None)
        self.con = BevConsumer(context=self.context, subscribe_image=subscribe_image)
        for node in (self.pub, self.con):
            if node is not None:
                self.executor.add_node(node)

    def spin_until(self, predicate, timeout: float) -> bool:
        """Spin our nodes until ``predicate()`` holds (False at ``timeout`` or once the node died)."""
        poll_until(lambda: predicate() or not self.node.alive(), timeout,
                   spin=lambda s: self.executor.spin_once(timeout_sec=s), step=0.01)
        return bool(predicate())

    def wait_ready(self, timeout: float = 30.0) -> bool:
        """Graph discovery both ways (never a fixed sleep)."""
        return self.spin_until(lambda: self.pub.subscribers_matched() and self.con.publisher_matched(), timeout)

    def run(self, frames: int, rate_hz: float, warmup: int = 0, drain_s: float = 2.0) -> RunResult:
        sent_at: dict[int, tuple[int, float]] = {}
        e2e: list[float] = []
        last = {}

        def on_frame(index, stamp, t):
            sent_at[stamp] = (index, t)

        def on_bev(r):
            if r.stamp_ns in sent_at:
                index, t = sent_at[r.stamp_ns]
                if index >= warmup:
                    e2e.append((r.received - t) * 1e3)
                last["bev"], last["index"] = r, index

        self.con.on_bev = on_bev
        received_before = self.con.count  # a session may stream several runs
        self.pub.start(rate_hz, frames, on_frame=on_frame)
        self.spin_until(lambda: self.pub.done, frames / rate_hz * 3 + 10)
        expected = len(sent_at)
        self.spin_until(lambda: self.con.count - received_before >= expected, drain_s)
        # one more diagnostics period so the node's statistics cover the whole run
        self.con.diagnostics.clear()
        self.spin_until(lambda: self.con.latest_diagnostics() is not None, 5.0)
        return RunResult(sent=len(sent_at), received=self.con.count - received_before, e2e_ms=e2e,
                         diagnostics=self.con.latest_diagnostics() or {}, last_bev=last.get("bev"),
                         last_index=last.get("index", -1))

    def close(self) -> tuple[int | None, str]:
        """Stop the node, then our side; the node's (exit code, output)."""
        import rclpy

        result = self.node.stop()
        self.executor.shutdown()
        for node in (self.pub, self.con):
            if node is not None:
                node.destroy_node()
        rclpy.try_shutdown(context=self.context)
        return result
