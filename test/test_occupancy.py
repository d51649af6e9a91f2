"""bevpool_occupancy: the score against a plain numpy computation, coverage against the frustum
points themselves, and the node over real DDS (float16 and float32 grids, zero-filled cameras,
every bad-input case dropped and counted while the node keeps publishing)."""
from __future__ import annotations

import numpy as np
import pytest

from bevpool_ros.occupancy.grid import CameraCoverage, ScoreParams, cell_energy, occupancy_values
from bevpool_ros.scatter_map import frustum_points_ego, scatter_map_for


def expected_grid(bev, covered, scale=0.0, percentile=99.0, threshold=0.05):
    """The documented score, written out long-hand."""
    f = bev.astype(np.float64)
    Z, Y, X, C = f.shape
    energy = (f ** 2).sum(axis=(0, 3)) / (Z * C)
    if scale <= 0:
        pos = energy[covered & (energy > 0)]
        scale = np.percentile(pos, percentile) if pos.size else 0.0
    out = np.zeros((Y, X), np.int8)
    for y in range(Y):
        for x in range(X):
            s = min(energy[y, x] / scale, 1.0) if scale > 0 else 0.0
            out[y, x] = -1 if not covered[y, x] else (0 if s < threshold else int(np.rint(100 * s)))
    return out


def coverage_from_points(rig, cameras):
    """Columns (y, x) holding a frustum point of one of ``cameras`` (independent of the ranks)."""
    pts = frustum_points_ego(rig)
    Z, Y, X = rig.grid_shape
    covered = np.zeros((Y, X), bool)
    for n, cam in enumerate(rig.cameras):
        if cam.name not in cameras:
            continue
        p = pts[n].reshape(-1, 3)
        ix = np.floor((p[:, 0] - rig.x.lower) / rig.x.step).astype(int)
        iy = np.floor((p[:, 1] - rig.y.lower) / rig.y.step).astype(int)
        iz = np.floor((p[:, 2] - rig.z.lower) / rig.z.step).astype(int)
        ok = (ix >= 0) & (ix < X) & (iy >= 0) & (iy < Y) & (iz >= 0) & (iz < Z)
        covered[iy[ok], ix[ok]] = True
    return covered


def random_bev(rig, seed=0, hot=True):
    rng = np.random.default_rng(seed)
    Z, Y, X = rig.grid_shape
    bev = rng.standard_normal((Z, Y, X, rig.channels)).astype(np.float32)
    bev[:, rng.random((Y, X)) < 0.3] = 0.0  # empty cells
    if hot:
        bev[0, Y // 2, X // 3] = 500.0      # one hot cell must not flatten the rest
    return bev


@pytest.fixture(scope="module")
def coverage(nuscenes_rig):
    return CameraCoverage(scatter_map_for(nuscenes_rig), [c.name for c in nuscenes_rig.cameras])


def test_energy_and_values_match_the_long_hand_score(nuscenes_rig):
    bev = random_bev(nuscenes_rig)
    covered = np.random.default_rng(1).random(bev.shape[1:3]) < 0.8
    np.testing.assert_allclose(cell_energy(bev), (bev.astype(np.float64) ** 2).mean(axis=(0, 3)), rtol=1e-12)
    for params in (ScoreParams(), ScoreParams(energy_scale=2.0, threshold=0.2), ScoreParams(scale_percentile=50)):
        got = occupancy_values(cell_energy(bev), covered, params)
        want = expected_grid(bev, covered, params.energy_scale, params.scale_percentile, params.threshold)
        np.testing.assert_array_equal(got, want)
        assert got.min() >= -1 and got.max() <= 100
    # the hot cell saturates; most other occupied cells stay visible (not flattened to 0)
    got = occupancy_values(cell_energy(bev), None, ScoreParams())
    assert got[bev.shape[1] // 2, bev.shape[2] // 3] == 100 and (got > 0).mean() > 0.5


def test_all_zero_grid_is_free_not_nan(nuscenes_rig):
    Z, Y, X = nuscenes_rig.grid_shape
    got = occupancy_values(np.zeros((Y, X)), None, ScoreParams())
    assert (got == 0).all()


def test_score_parameters_are_checked():
    assert ScoreParams().check() == []
    errors = ScoreParams(energy_scale=-1, scale_percentile=0, threshold=2).check()
    assert len(errors) == 3


def test_coverage_matches_the_frustum_points(nuscenes_rig, coverage):
    names = [c.name for c in nuscenes_rig.cameras]
    np.testing.assert_array_equal(coverage.covered(names), coverage_from_points(nuscenes_rig, names))
    one = coverage.covered(["CAM_FRONT"])
    np.testing.assert_array_equal(one, coverage_from_points(nuscenes_rig, ["CAM_FRONT"]))
    assert 0 < one.sum() < coverage.covered(names).sum()
    assert not coverage.covered([]).any()


# --- the node over DDS -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def occupancy_graph(nuscenes_rig):
    from ros_harness import isolate_ros_env, spin_until

    from bevpool_ros.demo.session import NodeProcess

    isolate_ros_env()
    import rclpy
    from bevpool_msgs.msg import BevFeature
    from conftest import NUSCENES_RIG
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import OccupancyGrid
    from rclpy.executors import SingleThreadedExecutor

    from bevpool_ros.ros.qos import make_qos

    node = NodeProcess({"diagnostics_period_s": 0.2, "rig_file": str(NUSCENES_RIG)},
                       module="bevpool_ros.occupancy.node")
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    test_node = rclpy.create_node("occupancy_test", context=ctx)
    ex.add_node(test_node)
    g = type("G", (), {})()
    g.grids, g.diags, g.node, g.rig = {}, [], node, nuscenes_rig
    qos = make_qos("reliable", 10)
    g.pub = test_node.create_publisher(BevFeature, "bev/features", qos)
    test_node.create_subscription(OccupancyGrid, "occupancy/grid",
                                  lambda m: g.grids.__setitem__(m.header.stamp.sec, m), qos)
    test_node.create_subscription(DiagnosticArray, "/diagnostics", g.diags.append, 10)
    g.spin_until = lambda pred, t=20.0: spin_until(ex, pred, t)
    ok = g.spin_until(lambda: g.pub.get_subscription_count() > 0 and
                      test_node.count_publishers("occupancy/grid") > 0)
    assert ok, node.output()
    yield g
    rc, log = node.stop()
    assert rc == 0, log
    ex.shutdown()
    test_node.destroy_node()
    rclpy.try_shutdown(context=ctx)


def _bev_msg(rig, bev, sec, dtype="float32", cameras=None, **edit):
    from bevpool_ros.io.bev_message import bev_feature_msg

    names = [c.name for c in rig.cameras]
    cameras = names if cameras is None else cameras
    m = bev_feature_msg(bev, rig, sec * 1_000_000_000, "base_link", cameras, [sec * 10 ** 9] * len(cameras),
                        [n for n in names if n not in cameras], "cpu", "fp32", dtype=dtype)
    for k, v in edit.items():
        obj, _, attr = k.rpartition("__")
        setattr(getattr(m, obj) if obj else m, attr, v)
    return m


def _publish_and_get(g, msg, sec, timeout=20.0):
    g.pub.publish(msg)
    g.spin_until(lambda: sec in g.grids, timeout)
    return g.grids.get(sec)


@pytest.mark.ros
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_grid_over_dds_matches_numpy(occupancy_graph, dtype):
    g, rig = occupancy_graph, occupancy_graph.rig
    sec = {"float32": 10, "float16": 11}[dtype]
    bev = random_bev(rig, seed=sec)
    msg = _publish_and_get(g, _bev_msg(rig, bev, sec, dtype), sec)
    assert msg is not None, g.node.output()
    Z, Y, X = rig.grid_shape
    assert (msg.info.width, msg.info.height) == (X, Y)
    assert msg.header.frame_id == "base_link"
    assert msg.info.resolution == pytest.approx(rig.x.step)
    assert (msg.info.origin.position.x, msg.info.origin.position.y) == pytest.approx((rig.x.lower, rig.y.lower))
    assert msg.info.origin.position.z == 0.0 and rig.z.lower == -5.0  # the ground, not the floor
    assert msg.info.origin.orientation.w == 1.0
    wire = bev.astype(np.float16) if dtype == "float16" else bev
    names = [c.name for c in rig.cameras]
    want = expected_grid(wire, coverage_from_points(rig, names))
    np.testing.assert_array_equal(np.asarray(msg.data, np.int8).reshape(Y, X), want)


@pytest.mark.ros
def test_zero_filled_cameras_leave_their_cells_unknown(occupancy_graph):
    g, rig = occupancy_graph, occupancy_graph.rig
    present = [c.name for c in rig.cameras if c.name != "CAM_BACK"]
    msg = _publish_and_get(g, _bev_msg(rig, random_bev(rig, 3), 12, cameras=present), 12)
    Y, X = rig.grid_shape[1:]
    got = np.asarray(msg.data, np.int8).reshape(Y, X)
    covered = coverage_from_points(rig, present)
    assert ((got == -1) == ~covered).all()
    assert (~covered & coverage_from_points(rig, ["CAM_BACK"])).any()  # CAM_BACK's own cells went unknown


BAD_GRIDS = [
    ("non_finite", "nan"),
    ("bad_layout", {"layout": "YXC"}),
    ("bad_layout", {"layout": "Q" * 1_000_000}),
    ("non_square_cells", {"resolution_y": 0.5}),
    ("bad_shape", {"channels": 7}),
    ("bad_size", "truncated"),
]


@pytest.mark.ros
@pytest.mark.parametrize("reason, edit", BAD_GRIDS)
def test_bad_grids_are_dropped_counted_and_the_node_goes_on(occupancy_graph, reason, edit):
    from bevpool_ros.ros.diagnostics import status_values

    g, rig = occupancy_graph, occupancy_graph.rig
    sec = 100 + 2 * [e for _, e in BAD_GRIDS].index(edit)
    bev = random_bev(rig, sec)
    if edit == "nan":
        bev[0, 5, 5, 0] = np.nan
        msg = _bev_msg(rig, bev, sec)
    elif edit == "truncated":
        msg = _bev_msg(rig, bev, sec)
        msg.tensor.data = msg.tensor.data[:-4]
    else:
        msg = _bev_msg(rig, bev, sec, **edit)
    g.pub.publish(msg)
    g.diags.clear()

    def counted():
        return any(status_values(d).get(f"dropped_{reason}", "0") != "0" for d in g.diags)
    assert g.spin_until(counted), (reason, g.node.output()[-2000:])
    assert sec not in g.grids
    assert g.node.alive()
    assert max(map(len, g.node.output().splitlines())) < 1000  # input text is cut in log lines
    assert _publish_and_get(g, _bev_msg(rig, np.ones_like(bev), sec + 1), sec + 1) is not None  # still serving


@pytest.mark.ros
def test_a_grid_that_is_not_the_rigs_is_scored_with_its_own_coverage(occupancy_graph):
    """The rig is an optional extra: a BEV of another grid (or cameras the rig lacks) is published,
    unknown cells from its own zero columns, counted as rig_mismatch, never dropped."""
    from bevpool_ros.occupancy.grid import written_columns
    from bevpool_ros.ros.diagnostics import status_values

    g, rig = occupancy_graph, occupancy_graph.rig
    for sec, edit in ((60, {"origin__x": -40.0}), (62, {"cameras": ["CAM_FRONT", "CAM_ROOF"]})):
        bev = random_bev(rig, sec)
        msg = _bev_msg(rig, bev, sec, cameras=edit.pop("cameras", None), **edit)
        got = _publish_and_get(g, msg, sec)
        assert got is not None, g.node.output()[-2000:]
        Y, X = rig.grid_shape[1:]
        np.testing.assert_array_equal(np.asarray(got.data, np.int8).reshape(Y, X),
                                      expected_grid(bev, written_columns(bev)))
        assert (np.asarray(got.data) == -1).any()  # random_bev's empty columns
    g.diags.clear()
    assert g.spin_until(lambda: any(int(status_values(d).get("rig_mismatch", 0)) >= 2
                                    for d in g.diags))
    assert all("dropped_grid_mismatch" not in status_values(d) for d in g.diags)


@pytest.mark.ros
def test_bad_parameters_exit_with_code_2():
    from ros_harness import isolate_ros_env

    from bevpool_ros.demo.session import NodeProcess

    isolate_ros_env()
    node = NodeProcess({"threshold": 1.5}, module="bevpool_ros.occupancy.node")
    assert node.proc.wait(60) == 2
    assert "threshold" in node.stop()[1]
    node = NodeProcess({"rig_file": "/nonexistent/rig.yaml"}, module="bevpool_ros.occupancy.node")
    assert node.proc.wait(60) == 2
    assert "rig_file: /nonexistent/rig.yaml does not exist" in node.stop()[1]

