"""bevpool-synthetic: publish a synthetic camera rig's depth, feature and CameraInfo topics for
bevpool_node, until --frames are out or Ctrl-C (a clean stop: exit 0, no traceback).

  bevpool-synthetic [--rig RIG.yaml] [--rate 20] [--frames 0] [--dtype float32] [--layout HWC]
                    [--wait 30] [--ros-args -r __ns:=/robot ...]
  python -m bevpool_ros.cli.synthetic ...        (the same, without the console script)

The first set goes out once every topic has a subscription (at most --wait seconds; exit 1 with
one line naming the unmatched topics otherwise). At the end it says how many sets it sent and,
from the node's /diagnostics, how many complete sets the node counted and how many it missed.

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
    ap.add_argument("--wait", type=float, default=30.0, metavar="S",
                    help="wait up to S seconds for the node to subscribe every topic before the "
                         "first set (default 30; 0: publish at once)")
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
    from ..demo.synthetic_tool import WaitingPublisher

    if early.requested:
        return 0

    def say(text: str) -> None:
        print(text, flush=True)

    def make():
        return WaitingPublisher(rig, wait_s=args.wait, say=say,
                                complain=lambda text: print(text, file=sys.stderr, flush=True),
                                seed=args.seed, dtype=args.dtype, feature_layout=args.layout)

    def finish(node) -> None:
        for line in node.summary():
            say(line)

    return run_until_done(make, argv, start=lambda node: node.begin(args.rate, args.frames),
                          finish=finish)


if __name__ == "__main__":
    sys.exit(main())
