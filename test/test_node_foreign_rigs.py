"""bevpool_node over real DDS on rigs it was not shipped with, fed by a publisher it has never seen.

The rig is written to a temporary YAML and passed as ``rig_file``; the publisher below is plain
rclpy building bevpool_msgs/CameraTensor messages field by field (not the demo publisher), with
reliable or best-effort QoS, CHW or HWC features, float16 or float32. Every grid must equal the
FP64 reference of what was sent, at the tolerance of the backend the node chose, and the
BevFeature geometry must be the rig's. One node per rig, a few frames each.
A backend that cannot run a rig (prepare raises) hands over to the cpu backend with one warning
naming C, or, with backend_fallback off, stops the node with a startup error naming it.
"""
from __future__ import annotations

import time

import bevpool_msgs.msg  # noqa: F401  (built by scripts/build_msgs.sh; missing = a real failure)
import numpy as np
import pytest
import rig_variants as V
from ros_harness import DISCOVERY_TIMEOUT, assert_bev_matches, isolate_ros_env, spin_until

from bevpool_ros.backends import CpuBackend
from bevpool_ros.kernels.table import UnsupportedShape
from bevpool_ros.reference import pool_reference
from bevpool_ros.scatter_map import build_scatter_map

pytestmark = pytest.mark.ros

DTYPE_CODE = {np.float16: 8, np.float32: 9}  # bevpool_msgs/Tensor.DTYPE_FLOAT16 / DTYPE_FLOAT32


class HandPublisher:
    """A third-party camera driver's side: one depth and one feature topic per camera."""

    def __init__(self, node, rig, reliable: bool):
        from bevpool_msgs.msg import CameraTensor
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

        qos = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=4,
                         reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT)
        self.rig = rig
        self.pubs = {(cam.name, s): node.create_publisher(CameraTensor, f"cameras/{cam.name}/{s}", qos)
                     for cam in rig.cameras for s in ("depth", "feat")}

    def matched(self) -> bool:
        return all(p.get_subscription_count() > 0 for p in self.pubs.values())

    @staticmethod
    def tensor(arr: np.ndarray, name: str, layout: str, dtype, stamp_ns: int, frame_id: str):
        from bevpool_msgs.msg import CameraTensor

        m = CameraTensor()
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(stamp_ns, 10**9)
        m.header.frame_id = frame_id
        m.name, m.layout = name, layout
        m.shape = [int(v) for v in arr.shape]
        m.dtype = DTYPE_CODE[dtype]
        m.data = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
        return m

    def publish(self, depth, feat, stamp_ns: int, dtype, layout: str) -> None:
        for n, cam in enumerate(self.rig.cameras):
            f = feat[n] if layout == "HWC" else feat[n].transpose(2, 0, 1)
            frame = f"{cam.name}_optical"
            self.pubs[(cam.name, "depth")].publish(self.tensor(depth[n], "depth", "DHW", dtype, stamp_ns, frame))
            self.pubs[(cam.name, "feat")].publish(self.tensor(f, "feat", layout, dtype, stamp_ns, frame))


def run_rig(name: str, tmp_path, reliable: bool, frames) -> None:
    """One node on variant ``name``; ``frames`` = [(dtype, layout), ...] each sent and checked."""
    from bevpool_ros.demo.session import PipelineSession

    isolate_ros_env()
    rig = V.rig(name)
    smap = build_scatter_map(rig)
    session = PipelineSession(str(V.write_rig(name, tmp_path)), publisher=False, node_params={
        "input.qos_reliability": "reliable" if reliable else "best_effort", "diagnostics.period_s": 0.5})
    try:
        import rclpy.node

        driver = rclpy.node.Node(f"foreign_driver_{name}", context=session.context)
        session.executor.add_node(driver)
        pub = HandPublisher(driver, rig, reliable)
        ready = session.spin_until(lambda: pub.matched() and session.con.publisher_matched(), DISCOVERY_TIMEOUT)
        assert ready, f"node not discovered; its output:\n{session.node.output()[-3000:]}"
        stamp = 1_000 * 10**9
        for i, (dtype, layout) in enumerate(frames):
            depth, feat = V.random_inputs(rig, seed=i)
            # best effort may lose a burst sent before the node's readers matched ours: resend
            # (fresh stamp) until a grid comes back
            got, deadline = None, time.monotonic() + DISCOVERY_TIMEOUT
            while got is None and time.monotonic() < deadline:
                stamp += 50_000_000
                pub.publish(depth, feat, stamp, dtype, layout)
                session.spin_until(lambda s=stamp: s in session.con.by_stamp(), 2.0 if reliable else 1.0)
                got = session.con.by_stamp().get(stamp)
            assert got is not None, f"{name} frame {i}: no BEV; node output:\n{session.node.output()[-3000:]}"
            sent_d, sent_f = depth.astype(dtype), feat.astype(dtype)  # what the node received
            assert_bev_matches(got.bev, pool_reference(sent_d, sent_f, smap), got.msg)
            assert_geometry(got.msg, rig)
            if smap.num_points:
                assert np.abs(got.bev).max() > 0
        driver.destroy_node()
    finally:
        rc, log = session.close()
    assert rc == 0, f"bevpool_node did not exit cleanly:\n{log[-3000:]}"
    assert "Traceback" not in log, log[-3000:]


def assert_geometry(msg, rig) -> None:
    Z, Y, X = rig.grid_shape
    assert (msg.layers, msg.height, msg.width, msg.channels) == (Z, Y, X, rig.channels)
    assert msg.layout == "ZYXC" and msg.header.frame_id == "base_link"
    assert (msg.origin.x, msg.origin.y, msg.origin.z) == pytest.approx((rig.x.lower, rig.y.lower, rig.z.lower))
    assert (msg.resolution_x, msg.resolution_y, msg.resolution_z) == pytest.approx((rig.x.step, rig.y.step, rig.z.step))
    assert list(msg.cameras) == [c.name for c in rig.cameras] and list(msg.missing_cameras) == []


def test_four_cameras_c64_two_layers_reliable(tmp_path):
    run_rig("quad_c64_d40_z2", tmp_path, reliable=True,
            frames=[(np.float32, "HWC"), (np.float16, "CHW"), (np.float32, "CHW")])


def test_one_camera_odd_channels_best_effort(tmp_path):
    run_rig("solo_c17_z3", tmp_path, reliable=False, frames=[(np.float16, "HWC"), (np.float32, "CHW")])


# --- a backend that cannot run the rig -------------------------------------------------------------
class RefusingBackend(CpuBackend):
    """Stands in for a GPU backend whose kernel table lacks the rig's channel count: the cpu
    backend under another name, except that prepare refuses C = 17 as choose_v3_kernel once did."""
    name = "cuda"
    closed = False

    def prepare(self, smap):
        if smap.channels == 17:
            raise UnsupportedShape(f"V3 fp16 needs C % 4 == 0, got C = {smap.channels}")
        super().prepare(smap)

    def close(self):
        self.closed = True


@pytest.fixture
def node_with_refusing_backend(monkeypatch, tmp_path):
    """make(fallback) -> (context, node, refusing backend) on rig solo_c17_z3, in this process."""
    isolate_ros_env()
    import rclpy
    from rclpy.parameter import Parameter

    import bevpool_ros.node.configure as configure_module
    import bevpool_ros.node.node as node_module

    made, contexts = [], []
    real_create = configure_module.create_backend

    def create(name, precision="fp16", **kw):
        if name == "cpu":
            return real_create(name, precision, **kw)
        made.append(RefusingBackend())
        return made[-1]

    monkeypatch.setattr(configure_module, "create_backend", create)

    def make(fallback: bool):
        ctx = rclpy.Context()
        rclpy.init(context=ctx)
        contexts.append(ctx)
        node = node_module.BevPoolNode(context=ctx, parameter_overrides=[
            Parameter("rig_file", value=str(V.write_rig("solo_c17_z3", tmp_path))),
            Parameter("backend", value="cuda"), Parameter("backend_fallback", value=fallback),
            Parameter("input.qos_reliability", value="reliable")])
        return ctx, node, made[-1]

    yield make
    for ctx in contexts:
        rclpy.try_shutdown(context=ctx)


def test_backend_that_cannot_run_the_rig_falls_back_to_cpu(node_with_refusing_backend, capfd):
    import rclpy.node
    from rclpy.executors import SingleThreadedExecutor

    from bevpool_ros.demo.consumer import BevConsumer

    ctx, node, refusing = node_with_refusing_backend(fallback=True)
    err = capfd.readouterr().err
    assert "backend 'cuda' cannot run rig solo_c17_z3 (C = 17" in err and "falling back to 'cpu'" in err
    assert node.backend.name == "cpu" and node.worker.backend is node.backend and refusing.closed
    rig = V.rig("solo_c17_z3")
    driver = rclpy.node.Node("foreign_driver", context=ctx)
    con = BevConsumer(context=ctx, subscribe_image=False)
    ex = SingleThreadedExecutor(context=ctx)
    for n in (node, driver, con):
        ex.add_node(n)
    try:
        pub = HandPublisher(driver, rig, reliable=True)
        assert spin_until(ex, lambda: pub.matched() and con.publisher_matched(), DISCOVERY_TIMEOUT)
        depth, feat = V.random_inputs(rig, seed=4)
        got, stamp = None, 7 * 10**9
        while got is None and stamp < 7 * 10**9 + 20 * 10**8:  # resent until a grid comes back
            stamp += 10**8
            pub.publish(depth, feat, stamp, np.float32, "HWC")
            spin_until(ex, lambda s=stamp: s in con.by_stamp(), 2.0)
            got = con.by_stamp().get(stamp)
        assert got is not None
        assert (got.msg.backend, got.msg.precision) == ("cpu", "fp32")  # says what actually ran
        assert_bev_matches(got.bev, pool_reference(depth.astype(np.float32), feat.astype(np.float32),
                                                   build_scatter_map(rig)), got.msg)
    finally:
        ex.shutdown()
        for n in (con, driver, node):
            n.destroy_node()


def test_without_fallback_the_refusal_is_a_startup_error_naming_c(node_with_refusing_backend):
    from bevpool_ros.node.node import StartupError

    with pytest.raises(StartupError, match=r"backend 'cuda' cannot run rig solo_c17_z3 \(C = 17.*UnsupportedShape"):
        node_with_refusing_backend(fallback=False)


# --- cameras of mixed image sizes ----------------------------------------------------------------
def test_cameras_of_mixed_sizes_keep_their_field_of_view(tmp_path):
    """A rig file whose CAM_FRONT is a 1920x1080 camera with the 1600x900 ones' field of view, then
    a CameraInfo that makes CAM_FRONT_LEFT one mid-stream: every grid equals the FP64 reference of
    the all-1600x900 rig (a scatter map without any scaling), as the same world seen by the same
    network input must give."""
    from dataclasses import replace as dc_replace

    import yaml
    from conftest import NUSCENES_RIG
    from test_rig_fov import SCALE, front_at_1920

    from bevpool_ros.demo.session import PipelineSession
    from bevpool_ros.demo.synthetic_publisher import camera_info_msg
    from bevpool_ros.rig_yaml import rig_from_dict

    same = yaml.safe_load(NUSCENES_RIG.read_text()) | {"name": "mixed_front", "channels": 16}
    path = tmp_path / "mixed_front.yaml"
    path.write_text(yaml.safe_dump(front_at_1920(same), sort_keys=False))
    want_map = build_scatter_map(rig_from_dict(same))
    isolate_ros_env()
    g = PipelineSession(str(path), {"diagnostics.period_s": 0.2})
    stamp = [1_000 * 10**9]

    def grid_of(index: int, **kw):
        """Publish frame ``index`` (fresh stamps) until its grid comes back: a set may be lost to
        discovery, a re-preparation or a loaded machine, never trusted to one send."""
        for _ in range(30):
            stamp[0] += 100_000_000
            g.pub.publish_frame(index, stamp[0], **kw)
            if g.spin_until(lambda: stamp[0] in g.con.by_stamp(), 3.0):
                return g.con.by_stamp()[stamp[0]]
        return None

    def counter(key: str) -> int:
        return int((g.con.latest_diagnostics() or {}).get(key, 0))

    try:
        assert (g.rig.cameras[0].width, g.rig.cameras[0].height) == (1920, 1080)
        assert g.spin_until(lambda: g.pub.subscribers_matched() and g.con.publisher_matched(), 120.0), \
            g.node.output()[-3000:]
        got = grid_of(1)
        assert got is not None, g.node.output()[-3000:]
        assert_bev_matches(got.bev, pool_reference(*g.pub.arrays(1), want_map), got.msg)
        # CameraInfo mid-stream: CAM_FRONT_LEFT becomes 1920x1080 with the same field of view
        left = g.rig.cameras[2]
        K = np.asarray(left.K) * np.array([[SCALE], [SCALE], [1.0]])
        bigger = g.rig.with_cameras([dc_replace(c, width=1920, height=1080, K=K) if c is left else c
                                     for c in g.rig.cameras])
        info = camera_info_msg(bigger, 2, g.pub.get_clock().now().to_msg(), f"{left.name}_optical")
        assert g.spin_until(lambda: g.con.latest_diagnostics() is not None, 60.0)
        before = counter("calibration_changes")
        g.pub.pubs[(left.name, "camera_info")].publish(info)
        assert g.spin_until(lambda: counter("calibration_changes") > before, 60.0), \
            g.node.output()[-3000:]
        assert counter("dropped_camera_info_rejected") == 0, g.node.output()[-3000:]
        got = grid_of(2, camera_info=False)
        assert got is not None, g.node.output()[-3000:]
        assert_bev_matches(got.bev, pool_reference(*g.pub.arrays(2), want_map), got.msg)
    finally:
        rc, log = g.close()
    assert rc == 0, log[-3000:]
