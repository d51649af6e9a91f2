"""The input hand-off where it cannot run (no GPU here), over real DDS with real messages:
the announcement checks, the node refusing bad or unopenable announcements with counted drops
while CameraTensor cameras go on, the producer falling back to CameraTensor with one warning,
and ``input.handoff: only`` refused at start without a GPU. The device path: test_handoff_input_gpu.py.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import bevpool_msgs.msg  # noqa: F401  (built by scripts/build_msgs.sh; missing = a real failure)
import numpy as np
import pytest
from ros_harness import RosGraph, assert_bev_matches, no_gpu_env

from bevpool_ros.handoff.camera_publisher import boot_id, ring_for_rig
from bevpool_ros.io.bev_message import ns_to_time
from bevpool_ros.io.tensor_codec import DTYPE_CODES, TensorError
from bevpool_ros.node.handoff_input import check_announcement, handoff_topics
from bevpool_ros.params.table import defaults
from bevpool_ros.paths import default_rig_path
from bevpool_ros.reference import pool_reference
from bevpool_ros.rig_yaml import load_rig
from bevpool_ros.scatter_map import build_scatter_map

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAM = "CAM_FRONT"


@pytest.fixture(scope="module")
def rig():
    return load_rig(default_rig_path())


def announcement(rig, camera=CAM, stream="depth", stamp_ns=1, **fields):
    """A well-formed TensorHandoff of ``camera``'s ``stream`` on this host (float16)."""
    from bevpool_msgs.msg import TensorHandoff

    _, D, H, W = rig.depth_shape
    shape = (D, H, W) if stream == "depth" else (H, W, rig.channels)
    m = TensorHandoff()
    m.header.stamp = ns_to_time(stamp_ns)
    m.camera, m.stream, m.layout = camera, stream, "DHW" if stream == "depth" else "HWC"
    m.socket_path = "/nonexistent/bevpool_handoff/ring.sock"
    m.ring_id, m.ring_size, m.slot, m.sequence = 7, 24, 0, 1
    m.nbytes, m.dtype, m.shape = int(np.prod(shape)) * 2, DTYPE_CODES["float16"], list(shape)
    m.scale = 1.0
    m.boot_id = boot_id()
    for k, v in fields.items():
        setattr(m, k, v)
    return m


# --- the checks on the message alone --------------------------------------------------------------
def test_a_well_formed_announcement_passes(rig):
    cfg = defaults()
    assert check_announcement(announcement(rig), CAM, "depth", rig, cfg, boot_id()) == np.float16
    feat = announcement(rig, stream="feat", layout="")  # empty layout: input.feature_layout (HWC)
    assert check_announcement(feat, CAM, "feat", rig, cfg, boot_id()) == np.float16
    codes = announcement(rig, dtype=DTYPE_CODES["float8_e4m3"], scale=16.0)
    codes.nbytes //= 2
    assert check_announcement(codes, CAM, "depth", rig, cfg, boot_id()) == np.uint8


@pytest.mark.parametrize("fields, reason", [
    ({"camera": "CAM_BACK"}, "bad_handoff"),                 # announced on another camera's topic
    ({"stream": "feat"}, "bad_handoff"),
    ({"boot_id": "00000000-0000-0000-0000-000000000000"}, "handoff_remote"),
    ({"dtype": DTYPE_CODES["int64"]}, "bad_dtype"),
    ({"dtype": 99}, "bad_dtype"),
    ({"shape": [1, 2, 3]}, "bad_shape"),
    ({"layout": "HWD"}, "bad_layout"),
    ({"nbytes": 12}, "bad_size"),
    ({"scale": 2.0}, "bad_handoff"),                         # a scale on float16 values
    ({"scale": float("nan")}, "bad_handoff"),
])
def test_bad_announcements_name_their_drop_reason(rig, fields, reason):
    with pytest.raises(TensorError) as e:
        check_announcement(announcement(rig, **fields), CAM, "depth", rig, defaults(), boot_id())
    assert e.value.reason == reason


def test_chw_features_are_not_read_in_place(rig):
    _, _, H, W = rig.depth_shape
    m = announcement(rig, stream="feat", layout="CHW", shape=[rig.channels, H, W])
    with pytest.raises(TensorError) as e:
        check_announcement(m, CAM, "feat", rig, defaults(), boot_id())
    assert e.value.reason == "bad_layout" and "CameraTensor" in e.value.detail


def test_handoff_topics_follow_the_parameters(rig):
    cameras = [c.name for c in rig.cameras]
    cfg = defaults()
    topics = handoff_topics(cfg, cameras)
    assert len(topics) == 2 * len(cameras)
    assert topics[(CAM, "feat")] == f"cameras/{CAM}/feat_handoff"
    assert handoff_topics(dict(cfg, **{"input.handoff": "none"}), cameras) == {}


def test_the_ring_holds_three_sets_of_the_largest_tensor(rig):
    n, d, h, w = rig.depth_shape
    slot, size = ring_for_rig(rig, itemsize=2)
    assert slot == max(d * h * w, h * w * rig.channels) * 2 and size == 6 * n


def test_only_a_ros_copy_to_drop_waits_for_the_pooling_thread():
    """A ROS copy whose datagram came first waits (bounded) while a set is pooled, the executor
    asleep; a first copy goes to the synchroniser at once: held back, the next set's datagrams
    completed their set first and this one's was superseded (a set lost at 100 Hz on the H200,
    as the node linked its first ring)."""
    from types import SimpleNamespace

    from bevpool_ros.node.handoff_input import DDS_COPY_WAIT_S, HandoffInputs

    waits, handed = [], []
    signalled = set()
    links = SimpleNamespace(signalled=lambda m: m.sequence in signalled,
                            on_message=lambda m, sub: handed.append(m.sequence))
    worker = SimpleNamespace(wait_until_idle=lambda t: waits.append(t) or True)
    inputs = SimpleNamespace(wait_for_worker=worker.wait_until_idle, links=links, reader=object())
    for seq in (1, 2, 3):
        msg = SimpleNamespace(camera="CAM_FRONT", stream="depth", sequence=seq)
        if seq == 2:
            signalled.add(2)
        HandoffInputs.on_ros_copy(inputs, msg, subscription=None, camera="CAM_FRONT", stream="depth")
    assert handed == [1, 2, 3]             # every copy reaches the links (which drop duplicates)
    assert waits == [DDS_COPY_WAIT_S]      # only the copy of announcement 2 waited


def test_the_announcement_is_small_and_bounded():
    from bevpool_msgs.msg import TensorHandoff
    from rclpy.serialization import serialize_message

    m = TensorHandoff()
    m.socket_path = "x" * 108
    m.camera = "c" * 64
    m.shape = [1] * 8
    assert len(serialize_message(m)) < 512  # its largest sample: the tensor's size never matters


# --- the live node --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def graph():
    g = RosGraph({"backend": "cpu", "diagnostics.period_s": 0.1, "sync.camera_timeout_s": 0.3,
                  "input.qos_reliability": "reliable", "log_throttle_s": 0.5})
    yield g
    assert g.close() == 0


@pytest.fixture(scope="module")
def announcer(graph):
    from bevpool_msgs.msg import TensorHandoff

    from bevpool_ros.ros.qos import make_qos

    qos = make_qos("reliable", 5)
    return {(cam.name, stream): graph.pub.create_publisher(
        TensorHandoff, f"cameras/{cam.name}/{stream}_handoff", qos)
        for cam in graph.rig.cameras for stream in ("depth", "feat")}


@pytest.mark.ros
def test_the_node_subscribes_to_announcements_next_to_camera_tensors(graph, announcer):
    assert graph.spin_until(lambda: all(p.get_subscription_count() > 0 for p in announcer.values()),
                            20.0)
    assert graph.pub.subscribers_matched()  # the CameraTensor topics too (input.handoff auto)


@pytest.mark.ros
@pytest.mark.parametrize("fields, counters", [
    # well formed, but no ring to map: no GPU here (unavailable), none at that path on a GPU host
    ({}, ("dropped_handoff_unavailable", "dropped_handoff_refused")),
    ({"boot_id": "ffffffff-0000-0000-0000-000000000000"}, ("dropped_handoff_remote",)),
    ({"shape": [2, 2, 2]}, ("dropped_bad_shape",)),
    ({"camera": "CAM_BACK"}, ("dropped_bad_handoff",)),
])
def test_bad_or_unopenable_announcements_are_dropped_and_counted(graph, announcer, fields, counters):
    before = graph.diagnostics_where(lambda d: True) or {}
    sent = []

    def counted(d):
        return any(graph.counter(d, c) > graph.counter(before, c) for c in counters)
    after = None
    for _ in range(10):  # resent with fresh stamps until counted: one send is never trusted
        stamp = graph.next_stamp()
        sent.append(stamp)
        announcer[(CAM, "depth")].publish(announcement(graph.rig, stamp_ns=stamp, **fields))
        after = graph.diagnostics_where(counted, 2.0)
        if after:
            break
    assert after, f"{counters} never counted; node output:\n{graph.node.output()[-3000:]}"
    assert not set(sent) & set(graph.con.by_stamp()), "a set with a refused tensor was published"
    if graph.counter(after, "dropped_handoff_unavailable"):
        assert "unavailable" in after.get("input_handoff", ""), after.get("input_handoff")
    assert graph.node.alive()
    # CameraTensor cameras are untouched by it
    got = graph.publish_and_wait(0)
    assert got is not None, graph.node.output()[-3000:]
    depth, feat = graph.pub.arrays(0)
    assert_bev_matches(got.bev, pool_reference(depth, feat, build_scatter_map(graph.rig)), got.msg)


PRODUCER = textwrap.dedent("""
    import sys, time
    import rclpy
    from bevpool_ros.handoff.camera_publisher import CameraHandoffPublisher
    from bevpool_ros.rig_yaml import load_rig
    from bevpool_ros.synthetic import SyntheticScene
    rig_path, base, frames = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rclpy.init()
    node = rclpy.create_node("camera_producer")
    rig = load_rig(rig_path)
    pub = CameraHandoffPublisher(node, rig)
    print("HANDING_OFF", pub.handing_off, flush=True)
    depth, feat = SyntheticScene(rig, seed=0).frame(0)
    for i in range(frames):
        stamp = base + i * 100_000_000
        for n, cam in enumerate(rig.cameras):
            pub.publish(cam.name, "depth", depth[n].astype("float16"), stamp, layout="DHW")
            pub.publish(cam.name, "feat", feat[n].astype("float16"), stamp, layout="HWC")
        rclpy.spin_once(node, timeout_sec=0.1)
    print("SENT", pub.sent_tensors, "HANDED_OFF", pub.handed_off, flush=True)
    pub.close()
    node.destroy_node()
    rclpy.shutdown()
""")


@pytest.mark.ros
def test_a_producer_without_gpu_falls_back_to_camera_tensor_with_one_warning(graph):
    frames = 150  # 15 s of sets at most; the first grid back ends the wait
    base = graph.next_stamp(step_ms=1000)
    graph.next_stamp(step_ms=frames * 100 + 1000)  # later tests stamp after the producer's sets
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, str(default_rig_path()), str(base),
                             str(frames)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO, env=dict(no_gpu_env(), PYTHONUNBUFFERED="1"))
    try:
        window = range(base, base + frames * 100_000_000)
        assert graph.spin_until(lambda: any(s in window for s in graph.con.by_stamp()), 60.0), \
            graph.node.output()[-3000:]
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, out
    assert "HANDING_OFF False" in out, out
    assert out.count("input hand-off unavailable") == 1, out  # one warning, not one per tensor
    assert "HANDED_OFF 0" in out, out
    got = next(b for s, b in graph.con.by_stamp().items() if s in window)
    depth, feat = graph.pub.scene.frame(0)
    ref = pool_reference(depth.astype(np.float16), feat.astype(np.float16),
                         build_scatter_map(graph.rig))
    assert_bev_matches(got.bev, ref, got.msg)


@pytest.mark.ros
def test_handoff_only_without_a_gpu_refuses_to_configure():
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.node.main", "--ros-args",
                        "-p", "backend:=cpu", "-p", "input.handoff:=only"],
                       capture_output=True, text=True, timeout=120, cwd=REPO, env=no_gpu_env())
    assert r.returncode == 2, r.stdout + r.stderr
    assert "invalid configuration" in r.stderr and "input.handoff only" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


class UnopenedRing:
    """Stands in for a GPU producer (none here) whose ring no subscriber ever opens: what the
    producer sees when the node runs on another host."""

    available = True

    def __init__(self, folder: str):
        from functools import partial
        from types import SimpleNamespace

        from bevpool_ros.handoff.producer import HandoffRing

        self.ring = SimpleNamespace(server=SimpleNamespace(served=0), native=None,  # the Python twin
                                    socket_path=os.path.join(folder, "ring.sock"),
                                    announce=partial(HandoffRing.announce,  # nobody linked
                                                     SimpleNamespace(signal=None)))
        self.sequence = 0

    def publish(self, tensor, stream=None, scale=1.0):
        from bevpool_ros.handoff.camera_producer import TensorHandoff

        self.sequence += 1
        return TensorHandoff(self.ring.socket_path, 1, 4, (self.sequence - 1) % 4, self.sequence,
                             0, tensor.nbytes, DTYPE_CODES[tensor.dtype.name], tensor.shape,
                             bytes(64), 0, bytes(16))

    def close(self):
        pass


class CountingLogger:
    def __init__(self):
        self.warnings = []

    def warning(self, text):
        self.warnings.append(text)

    def info(self, text):
        pass


@pytest.mark.ros
def test_a_producer_whose_ring_nobody_opens_falls_back_with_one_warning(tmp_path):
    from bevpool_msgs.msg import CameraTensor, TensorHandoff
    from ros_harness import private_node

    from bevpool_ros.handoff.camera_publisher import CameraHandoffPublisher
    from bevpool_ros.ros.qos import make_qos

    with private_node("handoff_fallback_test") as (node, executor):
        logger = CountingLogger()
        node.get_logger = lambda: logger
        got = {"handoff": [], "tensor": []}
        qos = make_qos("reliable", 10)
        node.create_subscription(TensorHandoff, f"cameras/{CAM}/depth_handoff",
                                 got["handoff"].append, qos)
        node.create_subscription(CameraTensor, f"cameras/{CAM}/depth", got["tensor"].append, qos)
        pub = CameraHandoffPublisher(node, cameras=[CAM], producer=UnopenedRing(str(tmp_path)),
                                     connect_timeout_s=0.5)
        assert pub.handing_off and not logger.warnings
        depth = np.full((4, 2, 3), 0.25, np.float16)
        ways, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline and not got["tensor"]:
            ways.append(pub.publish(CAM, "depth", depth, 1_000_000_000 + len(ways), layout="DHW"))
            executor.spin_once(timeout_sec=0.1)
        assert got["tensor"], ways
        assert ways[0] == "handoff" and ways[-1] == "camera_tensor"  # handed off, then not
        assert not pub.handing_off and "did not open the hand-off ring" in pub.fallback_reason
        assert len(logger.warnings) == 1 and "input hand-off unavailable" in logger.warnings[0]
        for _ in range(3):
            assert pub.publish(CAM, "depth", depth, 2_000_000_000) == "camera_tensor"
        assert len(logger.warnings) == 1  # once, however many tensors follow
        assert got["handoff"] and got["handoff"][0].camera == CAM  # the announcements were real
        np.testing.assert_array_equal(np.frombuffer(bytes(got["tensor"][0].data), np.float16),
                                      depth.ravel())
        pub.close()

