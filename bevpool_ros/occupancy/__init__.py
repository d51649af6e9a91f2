"""A downstream consumer of bevpool_node: BevFeature -> nav_msgs/OccupancyGrid.

  grid   the score (no ROS): per-cell feature energy, normalisation, threshold, coverage -> int8 cells
  node   bevpool_occupancy (console script): subscribes bev/features, publishes occupancy/grid
"""
