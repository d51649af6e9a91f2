"""Helpers for the ROS tests: isolated DDS domain, the demo session as a test graph, spin-until
waits, tolerances of the backend the node chose, hand-built CDR.

Isolation: every test session picks its own ROS_DOMAIN_ID and localhost-only discovery, set
before rclpy.init, inherited by the node subprocesses. Waits poll graph state or received
data with generous timeouts; no fixed sleeps.
"""
from __future__ import annotations

import contextlib
import os
import struct
import threading
import time

import numpy as np

from bevpool_ros.demo.session import PipelineSession, isolate, resident_mib
from bevpool_ros.tolerance import TOLERANCE, error_ratio

DISCOVERY_TIMEOUT = 20.0
# The node runs the best backend of the machine: a grid is checked at the tolerance of the
# precision it says it ran (BevFeature.precision), bevpool_ros/tolerance.py.
BACKEND_PRECISIONS = {"cpu": ("fp32",), "cuda": ("fp16", "fp8"), "tensorrt": ("fp16", "fp8")}


def message_lines(stderr: str) -> list[str]:
    """The non-empty lines of a ROS process's stderr, without the one housekeeping line it may
    print first (it freed what a killed Fast DDS process left in /dev/shm: node/main.py
    free_dead_segments), which has nothing to do with the error a test checks."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("bevpool: removed ")]


def assert_bev_matches(bev, ref, msg) -> None:
    """``bev`` (from BevFeature ``msg``) equals the FP64 reference at the tolerance of the
    backend and precision the node actually chose."""
    assert msg.precision in BACKEND_PRECISIONS.get(msg.backend, ()), (msg.backend, msg.precision)
    rtol, atol = TOLERANCE[msg.precision]
    np.testing.assert_allclose(bev, ref, rtol=rtol, atol=atol * max(1.0, float(np.abs(ref).max())))
    assert error_ratio(bev, ref, msg.precision) <= 1.0  # the rule bevpool-bag eval applies


def camera_tensor_cdr(stamp_ns: int = 0, frame_id: str = "", name: str = "", layout: str = "",
                      shape=(), dtype: int = 1, data: bytes = b"") -> bytes:
    """A bevpool_msgs/CameraTensor serialized (CDR, little endian) by hand, so a test can send
    what rclpy refuses to build: fields beyond the type's bounds, as a hostile publisher would."""
    out = bytearray(b"\x00\x01\x00\x00")  # encapsulation; alignment counts from after it

    def align(n):
        out.extend(b"\x00" * (-(len(out) - 4) % n))

    def u32(v):
        align(4)
        out.extend(struct.pack("<I", v))

    def string(s):
        b = s.encode()
        u32(len(b) + 1)
        out.extend(b + b"\x00")

    sec, nsec = divmod(int(stamp_ns), 10**9)
    u32(sec)
    u32(nsec)
    for s in (frame_id, name, layout):
        string(s)
    u32(len(shape))
    for d in shape:
        u32(d)
    out.append(dtype)
    u32(len(data))
    return bytes(out) + data


def no_gpu_env() -> dict:
    """Environment in which a node sees no GPU (cuda and tensorrt unavailable on any machine)."""
    return dict(os.environ, CUDA_VISIBLE_DEVICES="")


_domain = None  # the domain this process's harness holds now


def first_domain(domains: int) -> int | None:
    """Where this process starts claiming: under pytest-xdist worker ``gwI`` of N, at the start of
    the I-th of N equal stretches of the ids, so the workers walk on at equal distances and an id
    is used again only after about as many claims as in a serial run (endpoints a stopped process
    left behind have had their lease time to go); else None (claim_domain's per-process pick).
    The flock of each claim, not this, is what keeps two workers off one domain."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count < 1:
        return None
    return 1 + int(worker[2:]) % count * domains // count


def isolate_ros_env() -> int:
    """A fresh DDS domain for what comes next (a module's graph, or one test) + localhost discovery.

    Fresh on every call: a graph that outlives its tests (a module fixture) or endpoints a stopped
    process left behind until their lease ran out must not be seen by the next graph (they were:
    grids of another node, stale service servers, extra publishers of a type). Claimed with an
    flock (bevpool_ros/demo/domain.py), so two suites running at once on one machine, or a bag
    evaluation a test starts, never share one either."""
    global _domain
    from bevpool_ros.demo.domain import DOMAINS, claim_domain, release_domain

    last = int(os.environ.get("BEVPOOL_TEST_DOMAIN") or 0)
    domain = claim_domain(last % DOMAINS + 1 if last else first_domain(DOMAINS))  # the next id after the last
    if _domain is not None:
        release_domain(_domain)  # gives the previous domain back
    _domain = domain
    os.environ["BEVPOOL_TEST_DOMAIN"] = str(domain)
    os.environ.pop("ROS_LOCALHOST_ONLY", None)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    return isolate(domain)  # + the node's DDS profile


@contextlib.contextmanager
def private_node(name: str):
    """(node, executor) of a context of its own on a fresh DDS domain (isolate_ros_env), a
    single-threaded executor spinning nothing until asked; all shut down after."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    isolate_ros_env()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node(name, context=ctx)
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    try:
        yield node, executor
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)


def kill_node_while_feeding(tool, node, feeding: str, timeout: float = 120.0) -> tuple[str, str]:
    """SIGKILL ``node`` (a NodeProcess) 1 s after ``tool`` (a Popen with text pipes) printed a line
    holding ``feeding``; the tool's (stdout, stderr) once it exits. The tool is killed if it hangs."""
    import select

    try:
        line, deadline = "", time.monotonic() + timeout
        while feeding not in line and time.monotonic() < deadline and tool.poll() is None:
            if select.select([tool.stdout], [], [], 0.2)[0]:
                line = tool.stdout.readline()
        assert feeding in line, line + tool.stderr.read()
        time.sleep(1.0)
        node.proc.kill()
        return tool.communicate(timeout=timeout)
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.communicate()


def spin_until(executor, predicate, timeout: float, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        executor.spin_once(timeout_sec=step)
    return bool(predicate())


class RosGraph(PipelineSession):
    """The test side of a real graph: the demo's pipeline session (bevpool_node in a
    subprocess; synthetic publisher + consumer here) plus stamps, waits and counters for tests.
    Use as a module-scoped fixture; ``close()`` returns the node's exit code."""

    def __init__(self, node_params: dict, rig_path=None, publisher_kwargs=None, wait: bool = True):
        """``wait``: until the node publishes grids (False: a node that waits for a lifecycle
        manager)."""
        isolate_ros_env()
        super().__init__(str(rig_path) if rig_path else None, node_params, subscribe_image=True,
                         publisher_kwargs=publisher_kwargs)
        self._stamp = 1_000 * 1_000_000_000
        if wait and (not self.wait_ready(DISCOVERY_TIMEOUT) or self.warm_up() is None):
            out = self.node.output()
            self.close()
            raise RuntimeError(f"bevpool_node not ready within {DISCOVERY_TIMEOUT} s; its output:\n{out}")

    def warm_up(self, publisher=None, index: int = 0) -> int | None:
        """Discovery is asymmetric: our writers may match before the node's readers know them,
        and best-effort samples sent in between are lost. Publish frame ``index`` (fresh stamps)
        until one BEV comes back; its stamp, or None."""
        publisher = publisher or self.pub
        got = self.send_until_grid(lambda stamp: publisher.publish_frame(index, stamp),
                                   DISCOVERY_TIMEOUT, 1.0)
        return None if got is None else got.stamp_ns

    def set_parameters(self, **values) -> list:
        """Set the node's parameters over its parameter service, as an operator's tool does (dots
        in names as keyword arguments: pass a dict with ``**{"sync.slop_s": 0.03}``); the
        SetParametersResult of each."""
        from rclpy.parameter import Parameter
        from rclpy.parameter_client import AsyncParameterClient

        client = AsyncParameterClient(self.con, "bevpool_node")
        assert client.wait_for_services(timeout_sec=DISCOVERY_TIMEOUT)
        fut = client.set_parameters([Parameter(k, value=v) for k, v in values.items()])
        assert self.spin_until(fut.done, 10)
        return fut.result().results

    def next_stamp(self, step_ms: int = 100) -> int:
        """Strictly increasing stamps across the whole module (the node remembers every stream)."""
        self._stamp += step_ms * 1_000_000
        return self._stamp

    def send_until_grid(self, send, timeout: float = 30.0, resend_s: float = 2.0,
                        newest: bool = False):
        """``send(stamp)`` with fresh stamps until the grid of one of them comes back; the
        ReceivedBev, None on timeout. One send is never trusted: on a busy machine a camera may
        arrive after sync.camera_timeout_s, or a best-effort sample may be lost. ``newest``:
        only the grid of the last stamp sent counts (then no older send is still in flight)."""
        deadline = time.monotonic() + timeout
        sent: list[int] = []

        def arrived():
            return any(s in self.con.by_stamp() for s in (sent[-1:] if newest else sent))
        while time.monotonic() < deadline and not arrived():
            stamp = self.next_stamp()
            send(stamp)
            sent.append(stamp)
            self.spin_until(arrived, min(resend_s, max(0.0, deadline - time.monotonic())))
        got = self.con.by_stamp()
        return next((got[s] for s in (sent[-1:] if newest else sent) if s in got), None)

    def publish_and_wait(self, index: int, timeout: float = 30.0, **kw):
        """Publish frame ``index`` (resent, fresh stamps) until its BEV comes back; the
        ReceivedBev (None on timeout). ``kw``: publish_frame's (skip, replace, camera_info)."""
        return self.send_until_grid(lambda stamp: self.pub.publish_frame(index, stamp, **kw),
                                    timeout)

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
        return super().close()[0]


class PeakRss:
    """The node's peak resident memory, sampled in a thread while a test runs."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, resident_mib(pid), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, resident_mib(self.pid))

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak
