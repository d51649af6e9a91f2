"""bevpool-synthetic: publish a synthetic camera rig's depth, feature and CameraInfo topics for
bevpool_node, until --frames are out or Ctrl-C (a clean stop: exit 0, no traceback).

  bevpool-synthetic [--rig RIG.yaml] [--rate 20] [--frames 0] [--dtype float32] [--layout HWC]
                    [--ros-args -r __ns:=/robot ...]
  python -m bevpool_ros.cli.synthetic ...        (the same, without the console script)

This module imports nothing heavy at the top: a Ctrl-C while rclpy and the scene load is caught
by the handler installed first, then honoured as soon as they are loaded.
"""
from __future__ import annotations

import argparse
import signal
import sys


class _EarlyStop:
    """SIGINT/SIGTERM before the ROS side is up only ask for a stop (no KeyboardInterrupt
    raised inside an import)."""

    def __init__(self):
        self.requested = False
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._request)

    def _request(self, *_):
        self.requested = True


def main(argv=None) -> int:
    early = _EarlyStop()
    argv = list(sys.argv if argv is None else [sys.argv[0], *argv])
    from rclpy.utilities import remove_ros_args

    from ..paths import default_rig_path

    ap = argparse.ArgumentParser(prog="bevpool-synthetic", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rig", default=str(default_rig_path()),
                    help="rig YAML (default: the nuScenes rig)")
    ap.add_argument("--rate", type=float, default=20.0, help="sets per second (default 20)")
    ap.add_argument("--frames", type=int, default=0,
                    help="stop after this many sets (0: run until Ctrl-C)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16", "float8_e4m3"))
    ap.add_argument("--layout", default="HWC", choices=("HWC", "CHW"), help="feature layout")
    ap.add_argument("--seed", type=int, default=0, help="scene seed")
    args = ap.parse_args(remove_ros_args(argv)[1:])
    if not args.rate > 0:
        ap.error(f"--rate: expected > 0, got {args.rate:g}")
    from ..rig import RigError
    from ..rig_yaml import load_rig

    try:
        rig = load_rig(args.rig)
    except (RigError, OSError) as e:
        print(f"bevpool-synthetic: {e}", file=sys.stderr)
        return 2
    from ..demo.session import run_until_done
    from ..demo.synthetic_publisher import SyntheticRigPublisher

    if early.requested:
        return 0

    def start(node) -> None:
        node.start(args.rate, args.frames)
        print(f"bevpool-synthetic: rig {rig.name}, {rig.num_cameras} cameras, {args.rate:g} sets/s "
              "on cameras/<camera>/{depth,feat,camera_info} "
              + (f"({args.frames} sets)" if args.frames else "(Ctrl-C stops)"), flush=True)

    def make():
        return SyntheticRigPublisher(rig, seed=args.seed, dtype=args.dtype,
                                     feature_layout=args.layout)

    return run_until_done(make, argv, start=start)


if __name__ == "__main__":
    sys.exit(main())
