"""bevpool-bag: rosbag2 camera bags for replay evaluation, without rosbag2.

  bevpool-bag record-synthetic OUT_BAG [--frames 40] [--rate 20] [--dtype float16] [--skip 5:CAM_BACK]
                               [--depth-image CAM_FRONT ...] [--storage mcap|sqlite3]
  bevpool-bag info BAG
  bevpool-bag play BAG [--rate 1.0] [--wait 5]            (ros2 bag play, where rosbag2 is missing)
  bevpool-bag eval BAG --out OUT_BAG [--rig RIG.yaml] [--params-file config/cpu.yaml] [-p backend:=cpu]
                   [--report r.json] [--paced | --rate 1.0] [--allow-lost N|FRACTION] [--keep-grids]
  bevpool-bag eval-many BAG_OR_DIR... --out DIR [--address auto] [--num-cpus 1] [--num-gpus 0] [eval options]

``play`` feeds a node you started as bevpool-synthetic does: it waits up to --wait seconds for
subscribers and a node's /diagnostics, and at the end says what the node counted of the camera sets
played, by cause, and when it went away during play (docs/tools.md).

``eval`` runs bevpool_node on the bag over DDS and scores every grid it publishes against the FP64
reference recomputed from the exact inputs it names; OUT_BAG holds a score per grid and the last
grid (--keep-grids: every grid), and its size is said at the end. The rig is --rig, else the
params file's rig_file; one that does not fit the bag (cameras, shapes) is refused before the run. It counts
the complete camera sets in the bag and every one that did not come back as a grid, by cause.
``--paced`` sends one set at a time, the next only when the previous grid came back (accuracy
runs on a slow machine); otherwise the bag plays at its recorded pace x --rate.
``eval-many`` runs one such evaluation per bag as a Ray task (a local Ray instance, or the
cluster at --address), each on its own DDS domain, and writes DIR/report.json, DIR/report.html
(plots) and DIR/bags/<bag> (the node's output per bag). Bags may be MCAP or SQLite (.db3).
Exit status: 0 when every published grid matches within tolerance, no complete set was lost
beyond --allow-lost and the node exited cleanly, 1 otherwise (the reasons on stderr), 2 on bad
usage (including a bag that
cannot be read, e.g. truncated or with broken metadata, a bag the node's parameters do not fit,
e.g. depth Images without input.depth_mode, a node that does not start, an output that already
exists, a Ray cluster that cannot be joined or has no node big enough for one task): one line on
stderr, no traceback, nothing left in --out.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _skip_arg(text: str) -> tuple[int, str]:
    frame, _, cam = text.partition(":")
    if not cam or not frame.isdigit():
        raise argparse.ArgumentTypeError(f"expected FRAME:CAMERA, got {text!r}")
    return int(frame), cam


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _param_arg(text: str) -> tuple[str, object]:
    key, sep, value = text.partition(":=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected name:=value, got {text!r}")
    import yaml

    return key, yaml.safe_load(value)


def main(argv=None) -> int:
    from ..paths import default_rig_path

    default_rig = str(default_rig_path())
    p = argparse.ArgumentParser(prog="bevpool-bag", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record-synthetic", help="write a synthetic nuScenes-rig camera bag")
    rec.add_argument("out")
    rec.add_argument("--rig", default=default_rig)
    rec.add_argument("--frames", type=int, default=40)
    rec.add_argument("--rate", type=float, default=20.0)
    rec.add_argument("--dtype", default="float16", choices=("float32", "float16", "float8_e4m3"))
    rec.add_argument("--layout", default="HWC", choices=("HWC", "CHW"))
    rec.add_argument("--storage", default="mcap", choices=("mcap", "sqlite3"),
                     help="rosbag2 storage: mcap (default) or sqlite3 (.db3, older ROS 2 releases)")
    rec.add_argument("--jitter-ms", type=float, default=0.0, help="per-camera stamp jitter")
    rec.add_argument("--skip", type=_skip_arg, action="append", default=[], metavar="FRAME:CAMERA",
                     help="leave CAMERA out of FRAME (repeatable)")
    rec.add_argument("--depth-image", action="append", default=[], metavar="CAMERA",
                     help="CAMERA records a 16UC1 depth Image instead of a distribution (repeatable; "
                          "evaluate with -p input.depth_mode:=... naming it 'image')")
    info = sub.add_parser("info", help="topics, types, counts, duration")
    info.add_argument("bag")
    play = sub.add_parser("play", help="publish a bag at its recorded pace")
    play.add_argument("bag")
    play.add_argument("--rate", type=float, default=1.0)
    play.add_argument("--wait", type=float, default=5.0, metavar="S",
                      help="wait up to S seconds for subscribers on the bag's camera topics and a node's "
                           "/diagnostics before playing (default 5; 0: play at once)")
    ev = sub.add_parser("eval", help="replay into bevpool_node and score its output")
    ev.add_argument("bag")
    ev.add_argument("--out", required=True, help="output bag with the node's BevFeature messages")
    _eval_options(ev, default_rig)
    ev.add_argument("--report", help="write the report as JSON here")
    ev.add_argument("--no-progress", action="store_true", help="no progress bars")
    many = sub.add_parser("eval-many", help="evaluate many bags as Ray tasks; JSON + HTML report")
    many.add_argument("bags", nargs="+", metavar="BAG_OR_DIR", help="rosbag2 directories or folders of them")
    many.add_argument("--out", required=True, help="report folder (report.json, report.html, bags/)")
    _eval_options(many, default_rig)
    many.add_argument("--address", help="an existing Ray cluster: HEAD:PORT or 'auto' (docs/eval_many.md); "
                                         "default: local Ray")
    many.add_argument("--num-cpus", type=float, default=1.0, help="CPUs reserved per bag task")
    many.add_argument("--num-gpus", type=float, default=0.0, help="GPUs reserved per bag task (e.g. 0.25)")
    many.add_argument("--local-cpus", type=int, help="CPUs of the local Ray instance (default: all)")
    many.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    from ..bag.io import BagError
    from ..bag.ray_cluster import ClusterError
    from ..params.names import ParameterError
    from ..rig import RigError
    from ..rig_yaml import load_rig

    try:
        if args.cmd in ("eval", "eval-many"):  # the node's rig_file when --rig is absent
            from ..bag.evaluate import rig_path
            from ..params.check import node_parameters

            node_parameters(args.params_file, dict(args.param))  # as the node will check them
            args.rig = rig_path(args.rig, dict(args.param), args.params_file)
        if getattr(args, "rig", None):
            load_rig(args.rig)  # a bad rig file fails here, before a node or Ray starts
        return _run(args)
    except (BagError, ClusterError, RigError, ParameterError) as e:
        print(f"bevpool-bag {args.cmd}: {e}", file=sys.stderr)
        return 2


def _run(args) -> int:
    if args.cmd == "record-synthetic":
        from ..bag.record import record_synthetic
        from ..rig_yaml import load_rig

        skip = {}
        for frame, cam in args.skip:
            skip.setdefault(frame, set()).add(cam)
        try:
            stamps = record_synthetic(args.out, load_rig(args.rig), args.frames, args.rate, args.dtype,
                                      args.layout, jitter_ms=args.jitter_ms, skip=skip,
                                      depth_images=args.depth_image, show_progress=True,
                                      storage=args.storage)
        except ValueError as e:
            print(f"bevpool-bag: {e}", file=sys.stderr)
            return 2
        print(f"wrote {args.out}: {len(stamps)} sets")
        return 0
    if args.cmd == "info":
        from ..bag.io import bag_summary

        print(json.dumps(bag_summary(args.bag), indent=1))
        return 0
    if args.cmd == "play":
        return _play(args.bag, args.rate, args.wait)
    if args.cmd == "eval-many":
        return _eval_many(args)
    from ..bag.evaluate import evaluate_bag
    from ..bag.io import BagError, bag_summary

    if Path(args.out).exists():  # before a node is started for nothing
        raise BagError(f"--out {args.out} already exists: choose another output or remove it")
    bag_summary(args.bag)  # a bag that cannot be read fails here, not half-way through a replay
    report = evaluate_bag(args.bag, args.out, args.rig, dict(args.param), args.params_file,
                          args.rate, args.atol, paced=args.paced, allow_lost=args.allow_lost,
                          set_timeout_s=args.set_timeout, show_progress=not args.no_progress,
                          keep_grids=args.keep_grids)
    out = report.to_dict()
    print(json.dumps(out, indent=1))
    if args.report:
        Path(args.report).write_text(json.dumps(out, indent=1) + "\n")
    print(f"bevpool-bag eval: {report.output_line(args.out)}", file=sys.stderr)
    print(f"bevpool-bag eval {report.summary()}", file=sys.stderr)
    return 0 if report.ok else 1


def _eval_options(parser, default_rig: str) -> None:
    from ..bag.losses import AllowLost

    parser.add_argument("--rig", help="rig YAML of the bag's cameras (default: rig_file of -p or "
                        f"--params-file, else {Path(default_rig).name})")
    parser.add_argument("--params-file")
    parser.add_argument("-p", "--param", type=_param_arg, action="append", default=[], metavar="NAME:=VALUE")
    pace = parser.add_mutually_exclusive_group()
    pace.add_argument("--rate", type=_positive, default=1.0,
                      help="play at the recorded pace x RATE (default 1)")
    pace.add_argument("--paced", action="store_true",
                      help="one set at a time, the next when the previous grid came back: nothing "
                           "lost to a slow machine")
    parser.add_argument("--set-timeout", type=_positive, default=10.0, metavar="S",
                        help="--paced: give a set up to S seconds to come back (default 10)")
    parser.add_argument("--allow-lost", type=AllowLost.parse, default=AllowLost(),
                        metavar="N|FRACTION",
                        help="pass although up to N complete sets (or this fraction of them: 0.05, "
                             "5%%) were lost (default 0)")
    parser.add_argument("--keep-grids", action="store_true",
                        help="keep every grid in the output bag (default: a score per grid and the "
                             "last grid; a grid of the nuScenes rig is 5 MB)")
    parser.add_argument("--atol", type=float, default=None,
                        help="fixed absolute tolerance; default: the tolerance of the precision each grid "
                             "was computed at (bevpool_ros/tolerance.py)")


def _eval_many(args) -> int:
    from ..bag.evaluate import node_view, tolerance_text
    from ..bag.io import BagError, bag_summary
    from ..bag.many import TaskResources, evaluate_many, find_bags
    from ..bag.output import folder_bytes, size_text
    from ..bag.report import write_report
    from ..rig_yaml import load_rig

    bags = find_bags(args.bags)
    rig = load_rig(args.rig)
    for bag in bags:  # before Ray starts: every bag readable and fit for the node, outputs free
        bag_summary(bag)
        node_view(bag, rig, dict(args.param), args.params_file)
    taken = [b.name for b in bags if (Path(args.out) / "bags" / b.name).exists()]
    if taken:
        raise BagError(f"--out {args.out} already holds outputs for {taken}: choose another folder or remove it")
    results = evaluate_many(bags, Path(args.out), args.rig, dict(args.param), args.params_file, args.rate,
                            args.atol, args.address, TaskResources(args.num_cpus, args.num_gpus),
                            args.local_cpus, show_progress=not args.no_progress, paced=args.paced,
                            allow_lost=args.allow_lost, set_timeout_s=args.set_timeout,
                            keep_grids=args.keep_grids)
    settings = {"rig": args.rig, "params": dict(args.param), "params_file": args.params_file,
                "mode": "paced" if args.paced else f"rate x{args.rate:g}", "rate": args.rate,
                "allow_lost": str(args.allow_lost), "set_timeout_s": args.set_timeout,
                "atol": args.atol, "tolerance": tolerance_text(args.atol), "keep_grids": args.keep_grids,
                "ray_address": args.address or "local",
                "per_task": {"num_cpus": args.num_cpus, "num_gpus": args.num_gpus}}
    report = write_report(Path(args.out), results, settings)
    print(json.dumps(report["summary"], indent=1))
    print(f"wrote {Path(args.out) / 'report.json'} and {Path(args.out) / 'report.html'}")
    print(f"wrote {Path(args.out) / 'bags'}: {size_text(folder_bytes(Path(args.out) / 'bags'))} "
          + ("(every grid)" if args.keep_grids else "(a score per grid and the last grid of each bag; "
             "--keep-grids keeps every grid)"))
    return 0 if report["summary"]["bags_failed"] == 0 else 1


def _play(bag: str, rate: float, wait_s: float) -> int:
    from ..bag.play_tool import AccountedBagPlayer
    from ..demo.session import run_until_done

    def say(text: str) -> None:
        print(text, flush=True)

    def finish(player) -> None:
        for line in player.summary():
            say(line)

    return run_until_done(lambda: AccountedBagPlayer(bag, rate, wait_s, say=say),
                          start=lambda player: player.begin_feed(), finish=finish)


if __name__ == "__main__":
    sys.exit(main())
