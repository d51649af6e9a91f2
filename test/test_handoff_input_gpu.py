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
    # commands on stdin, one per line: "<stamp> <camera,camera,...> [overwrite|nan]"; "ok" per line
    # (nan: the first camera's features hold a NaN)
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
    first = (rig.cameras[0].name, "feat")
    bad = tensors[first][1].copy()
    bad[0, 0, 0] = np.nan
    bad_buf = DeviceBuffer(bad.nbytes)
    check(api().cuMemcpyHtoD(bad_buf.ptr, bad.ctypes.data, bad.nbytes), "cuMemcpyHtoD")
    nan_view = View(bad_buf, bad)
    print("ready", pub.handing_off, flush=True)
    for line in sys.stdin:
        words = line.split()
        stamp, cameras = int(words[0]), words[1].split(",")
        if words[2:] == ["overwrite"]:  # every slot is claimed again before the announcements go
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
                    view = nan_view if words[2:] == ["nan"] and (cam, s) == first else views[(cam, s)]
                    pub.publish(cam, s, view, stamp, layout="DHW" if s == "depth" else "HWC")
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

    def send(self, stamp: int, cameras, overwrite: bool = False, nan: bool = False) -> None:
        """``overwrite``: every slot claimed again before the announcements go; ``nan``: the first
        camera's features hold a NaN."""
        word = " overwrite" if overwrite else " nan" if nan else ""
        self.proc.stdin.write(f"{stamp} {','.join(cameras)}{word}\n")
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


# --- the core's launch of a set (handoff/native/launcher.py) against the backend's own pooling -------
def test_the_core_launches_a_handed_off_set_as_the_backend_pools_it(graph, rig_path, reference):
    """The producer process's tensors read here (HandoffReader): the cuda backend pools each set in
    Python (the twin) and shares its graphs with the core's launcher; a set whose slots it has a graph
    for is launched by the core: its grid lands in the output ring (slots poisoned with NaN) bit for
    bit as the backend's own, within the FP64 reference's tolerance, and its BevHandoff datagram
    reaches a linked consumer naming the ring's slot, sequence and the set's stamp. A slot
    combination without a graph is a miss (nothing enqueued, nothing announced); a set whose tensors
    were overwritten since is launched but not announced."""
    import ctypes

    from bevpool_msgs.msg import BevHandoff, TensorHandoff
    from rclpy.serialization import deserialize_message
    from std_msgs.msg import Header

    from bevpool_ros.backends import NonFiniteInput
    from bevpool_ros.backends.cuda import CudaBackend
    from bevpool_ros.cameras.sync import CameraSet
    from bevpool_ros.device.driver import api, check
    from bevpool_ros.handoff.cdr_template import CdrTemplate
    from bevpool_ros.handoff.message import handoff_msg
    from bevpool_ros.handoff.native import launcher as launch
    from bevpool_ros.handoff.native.core import Member, Values, library
    from bevpool_ros.handoff.native.setloop import ANNOUNCEMENT
    from bevpool_ros.handoff.producer import HandoffRing, Written
    from bevpool_ros.handoff.reader import HandoffReader
    from bevpool_ros.handoff.signal import SignalClient, signal_path
    from bevpool_ros.io.bev_message import stamp_to_ns
    from bevpool_ros.node.handoff_input import handoff_topics
    from bevpool_ros.node.handoff_launch import SharedGraphs, member_key, set_key
    from bevpool_ros.params.table import defaults
    from bevpool_ros.rig_yaml import load_rig
    from bevpool_ros.scatter_map import build_scatter_map
    from bevpool_ros.tolerance import error_ratio

    if graph.intake == "python":
        pytest.skip("the launcher does not depend on the node's intake: run once")
    lib = library()
    assert lib is not None, "the hand-off core is missing beside a GPU"
    rig = load_rig(rig_path)
    names = [c.name for c in rig.cameras]
    got: dict = {}

    def on_announcement(m):
        got.setdefault(stamp_to_ns(m.header.stamp), {})[(m.camera, m.stream)] = m
    subs = [graph.con.create_subscription(TensorHandoff, topic, on_announcement, 50)
            for topic in handoff_topics(defaults(), names).values()]

    def announced(stamp, nan=False):
        """One set handed off by the producer: its announcements, cameras in rig order, depth then feat
        (sent again with a later stamp until all came: the subscriptions' discovery of a new producer)."""
        for _ in range(10):
            producer.send(stamp, names, nan=nan)
            if graph.spin_until(lambda: len(got.get(stamp, {})) == 2 * len(names), 3.0):
                return stamp, [got[stamp][(cam, s)] for cam in names for s in ("depth", "feat")]
            stamp = graph.next_stamp()
        raise AssertionError(f"no whole set announced: {got.get(stamp)}")

    def members(msgs):
        out = []
        for i, m in enumerate(msgs):
            v = Values(sec=m.header.stamp.sec, nanosec=m.header.stamp.nanosec, slot=m.slot, scale=m.scale,
                       sequence=m.sequence)
            ctypes.memmove(v.event_handle, bytes(m.event_handle), 64)
            out.append(Member(camera=i // 2, stream=i % 2, stamp=stamp_to_ns(m.header.stamp), token=ANNOUNCEMENT,
                              ring_id=m.ring_id, template_id=-1, values=v))
        return out

    producer = Producer(rig_path)  # its own: the restart test above stopped the module's
    reader = HandoffReader(0)
    be = CudaBackend("fp16")
    be.prepare(build_scatter_map(rig))
    run = be.device_input_run()
    out_dtype = np.dtype(np.float16)
    flags_ptr, grid_ptr, grid_bytes = run.targets(out_dtype)
    ring = HandoffRing(be.rt.device, grid_bytes, 4, native=True)
    be.rt.device.make_current()
    poison = np.full(grid_bytes // 2, np.nan, np.float16)
    for b in ring.buffers:
        check(api().cuMemcpyHtoD(b.ptr, poison.ctypes.data, grid_bytes), "cuMemcpyHtoD")
    header = Header()
    header.frame_id = "ego"
    shape = tuple(run.smap.bev_shape)
    first = handoff_msg(header, rig, ring, Written(0, 1, ring.event_handles[0]), shape, out_dtype, "cuda", "fp16")
    launcher = launch.NativeLauncher(lib, context=int(be.rt.device.ctx), stream=int(be.rt.stream.handle),
                                     flags_ptr=flags_ptr, grid_ptr=grid_ptr, grid_bytes=grid_bytes,
                                     output=ring.native, template_id=ring.native.templates.add(CdrTemplate(first)))
    shared = SharedGraphs(launcher, run)
    datagrams: list = []
    client = SignalClient(signal_path(ring.socket_path), datagrams.append)
    try:
        assert graph.spin_until(lambda: ring.signal.consumers == 1, 5.0)

        def python_pool(msgs):
            """The twin: views opened, pooled by the backend (the launcher held meanwhile), graph shared."""
            views = [reader.open(m, wait=False) for m in msgs]
            mapped = reader.ring(msgs[0].socket_path)
            launcher.ring(mapped.ring_id, mapped.control.block.words.ctypes.data, mapped.ring_size,
                          {h: int(e.event) for h, e in mapped.events.items()})
            host = np.full(shape, np.nan, out_dtype)  # poisoned: every cell is written
            with launcher.held():
                be.pool_cameras([(views[2 * i], views[2 * i + 1]) for i in range(len(names))], out=host)
            frames = {cam: {"depth": (0, views[2 * i]), "feat": (0, views[2 * i + 1])} for i, cam in enumerate(names)}
            shared.after_set(set_key(CameraSet(frames, tuple(names), (), 0.0, 0.0, True), names))
            return host

        # the producer's ring cycles through three sets' slots: a combination's second set is captured
        # (and shared), its third is the core's
        earlier, shared_keys = {}, set()
        for _ in range(12):
            stamp, msgs = announced(graph.next_stamp())
            key = member_key(members(msgs))
            if key in shared_keys:
                break
            earlier.setdefault(key, msgs)
            python_pool(msgs)
            if run.device.last_graph is not None:
                shared_keys.add(key)
        assert key in shared_keys, "no slot combination came back"
        result, data = launcher.launch(members(msgs), stamp)
        assert result.result == launch.DONE, result.result
        grid = np.empty(shape, out_dtype)
        be.rt.device.make_current()
        check(api().cuMemcpyDtoH(grid.ctypes.data, ring.buffers[result.slot].ptr, grid_bytes), "cuMemcpyDtoH")
        twin = python_pool(msgs)
        assert np.array_equal(grid.view(np.uint16), twin.view(np.uint16))  # one graph: the same bits
        assert error_ratio(grid.astype(np.float32), reference, "fp16") <= 1.0
        assert graph.spin_until(lambda: datagrams, 5.0) and datagrams == [data]
        msg = deserialize_message(data, BevHandoff)
        assert (msg.ring_id, msg.slot, msg.sequence) == (ring.ring_id, result.slot, result.sequence)
        assert stamp_to_ns(msg.header.stamp) == stamp and bytes(msg.event_handle) == ring.event_handles[result.slot]
        published = ring.control.block.published

        # slots in another order: no graph of the backend's for them
        missed, _ = launcher.launch(members(msgs)[::-1], stamp)
        assert missed.result == launch.MISS and ring.control.block.published == published
        # the first set of that combination: its tensors were overwritten by the later ones
        old, _ = launcher.launch(members(earlier[key]), stamp)
        assert launch.DROPS[old.result] == "handoff_overwritten" and old.member == 0
        # a NaN in a camera's features: flagged on the device, not announced (the backend raises it)
        for _ in range(6):
            stamp, msgs = announced(graph.next_stamp(), nan=True)
            key = member_key(members(msgs))
            if key in shared_keys:
                break
            with pytest.raises(NonFiniteInput):
                python_pool(msgs)
            shared.after_set(key)  # its graph replayed before the flags were read
            if run.device.last_graph is not None:
                shared_keys.add(key)
        assert key in shared_keys, "no slot combination came back"
        flagged, _ = launcher.launch(members(msgs), stamp)
        assert launch.DROPS[flagged.result] == "non_finite" and flagged.flags & 1
        graph.spin_until(lambda: len(datagrams) > 1, 0.5)
        assert datagrams == [data]  # none of them was announced
    finally:
        client.close()
        for mapped_path in reader.socket_paths:  # before the reader unmaps the producer's ring
            launcher.unring(reader.ring(mapped_path).ring_id)
        shared.close()
        launcher.close()
        ring.close()
        be.close()
        reader.close()
        for sub in subs:
            graph.con.destroy_subscription(sub)
        producer.stop()


# --- the node's sets launched by the core (node/handoff_launch.py CoreLaunch) ------------------------
def test_the_node_launches_handed_off_sets_in_the_core(graph, rig_path, reference):
    """With only hand-off consumers, sets whose slots the backend met before are pooled and announced
    by the core's launcher from the set loop's thread (counted ``launched_by_core``): each grid a
    BevHandoffSubscriber reads equals the FP64 reference; a set with a NaN is dropped ``non_finite``;
    a calibration change mid-stream stops the launcher before the next set, which re-prepares the
    backend, and the grids after it are the new map's; a BevFeature subscriber gets grids again."""
    from dataclasses import replace as dc_replace

    from bevpool_msgs.msg import BevFeature
    from ros_harness import assert_bev_matches
    from sensor_msgs.msg import Image

    from bevpool_ros.demo.synthetic_publisher import camera_info_msg
    from bevpool_ros.handoff import BevHandoffSubscriber
    from bevpool_ros.reference import pool_reference
    from bevpool_ros.ros.qos import make_qos
    from bevpool_ros.scatter_map import build_scatter_map

    if graph.intake == "python":
        pytest.skip("the launcher runs in the core's set loop")
    producer = Producer(rig_path)
    con, qos = graph.con, make_qos("reliable", 10)
    grids = []
    sub = BevHandoffSubscriber(con, "bev/handoff",
                               lambda view, msg: grids.append((view.copy_to_host(), view.still_valid(), msg)))
    con.destroy_subscription(con.bev_sub)  # nobody on the BevFeature or the image: no host grid wanted
    con.destroy_subscription(con.image_sub)
    con.bev_sub = con.image_sub = None

    def launched(timeout=1.0) -> int:
        d = graph.diagnostics_where(lambda d: True, timeout)
        return graph.counter(d, "launched_by_core")

    def send_until(predicate, tries=60):
        for _ in range(tries):
            n = len(grids)
            producer.send(graph.next_stamp(), cameras(graph))
            graph.spin_until(lambda: len(grids) > n, 2.0)
            if predicate():
                return True
        return False

    try:
        start = launched()
        assert send_until(lambda: launched(0.3) >= start + 3), (
            graph.diagnostics_where(lambda d: True).get("handoff_core_launch"), graph.node.output()[-4000:])
        n = len(grids)
        for _ in range(3):
            producer.send(graph.next_stamp(), cameras(graph))
        assert graph.spin_until(lambda: len(grids) >= n + 3, 10.0)
        for bev, valid, msg in grids[n:]:
            assert valid
            assert_bev_matches(bev, reference, msg)
        stamps = [(g[2].header.stamp.sec, g[2].header.stamp.nanosec) for g in grids]
        assert len(set(stamps)) == len(stamps) and stamps == sorted(stamps)  # each grid once, in order

        before = graph.counter(graph.diagnostics_where(lambda d: True), "dropped_non_finite")
        producer.send(graph.next_stamp(), cameras(graph), nan=True)
        assert graph.diagnostics_where(lambda d: graph.counter(d, "dropped_non_finite") > before, 10.0)

        # a calibration change mid-stream: the next grids are the new map's
        cam = graph.rig.cameras[0]
        K = np.array(cam.K)
        K[0, 0] *= 1.15
        K[1, 1] *= 1.15
        new_rig = graph.rig.with_cameras([dc_replace(c, K=K) if c.name == cam.name else c for c in graph.rig.cameras])
        depth, feat = graph.pub.scene.frame(0)
        new_ref = pool_reference(depth.astype(np.float16), feat.astype(np.float16), build_scatter_map(new_rig))
        assert np.abs(new_ref - reference).max() > 0.1 * np.abs(new_ref).max()
        changes = graph.counter(graph.diagnostics_where(lambda d: True), "calibration_changes")
        graph.pub.pubs[(cam.name, "camera_info")].publish(
            camera_info_msg(new_rig, 0, graph.pub.get_clock().now().to_msg(), "x"))
        assert graph.diagnostics_where(lambda d: graph.counter(d, "calibration_changes") > changes, 10.0)
        at_change = launched()
        for _ in range(6):  # the first after the change is Python's (re-prepared); then the core's again
            producer.send(graph.next_stamp(), cameras(graph))
        assert send_until(lambda: launched(0.3) >= at_change + 3), graph.node.output()[-4000:]
        n = len(grids)
        producer.send(graph.next_stamp(), cameras(graph))
        assert graph.spin_until(lambda: len(grids) > n, 10.0)
        bev, valid, msg = grids[-1]
        assert valid
        assert_bev_matches(bev, new_ref, msg)
    finally:
        graph.pub.pubs[(graph.rig.cameras[0].name, "camera_info")].publish(
            camera_info_msg(graph.rig, 0, graph.pub.get_clock().now().to_msg(), "x"))
        sub.close()
        if con.bev_sub is None:
            con.bev_sub = con.create_subscription(BevFeature, "bev/features", con._on_bev, qos)
        if con.image_sub is None:
            con.image_sub = con.create_subscription(Image, "bev/image", lambda m: con.images.append(m), qos)
    try:
        assert send_until_grid(graph, producer, cameras(graph)) is not None  # BevFeature again
    finally:
        producer.stop()
