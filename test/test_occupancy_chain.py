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
    from bevpool_ros.node.qos import make_qos

    g = RosGraph({"backend": "cpu", "output.bev_dtype": "float16"})
    occ = NodeProcess({}, module="bevpool_ros.occupancy.node")
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
