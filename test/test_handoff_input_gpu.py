"""The input hand-off on a real GPU: a producer process writes camera tensors into its ring and
announces them (TensorHandoff), bevpool_node (cuda backend) pools the device views, and the grid
comes back as BevFeature (and through the output hand-off). Checked against the FP64 reference:
all cameras handed off, a rig mixing hand-off and CameraTensor cameras, a tensor overwritten
before it was read (dropped, counted ``handoff_overwritten``), a producer restart and a node
restart (lifecycle cleanup + configure: the ring is mapped again). Backend level too: device
payloads in ``pool_cameras`` (NaN flagged on the device, the cpu backend downloading them)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.ros]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVICE: list = []


def DeviceArray(arr: np.ndarray):
    """A device copy of a host array (``__cuda_array_interface__`` v3), in device 0's primary context."""
    from bevpool_ros.device.driver import Device, DeviceCopy

    if not DEVICE:
        DEVICE.append(Device(0))  # the primary context the buffers live in
    DEVICE[0].make_current()
    return DeviceCopy(arr)


# --- backend level: device payloads in pool_cameras --------------------------------------------------
@pytest.fixture(scope="module")
def smap():
    from bevpool_ros.workloads import get_workload

    return get_workload("canonical")


def frame(smap, seed=3):
    rng = np.random.default_rng(seed)
    d = rng.random(smap.depth_shape, dtype=np.float32)
    f = rng.uniform(-1, 1, smap.feat_shape).astype(np.float32)
    return d, f


def within_tolerance(out, depth, feat, smap, precision) -> bool:
    """FP16: the published-grid rule; FP8: the kernels' rule, whose error bound grows with
    sum |depth x feat| of a cell (docs/kernels.md): uniform random depth is no distribution, and
    cells that cancel to ~0 exceed the published-grid rule under any correct FP8 quantisation."""
    from bevpool_ros.kernels.precision import fp8_within_tolerance
    from bevpool_ros.reference import pool_reference
    from bevpool_ros.tolerance import error_ratio

    ref = pool_reference(depth, feat, smap)
    if precision == "fp16":
        return error_ratio(out, ref, precision) <= 1.0
    return fp8_within_tolerance(out, ref, pool_reference(np.abs(depth), np.abs(feat), smap))[0]


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_gpu_backend_pools_device_payloads_mixed_with_host_arrays(smap, precision):
    from bevpool_ros.backends.cuda import CudaBackend

    be = CudaBackend(precision)
    be.prepare(smap)
    try:
        d, f = frame(smap)
        d16, f16 = d.astype(np.float16), f.astype(np.float16)
        n = smap.depth_shape[0]
        for rep in range(3):  # the third frame replays the captured graph
            cams = [(DeviceArray(d16[i]), DeviceArray(f16[i])) if i % 2 == 0 else (d16[i], f16[i])
                    for i in range(n)]
            out = np.full(smap.bev_shape, np.nan, np.float32)  # poisoned: every cell is written
            got = be.pool_cameras(cams, out=out)
            assert got is out and within_tolerance(out, d16, f16, smap, precision), rep
        # a missing camera pools as zeros
        cams = [(DeviceArray(d16[i]), DeviceArray(f16[i])) for i in range(n)]
        cams[0] = (None, None)
        d0, f0 = d16.copy(), f16.copy()
        d0[0], f0[0] = 0, 0
        out = be.pool_cameras(cams, out=np.empty(smap.bev_shape, np.float16))
        assert within_tolerance(out.astype(np.float32), d0, f0, smap, precision)
    finally:
        be.close()


def test_nan_in_a_device_payload_is_flagged_on_the_device(smap):
    from bevpool_ros.backends import NonFiniteInput
    from bevpool_ros.backends.cuda import CudaBackend

    be = CudaBackend("fp16")
    be.prepare(smap)
    try:
        d, f = frame(smap)
        f[1, 0, 0, 0] = np.nan
        cams = [(DeviceArray(d[i]), DeviceArray(f[i])) for i in range(smap.depth_shape[0])]
        with pytest.raises(NonFiniteInput):
            be.pool_cameras(cams, out=np.empty(smap.bev_shape, np.float32))
    finally:
        be.close()


def test_cpu_backend_downloads_device_payloads(smap):
    from bevpool_ros.backends.cpu import CpuBackend
    from bevpool_ros.reference import pool_reference
    from bevpool_ros.tolerance import error_ratio

    be = CpuBackend()
    be.prepare(smap)
    d, f = frame(smap)
    cams = [(DeviceArray(d[i]), DeviceArray(f[i])) for i in range(smap.depth_shape[0])]
    out = be.pool_cameras(cams, out=np.empty(smap.bev_shape, np.float32))
    assert error_ratio(out, pool_reference(d, f, smap), "fp32") <= 1.0


# --- the ROS graph: producer process -> bevpool_node -> this process ----------------------------------
PRODUCER = textwrap.dedent("""
    # commands on stdin, one per line: "<stamp> <camera,camera,...> [overwrite]"; "ok" per line
    import sys
    import numpy as np
    import rclpy
    from bevpool_ros.device.driver import DeviceBuffer, api, check
    from rclpy.serialization import serialize_message

    from bevpool_ros.handoff.camera_publisher import CameraHandoffPublisher, announcement
    from bevpool_ros.rig_yaml import load_rig
    from bevpool_ros.synthetic import SyntheticScene

    rclpy.init()
    node = rclpy.create_node("camera_producer")
    rig = load_rig(sys.argv[1])
    pub = CameraHandoffPublisher(node, rig, mode="on")
    depth, feat = SyntheticScene(rig, seed=0).frame(0)
    tensors = {}
    for n, cam in enumerate(rig.cameras):
        for stream, arr in (("depth", depth[n]), ("feat", feat[n])):
            a = np.ascontiguousarray(arr, np.float16)
            buf = DeviceBuffer(a.nbytes)
            check(api().cuMemcpyHtoD(buf.ptr, a.ctypes.data, a.nbytes), "cuMemcpyHtoD")
            tensors[(cam.name, stream)] = (buf, a)

    class View:
        def __init__(self, buf, a):
            self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str,
                "data": (buf.ptr, False), "version": 3, "strides": None, "stream": None}

    views = {k: View(*v) for k, v in tensors.items()}
    print("ready", pub.handing_off, flush=True)
    for line in sys.stdin:
        words = line.split()
        stamp, cameras = int(words[0]), words[1].split(",")
        if len(words) > 2:  # overwrite: every slot is claimed again before the announcements go
            held = [(cam, s, pub.producer.publish(views[(cam, s)]))
                    for cam in cameras for s in ("depth", "feat")]
            for _ in range(pub.producer.ring.ring_size):
                pub.producer.publish(views[(cameras[0], "depth")])
            for cam, s, h in held:  # both ways, as CameraHandoffPublisher.publish announces
                msg = announcement(h, cam, s, "DHW" if s == "depth" else "HWC", stamp, "", pub.boot)
                data = serialize_message(msg)
                pub.producer.ring.announce(data)
                pub.handoff_pubs[(cam, s)].publish(data)
        else:
            for cam in cameras:
                for s in ("depth", "feat"):
                    pub.publish(cam, s, views[(cam, s)], stamp,
                                layout="DHW" if s == "depth" else "HWC")
        rclpy.spin_once(node, timeout_sec=0.0)
        print("ok", flush=True)
    pub.close()
    node.destroy_node()
    rclpy.shutdown()
""")


class Producer:
    def __init__(self, rig_path: str):
        self.proc = subprocess.Popen([sys.executable, "-c", PRODUCER, rig_path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, cwd=REPO,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        assert self._expect("ready").startswith("ready True")

    def _expect(self, word: str) -> str:
        """The next line starting with ``word``; log lines (stderr is merged) are kept aside."""
        seen = []
        while True:
            line = self.proc.stdout.readline()
            if not line:  # the producer died: say what it printed
                raise AssertionError("".join(seen) + f"producer exited {self.proc.wait(10)}")
            if line.startswith(word):
                return line
            seen.append(line)

    def send(self, stamp: int, cameras, overwrite: bool = False) -> None:
        self.proc.stdin.write(f"{stamp} {','.join(cameras)}{' overwrite' if overwrite else ''}\n")
        self.proc.stdin.flush()
        self._expect("ok")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture(scope="module", params=["python", "core"])
def graph(request):
    """The node with its intake in Python (BEVPOOL_NATIVE=0) and in the hand-off core's set loop:
    every test below runs through both."""
    from ros_harness import RosGraph

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BEVPOOL_NATIVE", "0" if request.param == "python" else "1")
        g = RosGraph({"backend": "cuda", "precision": "fp16", "diagnostics.period_s": 0.1,
                      "sync.camera_timeout_s": 0.3, "input.qos_reliability": "reliable",
                      "output.gpu_handoff": True, "log_throttle_s": 0.5})
    g.intake = request.param
    yield g
    assert g.close() == 0


@pytest.fixture(scope="module")
def rig_path():
    from bevpool_ros.paths import default_rig_path

    return str(default_rig_path())


@pytest.fixture(scope="module")
def producer(graph, rig_path):
    p = Producer(rig_path)
    yield p
    p.stop()


@pytest.fixture(scope="module")
def reference(graph):
    from bevpool_ros.reference import pool_reference
    from bevpool_ros.scatter_map import build_scatter_map

    depth, feat = graph.pub.scene.frame(0)
    return pool_reference(depth.astype(np.float16), feat.astype(np.float16),
                          build_scatter_map(graph.rig))


def cameras(graph):
    return [c.name for c in graph.rig.cameras]


def send_until_grid(graph, producer, handed_off, timeout=60.0):
    """Hand off ``handed_off`` cameras (the rest as CameraTensor, same stamp) until a grid of
    one of the stamps comes back; resent with fresh stamps (discovery, first ring mapping)."""
    others = [c for c in cameras(graph) if c not in handed_off]

    def send(stamp):
        producer.send(stamp, handed_off)
        if others:
            graph.pub.publish_frame(0, stamp, skip=handed_off)
    return graph.send_until_grid(send, timeout, resend_s=1.0)


def test_all_cameras_handed_off_pool_against_the_reference(graph, producer, reference):
    from ros_harness import assert_bev_matches

    got = send_until_grid(graph, producer, cameras(graph))
    assert got is not None, graph.node.output()[-4000:]
    assert_bev_matches(got.bev, reference, got.msg)
    # a snapshot sent before this set may still be on its way: wait for one that saw the ring
    d = graph.diagnostics_where(lambda d: "1 producer ring(s) mapped" in d.get("input_handoff", ""), 10.0)
    assert d, (graph.diagnostics_where(lambda d: True) or {}).get("input_handoff")


def test_announcements_also_arrive_over_the_signal_socket(graph, producer):
    import re

    for _ in range(3):  # after the first mapping, the node listens on the producer's socket
        assert send_until_grid(graph, producer, cameras(graph)) is not None

    def signalled(d):
        m = re.search(r"(\d+) signal link\(s\), first arrival: signal (\d+)", d.get("input_handoff", ""))
        return bool(m) and int(m.group(1)) >= 1 and int(m.group(2)) > 0
    d = graph.diagnostics_where(signalled, 10.0)
    assert d, (graph.diagnostics_where(lambda d: True) or {}).get("input_handoff")

    def filtered(d):  # DDS drops the ROS copies the datagrams beat (Fast DDS content filter)
        m = re.search(r"ROS copies filtered on (\d+) topic", d.get("input_handoff", ""))
        return bool(m) and int(m.group(1)) >= 1
    for _ in range(3):
        assert send_until_grid(graph, producer, cameras(graph)) is not None
    d = graph.diagnostics_where(filtered, 10.0)
    assert d, (graph.diagnostics_where(lambda d: True) or {}).get("input_handoff")

    def by_template(d):  # the producer's datagrams are read through learnt templates (cdr_template.py)
        m = re.search(r"datagrams read by template (\d+) of (\d+)", d.get("input_handoff", ""))
        return bool(m) and int(m.group(1)) > 0 and int(m.group(1)) >= int(m.group(2)) // 2
    # read in the core's set loop exactly when the node runs it
    in_core = graph.intake == "core"
    d = graph.diagnostics_where(lambda d: ("set loop in the core" in d.get("input_handoff", "")) == in_core, 10.0)
    assert d, (graph.diagnostics_where(lambda d: True) or {}).get("input_handoff")
    # the node learns one template per set, after it (12 streams here): sets keep coming until the
    # templates carry most datagrams (and the ring stays mapped: an idle one is let go)
    for _ in range(60):
        assert send_until_grid(graph, producer, cameras(graph)) is not None
        d = graph.diagnostics_where(by_template, 1.5)
        if d:
            break
    assert d, (graph.diagnostics_where(lambda d: True) or {}).get("input_handoff")


def test_a_rig_mixing_handoff_and_camera_tensor_cameras(graph, producer, reference):
    from ros_harness import assert_bev_matches

    got = send_until_grid(graph, producer, cameras(graph)[:3])
    assert got is not None, graph.node.output()[-4000:]
    assert_bev_matches(got.bev, reference, got.msg)


def test_a_tensor_overwritten_before_it_was_read_is_dropped_and_counted(graph, producer):
    before = graph.diagnostics_where(lambda d: True) or {}
    key = "dropped_handoff_overwritten"
    sent, after = [], None
    for _ in range(10):  # resent until counted
        stamp = graph.next_stamp()
        sent.append(stamp)
        producer.send(stamp, cameras(graph), overwrite=True)
        after = graph.diagnostics_where(lambda d: graph.counter(d, key) > graph.counter(before, key), 2.0)
        if after:
            break
    assert after, graph.node.output()[-4000:]
    assert not set(sent) & set(graph.con.by_stamp()), "a set with an overwritten tensor was published"
    assert "dropped (handoff_overwritten)" in graph.node.output()


def test_producer_restart_recovers(graph, producer, rig_path, reference):
    from ros_harness import assert_bev_matches

    producer.stop()
    fresh = Producer(rig_path)  # a new ring: new id, new socket
    try:
        got = send_until_grid(graph, fresh, cameras(graph))
        assert got is not None, graph.node.output()[-4000:]
        assert_bev_matches(got.bev, reference, got.msg)
    finally:
        fresh.stop()


def test_hand_off_consumers_alone_get_no_bev_feature_built(graph, rig_path, reference):
    """With only BevHandoff readers, the node skips the BevFeature (counted handoff_only_grids)
    and leaves the grid on the GPU (no copy to the host): the ring's grid still equals the FP64
    reference. It builds the BevFeature again as soon as a subscriber is back."""
    from bevpool_msgs.msg import BevFeature, BevHandoff
    from ros_harness import assert_bev_matches

    from bevpool_ros.handoff.reader import HandoffReader
    from bevpool_ros.ros.qos import make_qos

    producer = Producer(rig_path)  # its own: the restart test above stopped the module's
    con, qos = graph.con, make_qos("reliable", 10)
    handoffs = []
    reader = con.create_subscription(BevHandoff, "bev/handoff", handoffs.append, qos)
    con.destroy_subscription(con.bev_sub)
    key = "handoff_only_grids"
    try:
        before = graph.counter(graph.diagnostics_where(lambda d: True), key)
        after = None
        for _ in range(20):  # resent until counted: discovery of the changed subscriptions takes a moment
            producer.send(graph.next_stamp(), cameras(graph))
            after = graph.diagnostics_where(lambda d: graph.counter(d, key) > before, 2.0)
            if after:
                break
        assert after, graph.node.output()[-4000:]
        n = len(handoffs)
        producer.send(graph.next_stamp(), cameras(graph))  # pooled with nobody on the BevFeature
        assert graph.spin_until(lambda: len(handoffs) > n, 10)
        ring = HandoffReader()
        try:
            view = ring.open(handoffs[-1], wait=True)
            bev = view.copy_to_host()
            assert view.still_valid()
            assert_bev_matches(bev, reference, handoffs[-1])
        finally:
            ring.close()
        con.bev_sub = con.create_subscription(BevFeature, "bev/features", con._on_bev, qos)
        assert send_until_grid(graph, producer, cameras(graph)) is not None  # the BevFeature is back
    finally:
        if con.bev_sub is None or con.bev_sub not in con.subscriptions:
            con.bev_sub = con.create_subscription(BevFeature, "bev/features", con._on_bev, qos)
        con.destroy_subscription(reader)
        producer.stop()


def test_node_restart_maps_the_ring_again(graph, rig_path, reference):
    from ros_harness import assert_bev_matches
    from test_node_lifecycle import Lifecycle

    p = Producer(rig_path)
    try:
        assert send_until_grid(graph, p, cameras(graph)) is not None, graph.node.output()[-4000:]
        lc = Lifecycle(graph)
        for step in ("deactivate", "cleanup", "configure", "activate"):  # reader closed, made anew
            assert lc.transition(step), (step, graph.node.output()[-4000:])
        got = send_until_grid(graph, p, cameras(graph))
        assert got is not None, graph.node.output()[-4000:]
        assert_bev_matches(got.bev, reference, got.msg)
    finally:
        p.stop()


def test_bev_handoff_subscriber_takes_the_grids_over_the_signal_link(graph, rig_path, reference):
    """The consumer API of output.gpu_handoff: after the first grid maps the node's ring, grids
    arrive by the ring's signal socket, DDS filters their ROS copies, and each grid read from
    the device equals the FP64 reference at the node's tolerance."""
    from ros_harness import assert_bev_matches

    from bevpool_ros.handoff import BevHandoffSubscriber

    producer = Producer(rig_path)
    grids = []
    sub = BevHandoffSubscriber(graph.con, "bev/handoff",
                               lambda view, msg: grids.append((view.copy_to_host(), view.still_valid(), msg)))
    try:
        for _ in range(60):  # until linked and filtering: discovery, the first mapping
            n = len(grids)
            producer.send(graph.next_stamp(), cameras(graph))
            graph.spin_until(lambda: len(grids) > n, 2.0)
            if sub.linked and sub.links.filtered and sub.links.first_by["signal"] >= 3:
                break
        assert sub.linked and sub.links.first_by["signal"] >= 3, (dict(sub.links.first_by), sub.last_error)
        assert sub.links.filtered == 1, sub.links.filter_error
        assert sub.errors == 0, sub.last_error
        bev, valid, msg = grids[-1]
        assert valid
        assert_bev_matches(bev, reference, msg)
        stamps = [g[2].header.stamp for g in grids]
        assert len({(s.sec, s.nanosec) for s in stamps}) == len(stamps)  # each grid once
    finally:
        sub.close()
        producer.stop()
