"""The whole chain over real DDS: synthetic cameras -> bevpool_node -> bev/features ->
bevpool_occupancy -> occupancy/grid (its own module: no other occupancy node in the domain)."""
from __future__ import annotations

import numpy as np
import pytest
from test_occupancy import coverage_from_points, expected_grid


@pytest.mark.ros
def test_chain_from_bevpool_node_to_the_grid(nuscenes_rig):
    """Synthetic cameras -> bevpool_node -> bev/features -> bevpool_occupancy -> occupancy/grid,
    the grid checked against the long-hand score of the very BEV the node published."""
    from nav_msgs.msg import OccupancyGrid
    from ros_harness import RosGraph

    from bevpool_ros.demo.session import NodeProcess
    from bevpool_ros.io.bev_message import stamp_to_ns
    from bevpool_ros.ros.qos import make_qos

    g = RosGraph({"backend": "cpu", "output.bev_dtype": "float16"})
    from conftest import NUSCENES_RIG

    occ = NodeProcess({"rig_file": str(NUSCENES_RIG)}, module="bevpool_ros.occupancy.node")
    grids = {}
    try:
        g.con.create_subscription(OccupancyGrid, "occupancy/grid",
                                  lambda m: grids.__setitem__(stamp_to_ns(m.header.stamp), m), make_qos("reliable", 10))
        # the occupancy node publishes its grid topic and subscribes to bev/features (beside our consumer)
        assert g.spin_until(lambda: g.con.count_publishers("occupancy/grid") > 0 and
                            g.con.count_subscribers("bev/features") >= 2, 30.0), occ.output()
        for _ in range(20):  # the occupancy node may join after the first grids: publish until one is scored
            got = g.publish_and_wait(2)
            if got is not None and g.spin_until(lambda: got.stamp_ns in grids, 2.0):
                break
        msg = grids[got.stamp_ns]
        Y, X = nuscenes_rig.grid_shape[1:]
        want = expected_grid(got.bev, coverage_from_points(nuscenes_rig, list(got.msg.cameras)))
        np.testing.assert_array_equal(np.asarray(msg.data, np.int8).reshape(Y, X), want)
        assert (want > 0).sum() > 100  # the synthetic objects show up as occupied cells
    finally:
        rc, log = occ.stop()
        assert rc == 0, log
        assert g.close() == 0


@pytest.mark.ros
def test_a_custom_rig_needs_no_rig_in_the_occupancy_node(tmp_path):
    """bevpool_node on a rig of the user's (4 cameras, 2 layers, its own grid); a bevpool_occupancy
    without any rig (as launched with occupancy:=true) at ground_z 0.3 m, one given that rig: both
    publish every grid (no grid_mismatch), the first with the coverage the BEV itself carries, the
    second with the rig's exact per-camera coverage, each at its ground height."""
    import rig_variants as V
    from nav_msgs.msg import OccupancyGrid
    from ros_harness import isolate_ros_env

    from bevpool_ros.demo.session import NodeProcess, PipelineSession
    from bevpool_ros.io.bev_message import stamp_to_ns
    from bevpool_ros.occupancy.grid import written_columns
    from bevpool_ros.ros.qos import make_qos

    path = V.write_rig("quad_c64_d40_z2", tmp_path)
    rig = V.rig("quad_c64_d40_z2")
    isolate_ros_env()
    g = PipelineSession(str(path), {"output.bev_dtype": "float16"})
    nodes = {"grid": NodeProcess({"ground_z": 0.3}, module="bevpool_ros.occupancy.node"),
             "rig": NodeProcess({"rig_file": str(path), "output_topic": "occupancy/grid_rig"},
                                module="bevpool_ros.occupancy.node")}
    grids = {"grid": {}, "rig": {}}
    try:
        for key, topic in (("grid", "occupancy/grid"), ("rig", "occupancy/grid_rig")):
            g.con.create_subscription(OccupancyGrid, topic, lambda m, k=key: grids[k].__setitem__(
                stamp_to_ns(m.header.stamp), m), make_qos("reliable", 10))
        # a loaded machine may take tens of seconds to start three nodes: wait for the graph itself
        assert g.spin_until(lambda: g.pub.subscribers_matched() and g.con.publisher_matched() and
                            g.con.count_publishers("occupancy/grid") > 0 and
                            g.con.count_publishers("occupancy/grid_rig") > 0 and
                            g.con.count_subscribers("bev/features") >= 3, 120.0), \
            [n.output()[-2000:] for n in (g.node, *nodes.values())]
        got, stamp = None, 1_000 * 10**9
        for _ in range(30):  # readers may match after the first sets: publish until both score one
            stamp += 10**8
            g.pub.publish_frame(2, stamp)
            if g.spin_until(lambda: stamp in g.con.by_stamp() and all(stamp in v for v in
                                                                      grids.values()), 3.0):
                got = g.con.by_stamp()[stamp]
                break
        assert got is not None, [n.output()[-2000:] for n in (g.node, *nodes.values())]
        Z, Y, X = rig.grid_shape
        assert got.msg.origin.z == pytest.approx(rig.z.lower) and Z == 2
        own = written_columns(got.bev)
        exact = coverage_from_points(rig, list(got.msg.cameras))
        assert own.any() and not (own & ~exact).any()  # the BEV's own coverage: inside the rig's
        for key, covered, z in (("grid", own, 0.3), ("rig", exact, 0.0)):
            msg = grids[key][got.stamp_ns]
            info = msg.info
            assert (info.width, info.height, info.resolution) == (X, Y, pytest.approx(rig.x.step))
            origin = info.origin.position
            assert (origin.x, origin.y, origin.z) == pytest.approx((rig.x.lower, rig.y.lower, z))
            np.testing.assert_array_equal(np.asarray(msg.data, np.int8).reshape(Y, X),
                                          expected_grid(got.bev, covered), err_msg=key)
    finally:
        for node in nodes.values():
            rc, log = node.stop()
            assert rc == 0 and "grid_mismatch" not in log, log[-3000:]
        assert g.close()[0] == 0
