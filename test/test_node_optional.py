"""Optional ROS packages (not installable here) through minimal stand-ins: message_filters and
tf2_ros paths of the node run in-process against fakes with the real API's call shapes."""
from __future__ import annotations

import sys
import types

import bevpool_msgs.msg  # noqa: E402,F401  (built by scripts/build_msgs.sh; missing = a real failure)
import numpy as np
import pytest
from ros_harness import isolate_ros_env, spin_until  # noqa: E402

pytestmark = pytest.mark.ros


@pytest.fixture
def ros_context():
    isolate_ros_env()
    import rclpy

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    yield ctx
    rclpy.try_shutdown(context=ctx)


def make_node(ctx, **params):
    from rclpy.parameter import Parameter

    from bevpool_ros.node.node import BevPoolNode

    overrides = [Parameter(k, value=v) for k, v in {"backend": "cpu", **params}.items()]
    return BevPoolNode(context=ctx, parameter_overrides=overrides)


def fake_message_filters(record):
    mf = types.ModuleType("message_filters")

    class Subscriber:
        def __init__(self, node, msg_type, topic, qos_profile=None):
            record.setdefault("topics", []).append(topic)

    class ApproximateTimeSynchronizer:
        def __init__(self, fs, queue_size, slop):
            record.update(filters=len(fs), queue_size=queue_size, slop=slop)

        def registerCallback(self, cb):
            record["callback"] = cb

    mf.Subscriber, mf.ApproximateTimeSynchronizer = Subscriber, ApproximateTimeSynchronizer
    return mf


def test_message_filters_path_when_installed_and_asked(ros_context, monkeypatch, nuscenes_rig):
    from rclpy.executors import SingleThreadedExecutor

    from bevpool_ros.demo.consumer import BevConsumer
    from bevpool_ros.io.tensor_codec import make_camera_tensor
    from bevpool_ros.reference import pool_reference
    from bevpool_ros.scatter_map import build_scatter_map
    from bevpool_ros.synthetic import SyntheticScene

    record = {}
    monkeypatch.setitem(sys.modules, "message_filters", fake_message_filters(record))
    node = make_node(ros_context, **{"sync.use_message_filters": True, "sync.slop_s": 0.03})
    con = BevConsumer(context=ros_context, subscribe_image=False)
    ex = SingleThreadedExecutor(context=ros_context)
    ex.add_node(node)
    ex.add_node(con)
    try:
        assert record["filters"] == 12 and record["slop"] == pytest.approx(0.03)
        assert record["topics"][:2] == ["cameras/CAM_FRONT/depth", "cameras/CAM_FRONT/feat"]
        assert spin_until(ex, lambda: con.bev_sub.get_publisher_count() > 0, 20)
        depth, feat = SyntheticScene(nuscenes_rig).frame(0)
        msgs = []
        for n in range(6):
            for arr, layout in ((depth[n], "DHW"), (feat[n], "HWC")):
                m = make_camera_tensor(arr, layout=layout)
                m.header.stamp.sec = 42
                msgs.append(m)
        record["callback"](*msgs)
        assert spin_until(ex, lambda: con.count > 0, 20)
        ref = pool_reference(depth, feat, build_scatter_map(nuscenes_rig))
        np.testing.assert_allclose(con.bevs[-1].bev, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    finally:
        ex.shutdown()
        con.destroy_node()
        node.destroy_node()


def test_without_message_filters_the_builtin_synchroniser_runs(ros_context, monkeypatch):
    monkeypatch.setitem(sys.modules, "message_filters", None)  # import fails
    node = make_node(ros_context, **{"sync.use_message_filters": True})
    try:
        assert node.inputs.mf_sync is None  # 12 tensor readers (renewable) + 6 CameraInfo
        assert len(node.inputs.readers.subs) == 12 and len(node.inputs.subs) == 6
    finally:
        node.destroy_node()


def test_tf_extrinsics_update_the_calibration(ros_context, monkeypatch):
    tf2 = types.ModuleType("tf2_ros")
    calls = []

    class Buffer:
        def lookup_transform(self, target, source, when):
            calls.append((target, source))
            t = types.SimpleNamespace(x=1.5, y=0.25, z=1.6)
            q = types.SimpleNamespace(w=0.5, x=-0.5, y=0.5, z=-0.5)
            return types.SimpleNamespace(transform=types.SimpleNamespace(translation=t, rotation=q))

    class TransformListener:
        def __init__(self, buffer, node):
            pass

    tf2.Buffer, tf2.TransformListener = Buffer, TransformListener
    monkeypatch.setitem(sys.modules, "tf2_ros", tf2)
    from bevpool_ros.demo.synthetic_publisher import camera_info_msg

    node = make_node(ros_context, ego_frame="ego")
    try:
        v0 = node.calibration.version
        info = camera_info_msg(node.calibration.rig, 0, node.get_clock().now().to_msg(), "cam_front_optical")
        node.inputs.on_camera_info(info, "CAM_FRONT")
        node.inputs.update_from_tf()
        assert calls == [("ego", "cam_front_optical")]
        assert node.calibration.version == v0 + 1
        assert node.calibration.camera("CAM_FRONT").translation == (1.5, 0.25, 1.6)
        node.inputs.update_from_tf()  # same transform again: no change, no rebuild
        assert node.calibration.version == v0 + 1
    finally:
        node.destroy_node()


def test_extrinsics_parameter_at_run_time(ros_context):
    from rclpy.parameter import Parameter

    node = make_node(ros_context)
    try:
        v0 = node.calibration.version
        bad = node.set_parameters([Parameter("extrinsics.CAM_BACK", value=[0.0] * 7)])[0]
        assert not bad.successful and "zero norm" in bad.reason
        ok = node.set_parameters([Parameter("extrinsics.CAM_BACK", value=[0.0, 0.0, 1.6, 0.5, -0.5, -0.5, 0.5])])[0]
        assert ok.successful and node.calibration.version == v0 + 1
        assert node.calibration.camera("CAM_BACK").translation == (0.0, 0.0, 1.6)
        r = node.set_parameters([Parameter("sync.min_cameras", value=9)])[0]
        assert not r.successful and "min_cameras" in r.reason
        assert node.counts["parameter_rejected"] == 2
    finally:
        node.destroy_node()


def test_every_parameter_change_is_logged_accepted_or_rejected(ros_context, capfd):
    """Not throttled like data drops: an operator setting parameters gets every answer in the log,
    the accepted ones with their new values."""
    from rclpy.parameter import Parameter

    node = make_node(ros_context)
    try:
        capfd.readouterr()
        for v in (0.03, 0.04, 0.05, 0.06, 0.07):
            assert node.set_parameters([Parameter("sync.slop_s", value=v)])[0].successful
        for v in (-1.0, -2.0, -3.0, 5.0, 6.0):
            assert not node.set_parameters([Parameter("sync.slop_s", value=v)])[0].successful
        both = [Parameter("sync.camera_timeout_s", value=0.2),
                Parameter("output.bev_dtype", value="float16")]
        assert node.set_parameters_atomically(both).successful
        log = capfd.readouterr().err
    finally:
        node.destroy_node()
    for v in (0.03, 0.04, 0.05, 0.06, 0.07):
        assert f"parameter change accepted: sync.slop_s := {v}" in log, log
    assert log.count("parameter change rejected: sync.slop_s") == 5, log
    assert ("parameter change accepted: sync.camera_timeout_s := 0.2, "
            "output.bev_dtype := 'float16'") in log, log


def test_diagnostics_survive_a_backend_that_cannot_describe_itself(ros_context):
    """The pooling thread re-prepares the backend on a calibration change while the diagnostics
    timer asks it to describe itself: a half-prepared backend must not take the node down."""
    node = make_node(ros_context)
    try:
        def broken():
            raise AttributeError("'NoneType' object has no attribute 'host_memory'")

        node.backend.describe = broken
        d = node.snapshot()
        assert "AttributeError" in d["describe_error"] and d["backend"] == "cpu"
    finally:
        node.destroy_node()
