"""bevpool_occupancy: bev/features (bevpool_msgs/BevFeature) -> occupancy/grid (nav_msgs/OccupancyGrid).

The grid takes frame, stamp, origin and resolution from each BevFeature, so RViz overlays it where
the BEV lies, at the height ``ground_z``. No rig is needed: coverage (-1 cells) comes from the
grid itself (columns the BEV node wrote nothing into), or, with ``rig_file``, from that rig's
scatter map and the cameras each message names, for the messages whose grid is that rig's. A
message that cannot be scored (bad tensor, NaN, non-square cells) is dropped, counted under its
reason and warned about (throttled); the node stays up.
"""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
from rclpy.node import Node

from ..io.tensor_codec import TensorError, inspect_header, to_float
from ..logtext import shown
from ..params import occupancy as table
from ..params.files import ParamsFileError, given_in_files, ros_params_files
from ..params.names import unknown_reason
from ..ros.diagnostics import diagnostic_array
from ..ros.qos import make_qos
from ..ros.throttle import ThrottledLog
from .grid import CameraCoverage, ScoreParams, cell_energy, occupancy_values, written_columns


class StartupError(RuntimeError):
    pass


def grid_matches_rig(msg, rig, tol: float = 1e-4) -> str | None:
    """None when the message's grid is the rig's, else what differs."""
    Z, Y, X = rig.grid_shape
    if (msg.layers, msg.height, msg.width) != (Z, Y, X):
        return f"grid {(msg.layers, msg.height, msg.width)} != rig {(Z, Y, X)}"
    got = (msg.origin.x, msg.origin.y, msg.resolution_x, msg.resolution_y)
    want = (rig.x.lower, rig.y.lower, rig.x.step, rig.y.step)
    if not np.allclose(got, want, atol=tol):
        return f"origin/resolution {got} != rig {want}"
    return None


class OccupancyNode(Node):
    def __init__(self, node_name: str = "bevpool_occupancy", params_files=(), **kwargs):
        """``params_files``: the process's --params-file files, checked with every override."""
        super().__init__(node_name, **kwargs)
        from bevpool_msgs.msg import BevFeature
        from diagnostic_msgs.msg import DiagnosticArray
        from nav_msgs.msg import OccupancyGrid

        self.cfg = self._parameters_checked([*params_files, *ros_params_files(kwargs.get("cli_args"))])
        self.score = ScoreParams(float(self.cfg["energy_scale"]), float(self.cfg["scale_percentile"]),
                                 float(self.cfg["threshold"]))
        errors = self.score.check()  # (0, 100] for the percentile: an open range the table lacks
        if errors:
            raise StartupError("; ".join(errors))
        use_rig = self.cfg["use_coverage"] and self.cfg["rig_file"]
        self.coverage, self.rig = self._load_coverage() if use_rig else (None, None)
        self.counts: Counter[str] = Counter()   # published and dropped_<reason>
        self.rig_mismatches = 0                 # grids scored with their own coverage instead
        self.warn = ThrottledLog(self.get_logger().warning)
        qos = make_qos("reliable", 2)
        self.pub = self.create_publisher(OccupancyGrid, self.cfg["output_topic"], qos)
        self.sub = self.create_subscription(BevFeature, self.cfg["input_topic"], self._on_bev, qos)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(float(self.cfg["diagnostics_period_s"]), self._publish_diagnostics)
        self.get_logger().info(f"ready: {self.cfg['input_topic']} -> {self.cfg['output_topic']} "
                               f"at z = {float(self.cfg['ground_z']):g} m, "
                               f"coverage {self.coverage_source}")

    def _parameters_checked(self, params_files) -> dict:
        """The table's parameters declared and read; StartupError (one line) for a name the node
        does not have, a params file meant for other nodes, or a value of the wrong type or range."""
        from ..ros.parameters import declare_rows, declared_names, override_names

        errors = declare_rows(self, table.PARAMS)
        try:
            in_files = given_in_files(params_files, self.get_fully_qualified_name())
        except ParamsFileError as e:
            raise StartupError(str(e)) from None
        given = {name: in_files.get(name, "-p") for name in override_names(self)}
        unknown = unknown_reason(given, declared_names(self))
        if unknown:
            raise StartupError(unknown)  # first: a misspelt name explains what follows
        cfg = {p.name: self.get_parameter(p.name).value for p in table.PARAMS} if not errors else {}
        errors += [e for p in table.PARAMS if p.name in cfg and (e := p.check(cfg[p.name]))]
        if errors:
            raise StartupError("; ".join(errors))
        return cfg

    @property
    def coverage_source(self) -> str:
        if not self.cfg["use_coverage"]:
            return "off"
        return f"from rig {self.rig.name}, else from the grid" if self.rig else "from the grid"

    def _load_coverage(self):
        from ..rig import RigError
        from ..rig_yaml import load_rig
        from ..scatter_map import scatter_map_for

        path = self.cfg["rig_file"]
        if not Path(path).is_file():
            raise StartupError(f"rig_file: {path} does not exist")
        try:
            rig = load_rig(path)
        except RigError as e:
            raise StartupError(f"rig_file: {e}") from None  # e starts with the path
        return CameraCoverage(scatter_map_for(rig), [c.name for c in rig.cameras]), rig

    def _drop(self, reason: str, detail: str) -> None:
        self.counts[reason] += 1
        self.warn(reason, f"dropped BEV grid ({reason}): {detail}")

    def _on_bev(self, msg) -> None:
        try:
            values = self.values_for(msg)
        except TensorError as e:
            return self._drop(e.reason, e.detail)
        self.pub.publish(occupancy_grid_msg(msg, values, float(self.cfg["ground_z"])))
        self.counts["published"] += 1

    def values_for(self, msg) -> np.ndarray:
        """int8 [Y, X] for one BevFeature; raises TensorError naming the drop reason."""
        if msg.layout != "ZYXC":
            raise TensorError("bad_layout", f"layout {shown(msg.layout)}, expected ZYXC")
        if not np.isclose(msg.resolution_x, msg.resolution_y) or msg.resolution_x <= 0:
            raise TensorError("non_square_cells", f"resolution {msg.resolution_x} x {msg.resolution_y} m")
        header = inspect_header(msg.tensor, int(self.cfg["max_tensor_bytes"]))
        shape = (msg.layers, msg.height, msg.width, msg.channels)
        if header.shape != shape:
            raise TensorError("bad_shape", f"tensor {list(header.shape)} != grid {list(shape)}")
        bev = to_float(msg.tensor, header, check_finite=True)
        covered = self.covered(msg, bev) if self.cfg["use_coverage"] else None
        return occupancy_values(cell_energy(bev), covered, self.score)

    def covered(self, msg, bev: np.ndarray) -> np.ndarray:
        """[Y, X] bool: the rig's coverage of the present cameras when the grid is the rig's (and
        it knows every camera), else the columns the grid itself holds values in."""
        if self.coverage is not None:
            mismatch = (grid_matches_rig(msg, self.rig)
                        or _unknown_cameras(msg.cameras, self.coverage.names))
            if mismatch is None:
                return self.coverage.covered(msg.cameras)
            self.rig_mismatches += 1
            self.warn("rig_mismatch", f"grid is not rig {self.rig.name}'s ({mismatch}): "
                                      f"unknown cells from the grid's own zero columns")
        return written_columns(bev)

    def _publish_diagnostics(self) -> None:
        values = {"grids_published": self.counts["published"], "coverage": self.coverage_source,
                  "rig_mismatch": self.rig_mismatches,
                  **{f"dropped_{k}": v for k, v in sorted(self.counts.items()) if k != "published"}}
        dropped = sum(v for k, v in self.counts.items() if k != "published")
        problems = [f"{dropped} grids dropped"] if dropped else []
        if self.rig_mismatches:
            problems.append(f"{self.rig_mismatches} grids not rig {self.rig.name}'s")
        self.diag_pub.publish(diagnostic_array(self.get_clock().now().to_msg(), f"{self.get_name()}: occupancy",
                                               "bevpool_occupancy", "WARN" if problems else "OK",
                                               "; ".join(problems) or "ok", values))


def _unknown_cameras(present, known) -> str | None:
    unknown = [c for c in present if c not in known]
    return f"cameras {unknown} not in the rig" if unknown else None


def occupancy_grid_msg(bev_msg, values: np.ndarray, ground_z: float = 0.0):
    """nav_msgs/OccupancyGrid with the BevFeature's header, x/y origin and resolution (yaw 0),
    drawn at height ``ground_z`` (the BEV's own origin.z is its lowest layer, below the ground)."""
    import array

    from nav_msgs.msg import OccupancyGrid

    grid = OccupancyGrid()
    grid.header = bev_msg.header
    grid.info.map_load_time = bev_msg.header.stamp
    grid.info.resolution = float(bev_msg.resolution_x)
    grid.info.width, grid.info.height = int(bev_msg.width), int(bev_msg.height)
    grid.info.origin.position.x = float(bev_msg.origin.x)
    grid.info.origin.position.y = float(bev_msg.origin.y)
    grid.info.origin.position.z = float(ground_z)
    grid.info.origin.orientation.w = 1.0
    data = array.array("b")
    data.frombytes(np.ascontiguousarray(values, np.int8).tobytes())
    grid.data = data
    return grid


def main(argv=None) -> int:
    """``argv``: rclpy's, the program name first (default: sys.argv)."""
    from ..params.files import check_files_readable
    from ..ros.usage import usage, wants_help

    argv = list(argv if argv is not None else sys.argv)
    if wants_help(argv[1:]):
        print(usage("bevpool_occupancy", "BevFeature (bev/features) -> nav_msgs/OccupancyGrid "
                    "(occupancy/grid), a downstream consumer of bevpool_node.",
                    [(p.name, p.type, p.default, p.description) for p in table.PARAMS], "docs/occupancy.md"))
        return 0
    try:
        params_files = check_files_readable(argv)  # rcl would raise a multi-line error on them
    except ParamsFileError as e:
        return _refused(e)
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from ..heap import keep_freed_memory
    from ..ros.process import (
        RosArgumentsError,
        init_without_signal_handlers,
        spin_until_shutdown,
        use_large_data_profile,
    )

    keep_freed_memory()  # a BevFeature consumer: its 1-5 MB takes reuse mapped pages (heap.py)
    use_large_data_profile()
    try:
        stop = init_without_signal_handlers(argv)
    except RosArgumentsError as e:
        return _refused(e)
    executor = SingleThreadedExecutor()
    try:
        node = OccupancyNode(params_files=params_files)
    except StartupError as e:
        rclpy.try_shutdown()
        stop.restore()  # main may be called in-process (tests): leave the caller's handlers
        return _refused(e)
    except KeyboardInterrupt:
        rclpy.try_shutdown()
        stop.restore()
        return 0
    return spin_until_shutdown(executor, node, stop)


def _refused(why) -> int:
    print(f"bevpool_occupancy: invalid configuration: {why}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
