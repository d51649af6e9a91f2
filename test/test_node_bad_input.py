"""Bad input against a live bevpool_node (separate process, real Fast DDS).

Every case: the set is dropped and counted (diagnostics), a throttled warning is logged, the
node stays alive, nothing wrong is published, and the next good set is published correctly.
"""
from __future__ import annotations

import bevpool_msgs.msg  # noqa: E402,F401  (built by scripts/build_msgs.sh; missing = a real failure)
import numpy as np
import pytest
from ros_harness import RosGraph, assert_bev_matches  # noqa: E402

from bevpool_ros.demo.session import resident_mib  # noqa: E402
from bevpool_ros.demo.synthetic_publisher import camera_info_msg  # noqa: E402
from bevpool_ros.io.tensor_codec import make_camera_tensor  # noqa: E402
from bevpool_ros.reference import pool_reference  # noqa: E402
from bevpool_ros.scatter_map import build_scatter_map  # noqa: E402

pytestmark = pytest.mark.ros
CAM = "CAM_FRONT_LEFT"
TIMEOUT_S = 0.3


@pytest.fixture(scope="module")
def graph():
    g = RosGraph({"diagnostics.period_s": 0.1, "sync.camera_timeout_s": TIMEOUT_S,
                  "input.qos_reliability": "reliable", "input.max_tensor_bytes": 8 << 20,
                  "log_throttle_s": 0.5})
    yield g
    assert g.close() == 0


@pytest.fixture(scope="module")
def smap(graph):
    return build_scatter_map(graph.rig)


def good_frame_still_works(graph, smap, index=0):
    got = graph.publish_and_wait(index)
    assert got is not None, graph.node.output()[-3000:]
    depth, feat = graph.pub.arrays(index)
    assert_bev_matches(got.bev, pool_reference(depth, feat, smap), got.msg)
    assert graph.node.alive()


def counters(graph):
    return graph.diagnostics_where(lambda d: True) or {}


def expect_dropped(graph, smap, key, send, extra_keys=("sync_incomplete_timeout",), tries=5):
    """Run ``send(stamp)`` (again, with a fresh stamp, until counted: the first test of a module
    may send before the node has matched the publisher); the counter ``key`` (and extra_keys)
    must grow, no stamp sent ever appear."""
    before = counters(graph)
    keys, sent, after = (key, *extra_keys), [], None
    for _ in range(tries):
        stamp = graph.next_stamp()
        sent.append(stamp)
        send(stamp)
        after = graph.diagnostics_where(
            lambda d: all(graph.counter(d, k) > graph.counter(before, k) for k in keys), 4.0)
        if after is not None:
            break
    assert after is not None, f"{keys} never counted; node output:\n{graph.node.output()[-3000:]}"
    assert not set(sent) & set(graph.con.by_stamp()), "a bad set was published"
    assert f"dropped ({key.removeprefix('dropped_')})" in graph.node.output()  # every drop is logged
    good_frame_still_works(graph, smap)
    return after


def bad_tensor_case(graph, smap, key, msg, stream="feat"):
    return expect_dropped(graph, smap, key, lambda s: graph.pub.publish_frame(0, s, replace={(CAM, stream): msg}))


def test_wrong_shape(graph, smap):
    _, H, W, C = graph.rig.depth_shape[0], *graph.pub.arrays(0)[1].shape[1:]
    bad_tensor_case(graph, smap, "dropped_bad_shape",
                    make_camera_tensor(np.zeros((H, W - 1, C), np.float32), "feat", "HWC"))
    bad_tensor_case(graph, smap, "dropped_bad_shape",
                    make_camera_tensor(np.zeros((3, H, W), np.float32), "depth", "DHW"),
                    stream="depth")


@pytest.mark.parametrize("layout", ["XYZ", "HWC", "dhw"])
def test_depth_with_a_wrong_layout(graph, smap, layout):
    depth = graph.pub.arrays(0)[0][2]
    bad_tensor_case(graph, smap, "dropped_bad_layout", make_camera_tensor(depth, "depth", layout), stream="depth")


def test_huge_layout_string_costs_one_short_log_line(graph, smap):
    feat = graph.pub.arrays(0)[1][2]
    msg = make_camera_tensor(feat, "feat", "HWC")
    msg.layout = "Q" * (1 << 20)  # 1 MB
    bad_tensor_case(graph, smap, "dropped_bad_shape", msg)
    lines = [line for line in graph.node.output().splitlines() if "QQQQ" in line]
    assert lines and max(map(len, lines)) <= 400, max(map(len, lines))


def test_wrong_dtype(graph, smap):
    _, _, H, W = graph.rig.depth_shape
    bad_tensor_case(graph, smap, "dropped_bad_dtype",
                    make_camera_tensor(np.zeros((H, W, graph.rig.channels), np.int32), "feat", "HWC"))


def test_wrong_byte_count(graph, smap):
    msg = make_camera_tensor(graph.pub.arrays(0)[1][2], "feat", "HWC")
    msg.data = msg.data[:-4]
    bad_tensor_case(graph, smap, "dropped_bad_size", msg)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite(graph, smap, value):
    depth = graph.pub.arrays(0)[0][2].copy()
    depth[3, 4, 5] = value
    bad_tensor_case(graph, smap, "dropped_non_finite", make_camera_tensor(depth, "depth", "DHW"), stream="depth")


@pytest.mark.parametrize("value", [-1.0, 1e30])
def test_depth_outside_a_distribution(graph, smap, value):
    depth = graph.pub.arrays(0)[0][2].copy()
    depth[3, 4, 5] = value
    bad_tensor_case(graph, smap, "dropped_depth_out_of_range", make_camera_tensor(depth, "depth", "DHW"),
                    stream="depth")


def test_depth_range_check_can_be_turned_off(graph, smap):
    set_params(graph, **{"input.check_depth_range": False})
    try:
        depth, feat = graph.pub.arrays(0)
        bad = depth[2].copy()
        bad[3, 4, 5] = 2.0
        got = graph.publish_and_wait(0, replace={(CAM, "depth"): make_camera_tensor(bad, "depth", "DHW")})
        assert got is not None, graph.node.output()[-2000:]
        depth = depth.copy()
        depth[2] = bad
        assert_bev_matches(got.bev, pool_reference(depth, feat, smap), got.msg)
    finally:
        set_params(graph, **{"input.check_depth_range": True})


def test_stamp_zero_and_stamps_from_the_future(graph, smap):
    import time

    expect_dropped(graph, smap, "dropped_stamp_zero", lambda s: graph.pub.publish_frame(0, 0), extra_keys=())
    day = 86400 * 10**9
    expect_dropped(graph, smap, "dropped_stamp_in_future",
                   lambda s: graph.pub.publish_frame(0, time.time_ns() + day), extra_keys=())


def test_one_camera_jumping_back_does_not_reset_the_others(graph, smap):
    before = counters(graph)
    stamp = graph.next_stamp()
    graph.pub.publish_frame(0, stamp, stamp_offsets_ns={CAM: -5 * 10**9})  # one producer's clock is off
    good_frame_still_works(graph, smap)                                     # CAM goes on normally
    after = graph.diagnostics_where(lambda d: graph.counter(d, "sync_stray_stamp")
                                    >= graph.counter(before, "sync_stray_stamp") + 2)
    assert after is not None, counters(graph)
    assert graph.counter(after, "sync_clock_reset") == graph.counter(before, "sync_clock_reset")
    assert graph.counter(after, "sync_discarded_on_reset") == graph.counter(before, "sync_discarded_on_reset")
    assert "dropped (sync_stray_stamp)" in graph.node.output()


def test_tensor_larger_than_the_maximum(graph, smap):
    _, _, H, W = graph.rig.depth_shape
    big = make_camera_tensor(np.zeros((1, 1, 1), np.float32), "feat", "HWC")
    big.shape = [H, W, 1 << 20]  # claims 2.9 GB; refused on the header, the payload is never read
    bad_tensor_case(graph, smap, "dropped_too_large", big)
    real = make_camera_tensor(np.zeros((3 * 1024 * 1024,), np.float32), "feat", "")  # 12 MiB > 8 MiB limit
    bad_tensor_case(graph, smap, "dropped_too_large", real)


def test_missing_camera_is_dropped_under_the_drop_policy(graph, smap):
    after = expect_dropped(graph, smap, "sync_incomplete_timeout", lambda s: graph.pub.publish_frame(0, s, skip=(CAM,)),
                           extra_keys=(f"missing_{CAM}",))
    assert after["level"] == 1  # WARN while drops happen


def set_params(graph, **kv):
    assert all(r.successful for r in graph.set_parameters(**kv))


def test_missing_camera_zero_fill_policy(graph, smap):
    def set_(**kv):
        set_params(graph, **{k.replace("__", "."): v for k, v in kv.items()})

    set_(sync__missing_camera_policy="zero_fill", sync__min_cameras=5)
    try:
        got = graph.publish_and_wait(1, skip=(CAM,))
        assert got is not None, graph.node.output()[-3000:]
        assert list(got.msg.missing_cameras) == [CAM] and CAM not in got.msg.cameras
        depth, feat = graph.pub.arrays(1)
        n = [c.name for c in graph.rig.cameras].index(CAM)
        depth = depth.copy()
        depth[n] = 0
        assert_bev_matches(got.bev, pool_reference(depth, feat, smap), got.msg)
        # two cameras missing < min_cameras: dropped after all
        expect_dropped(graph, smap, "sync_incomplete_timeout",
                       lambda s: graph.pub.publish_frame(1, s, skip=(CAM, "CAM_BACK")), extra_keys=())
    finally:
        set_(sync__missing_camera_policy="drop", sync__min_cameras=1)


def test_late_camera_within_the_timeout_still_completes_the_set(graph, smap):
    def send(stamp):
        graph.pub.publish_frame(2, stamp, skip=(CAM,))
        graph.spin_until(lambda: False, TIMEOUT_S / 3)  # the stimulus: CAM arrives 100 ms late
        graph.pub.publish_frame(2, stamp, skip=tuple(c.name for c in graph.rig.cameras if c.name != CAM))
    got = graph.send_until_grid(send)  # a loaded machine may stretch 100 ms past the timeout: resend
    assert got is not None and got.msg.missing_cameras == []


def test_duplicate_stamps(graph, smap):
    got = graph.send_until_grid(lambda s: graph.pub.publish_frame(0, s), newest=True)
    assert got is not None  # the newest stamp sent came back: every stream's newest is its stamp
    stamp = got.stamp_ns
    before = counters(graph)
    n_before = graph.con.count
    graph.pub.publish_frame(0, stamp)  # the very same set again
    after = graph.diagnostics_where(lambda d: graph.counter(d, "sync_duplicate")
                                    >= graph.counter(before, "sync_duplicate") + 12)
    assert after is not None and graph.con.count == n_before
    assert "dropped (sync_duplicate)" in graph.node.output()
    good_frame_still_works(graph, smap)


def test_out_of_order_and_late_stamps(graph, smap):
    got = graph.send_until_grid(lambda s: graph.pub.publish_frame(0, s), newest=True)
    assert got is not None
    s1 = got.stamp_ns - 1  # older than what every stream already delivered
    before = counters(graph)
    graph.pub.publish_frame(0, s1)  # older than what every stream already delivered
    after = graph.diagnostics_where(lambda d: graph.counter(d, "sync_out_of_order")
                                    >= graph.counter(before, "sync_out_of_order") + 12)
    assert after is not None and s1 not in graph.con.by_stamp()
    assert "dropped (sync_out_of_order)" in graph.node.output()
    # late: CAM skips s3 (so its stream is older), s3 times out, then CAM's s3 straggles in
    s3 = graph.next_stamp()
    before = counters(graph)
    graph.pub.publish_frame(0, s3, skip=(CAM,))
    assert graph.diagnostics_where(lambda d: graph.counter(d, "sync_incomplete_timeout")
                                   > graph.counter(before, "sync_incomplete_timeout"))
    graph.pub.publish_frame(0, s3, skip=tuple(c.name for c in graph.rig.cameras if c.name != CAM))
    assert graph.diagnostics_where(lambda d: graph.counter(d, "sync_late") >= graph.counter(before, "sync_late") + 2)
    assert s3 not in graph.con.by_stamp()
    assert "dropped (sync_late)" in graph.node.output()
    good_frame_still_works(graph, smap)


def wait_counter(graph, key, before):
    return graph.diagnostics_where(lambda d: graph.counter(d, key) > graph.counter(before, key))


def test_calibration_change_mid_stream_rebuilds_the_map(graph, smap):
    from dataclasses import replace as dc_replace

    n = [c.name for c in graph.rig.cameras].index(CAM)
    cam = graph.rig.cameras[n]
    K = np.array(cam.K)
    K[0, 0] *= 1.15
    K[1, 1] *= 1.15
    new_rig = graph.rig.with_cameras([dc_replace(c, K=K) if c.name == CAM else c for c in graph.rig.cameras])
    before = counters(graph)
    try:
        graph.pub.pubs[(CAM, "camera_info")].publish(camera_info_msg(new_rig, n,
                                                                     graph.pub.get_clock().now().to_msg(), "x"))
        assert wait_counter(graph, "calibration_changes", before)
        got = graph.publish_and_wait(3, camera_info=False)
        assert got is not None, graph.node.output()[-3000:]
        depth, feat = graph.pub.arrays(3)
        ref = pool_reference(depth, feat, build_scatter_map(new_rig))
        assert_bev_matches(got.bev, ref, got.msg)
        old = pool_reference(depth, feat, smap)
        assert np.abs(ref - old).max() > 0.1 * np.abs(ref).max()  # the two maps really differ here
        assert np.abs(got.bev - ref).max() < np.abs(got.bev - old).max()  # and the node used the new one
        assert wait_counter(graph, "scatter_map_rebuilds", before)
    finally:  # back to the rig calibration (CameraInfo on every later frame does it too)
        graph.pub.pubs[(CAM, "camera_info")].publish(camera_info_msg(graph.rig, n,
                                                                     graph.pub.get_clock().now().to_msg(), "x"))
        good_frame_still_works(graph, smap)


def _no_focal_length(info):
    info.k[0] = 0.0


def _small_image(info):  # K of the 1600x900 camera, sent with another camera's size
    info.width, info.height = 640, 480


def _absurd_size(size):
    def change(info):
        info.width = info.height = size
    return change


@pytest.mark.parametrize("change, why", [
    (_no_focal_length, "singular or non-positive focal length"),
    (_small_image, "is not in the middle half of a 640x480 image"),
    (_absurd_size(10**9), "is not in the middle half of a 1000000000x1000000000 image"),
    (_absurd_size(2**31 - 1), "is not in the middle half of a 2147483647x2147483647 image"),
], ids=["fx_zero", "k_of_another_size", "1e9_pixels", "2^31-1_pixels"])
def test_camera_info_that_cannot_be_is_refused_never_turned_into_a_map(graph, smap, change, why):
    """Refused and counted, the camera's sets dropped (ERROR) until a usable CameraInfo comes; never
    a new scatter map (an image of another size with consistent intrinsics stays accepted: the
    rig's resize and crop are scaled to it, test_node_foreign_rigs.py)."""
    n = [c.name for c in graph.rig.cameras].index(CAM)
    before = counters(graph)
    info = camera_info_msg(graph.rig, n, graph.pub.get_clock().now().to_msg(), "x")
    change(info)
    graph.pub.pubs[(CAM, "camera_info")].publish(info)
    d = graph.diagnostics_where(lambda d: graph.counter(d, "dropped_camera_info_rejected")
                                > graph.counter(before, "dropped_camera_info_rejected"))
    assert d is not None and d["level"] == 2 and f"invalid_calibration_{CAM}" in d  # ERROR
    assert why in d[f"invalid_calibration_{CAM}"], d[f"invalid_calibration_{CAM}"]
    assert graph.counter(d, "scatter_map_rebuilds") == graph.counter(before, "scatter_map_rebuilds")
    stamp = graph.pub.publish_frame(0, graph.next_stamp(), camera_info=False)
    assert wait_counter(graph, "dropped_calibration_invalid", before)
    assert stamp not in graph.con.by_stamp()
    assert f"{CAM}: CameraInfo rejected, sets of this camera dropped until a usable one arrives" \
        in graph.node.output()
    good_frame_still_works(graph, smap)  # its CameraInfo restores a consistent calibration


def test_flood_on_every_input(graph, smap):
    """Hundreds of tensors and CameraInfos on every topic as fast as Python publishes them."""
    from rclpy.parameter_client import AsyncParameterClient

    good_frame_still_works(graph, smap)
    rss_before = resident_mib(graph.node.proc.pid)
    before = counters(graph)
    client = AsyncParameterClient(graph.con, "bevpool_node")
    assert client.wait_for_services(timeout_sec=20.0)
    garbage = make_camera_tensor(np.zeros(7, np.float32), "feat", "")
    for i in range(80):
        s = graph.next_stamp(step_ms=1)
        graph.pub.publish_frame(i, s, replace={(CAM, "feat"): garbage} if i % 4 == 0 else None)
        if i % 10 == 0:  # the node must answer services while flooded
            fut = client.get_parameters(["sync.slop_s"])
            assert graph.spin_until(fut.done, 10), "parameter service unresponsive during the flood"
    after = graph.diagnostics_where(lambda d: graph.counter(d, "dropped_bad_shape")
                                    > graph.counter(before, "dropped_bad_shape")
                                    and int(d.get("pending_sets", 99)) == 0, timeout=20)
    assert after is not None, (str(counters(graph)), graph.node.output()[-3000:])
    drops = sum(int(v) - graph.counter(before, k) for k, v in after.items()
                if k.startswith(("dropped_", "sync_incomplete", "sync_evicted", "sync_superseded", "sync_late")))
    assert drops > 0
    assert int(after["pending_sets"]) <= 4 and int(after["worker_queue"]) <= 2
    grew_mib = resident_mib(graph.node.proc.pid) - rss_before
    assert grew_mib < 400, f"node memory grew by {grew_mib:.0f} MiB during the flood"
    good_frame_still_works(graph, smap)
