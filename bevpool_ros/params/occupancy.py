"""Every parameter of bevpool_occupancy in one table (the same :class:`~.table.Param` rows as
bevpool_node's): the node declares and checks from it, ``--help`` prints it, the JSON schema is
generated from it. No ROS import here."""
from __future__ import annotations

from .table import Param

PARAMS: tuple[Param, ...] = (
    Param("input_topic", "string", "bev/features", "BevFeature topic to score."),
    Param("output_topic", "string", "occupancy/grid", "nav_msgs/OccupancyGrid output topic."),
    Param("rig_file", "string", "", "Optional rig YAML of the BEV node: -1 cells from its scatter map "
          "and the message's cameras, for grids that are its grid; empty: from the grid's own zero "
          "columns."),
    Param("use_coverage", "bool", True, "Publish -1 for cells no present camera reaches."),
    Param("ground_z", "double", 0.0, "Height of the published grid in the BEV's frame, metres (the "
          "ground)."),
    Param("energy_scale", "double", 0.0, "Fixed normalisation of the cell energy; 0: per grid, from "
          "scale_percentile.", low=0.0),
    Param("scale_percentile", "double", 99.0, "Percentile, in (0, 100], of the covered cells' "
          "positive energies used as scale.", low=0.0, high=100.0),
    Param("threshold", "double", 0.05, "Normalised scores below this are published as free (0).",
          low=0.0, high=1.0),
    Param("max_tensor_bytes", "integer", 64 << 20, "Larger BEV tensors are refused before any "
          "allocation.", low=1024, high=1 << 31),
    Param("diagnostics_period_s", "double", 1.0, "Period of /diagnostics messages, seconds.",
          low=0.05, high=60.0),
)
BY_NAME = {p.name: p for p in PARAMS}
