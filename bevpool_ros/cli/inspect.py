"""bevpool-inspect WORKLOAD_OR_RIG_YAML: scatter-map statistics, working set, memory regime."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from ..camera_view import DEFAULT_WARN_LOSS, camera_views
from ..device.driver import live_l2_bytes
from ..regime import OUTPUT_DTYPE, MiB, classify, regime_table, working_set_parts
from ..rig import RigError
from ..rig_yaml import load_rig
from ..scatter_map import ScatterMap, ScatterMapError, build_scatter_map
from ..workloads import RIG_WORKLOADS, WORKLOADS, describe, get_workload, workload_rig
from .pipe import reader_gone

DTYPES = ("float32", "float16", "float8_e4m3")


def load_target(target: str):
    """(scatter map, rig or None, description) for a workload name, rig YAML or saved .npz."""
    if target in WORKLOADS:
        rig = workload_rig(target) if target in RIG_WORKLOADS else None
        return get_workload(target), rig, describe(target)
    path = Path(target)
    if not path.is_file():
        raise FileNotFoundError(f"{target}: neither a workload ({', '.join(WORKLOADS)}) nor a file")
    if path.suffix == ".npz":
        return ScatterMap.load(path), None, f"saved map {path}"
    rig = load_rig(path)
    return build_scatter_map(rig), rig, f"rig {rig.name} from {path}"


def report(smap: ScatterMap, description: str, build_s: float, rig=None,
           warn_loss: float = DEFAULT_WARN_LOSS) -> dict:
    stats = smap.stats()
    names = [c.name for c in rig.cameras] if rig else [f"camera {n}" for n in range(smap.depth_shape[0])]
    stats["cameras"] = dict(zip(names, stats["points_per_camera"]))
    if rig:  # the part of each camera's image that reaches the network
        stats["input_transform"] = {"image_size": list(rig.image_size), "resize": rig.resize,
                                    "crop": [rig.crop_left, rig.crop_top],
                                    "input": [rig.input_width, rig.input_height]}
        stats["camera_views"] = camera_views(rig, warn_loss)
        stats["warnings"] = [v["warning"] for v in stats["camera_views"].values() if v["warning"]]
    stats["description"] = description
    stats["build_ms"] = round(build_s * 1e3, 2)
    stats["working_set_parts"] = {dt: working_set_parts(smap, dt) for dt in DTYPES}
    stats["regimes"] = regime_table(smap, DTYPES)
    l2 = live_l2_bytes()
    stats["live_gpu"] = None if l2 is None else {
        "l2_bytes": l2, **{dt: classify(stats["working_set_bytes"][dt], l2) for dt in DTYPES}}
    return stats


def print_text(s: dict) -> None:
    il = s["interval_lengths"]
    print(f"{s['description']}")
    print(f"  points          {s['points']:>12,}  of {s['frustum_points']:,} frustum points "
          f"({100 * s['kept_fraction']:.1f}% inside the grid)")
    print("  points per camera  " + "  ".join(f"{name} {n:,}" + (" (sees none of the grid)" if not n else "")
                                          for name, n in s["cameras"].items()))
    if "camera_views" in s:
        print_camera_views(s)
    print(f"  intervals       {s['intervals']:>12,}  ({100 * s['occupied_cells_fraction']:.1f}% of cells)")
    if il:
        print(f"  interval length mean {il['mean']:.1f}  p50 {il['p50']:.0f}  p90 {il['p90']:.0f}  "
              f"p99 {il['p99']:.0f}  max {il['max']} ({il['max'] / il['mean']:.0f}x mean)")
    print(f"  depth {s['depth_shape']}  feat {s['feat_shape']}  bev {s['bev_shape']}  "
          f"(map built in {s['build_ms']:.0f} ms)")
    print("  working set      total        feat       depth     indices      output")
    for dt, parts in s["working_set_parts"].items():
        cols = "".join(f"{v / MiB:>10.2f}M" for v in parts.values())
        print(f"    {dt:<12}{s['working_set_bytes'][dt] / MiB:>9.2f}M{cols} {OUTPUT_DTYPE[dt]}")
    print("    (the output is the BEV grid in the dtype the backends write it for each input dtype: "
          + ", ".join(f"{OUTPUT_DTYPE[dt]} for {dt}" for dt in DTYPES) + ")")
    print("  regime (L2-resident when working set <= 75% of L2)")
    for row in s["regimes"]:
        print(f"    {row['gpu']:<24}{row['arch']:<8}L2 {row['l2_mib']:>6.0f} MiB   "
              + "  ".join(f"{dt}: {row[dt]}" for dt in DTYPES))
    if s["live_gpu"]:
        print(f"  this GPU: L2 {s['live_gpu']['l2_bytes'] / MiB:.0f} MiB -> "
              + ", ".join(f"{dt}: {s['live_gpu'][dt]}" for dt in DTYPES))


def print_camera_views(s: dict) -> None:
    t = s["input_transform"]
    (w, h), (iw, ih) = t["image_size"], t["input"]
    print(f"  network input {iw}x{ih}: {w}x{h} resized x{t['resize']:g}, cropped at "
          f"({t['crop'][0]}, {t['crop'][1]}); per camera, the source pixels that reach it:")
    for name, v in s["camera_views"].items():
        left, top, right, bottom = v["source_window"]
        (kw, kh), fov = v["kept_fraction"], v["fov_deg"]
        print(f"    {name:<16}{v['image_size'][0]}x{v['image_size'][1]} ({v['transform']}: "
              f"x{v['resize']:.4g}, crop {v['crop'][0]},{v['crop'][1]})  x {left:.0f}-{right:.0f} "
              f"({100 * kw:.0f}%)  y {top:.0f}-{bottom:.0f} ({100 * kh:.0f}%)  field of view "
              f"{fov['horizontal'][0]:.1f} x {fov['vertical'][0]:.1f} deg of "
              f"{fov['horizontal'][1]:.1f} x {fov['vertical'][1]:.1f}")
    for warning in s["warnings"]:
        print(f"  warning: {warning}")


def interval_length_per_column(smap: ScatterMap) -> np.ndarray:
    """Longest interval (points pooled into one cell) over the layers of each (y, x) column, [Y, X]."""
    per_cell = np.zeros(smap.num_cells)
    per_cell[smap.ranks_bev[smap.interval_starts]] = smap.interval_lengths
    Z, Y, X = smap.grid_shape
    return per_cell.reshape(Z, Y, X).max(axis=0)


def save_interval_png(path: str, smap: ScatterMap, rig, description: str) -> str:
    """Interval lengths on a log colour scale with a colour bar; axes in metres (cells without a rig)."""
    from ..visualize import save_bev_figure

    geometry = (rig.x.lower, rig.y.lower, rig.x.step, rig.y.step) if rig else (0.0, 0.0, 1.0, 1.0)
    out = save_bev_figure(path, interval_length_per_column(smap), *geometry,
                          title=f"points per BEV cell: {description}", label="interval length (points)")
    return str(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bevpool-inspect", description=__doc__)
    p.add_argument("target", help=f"workload ({', '.join(WORKLOADS)}), rig YAML or saved map .npz")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--png", metavar="FILE", help="plot the per-cell interval length (log scale, metres) as a PNG")
    p.add_argument("--save-map", metavar="FILE.npz", help="save the scatter map (.npz)")
    p.add_argument("--fov-warn", type=float, default=100 * DEFAULT_WARN_LOSS, metavar="PERCENT",
                   help="warn when a camera loses more than PERCENT of the field of view the rig's "
                        f"input transform keeps (default {100 * DEFAULT_WARN_LOSS:g})")
    args = p.parse_args(argv)
    try:
        t0 = time.perf_counter()
        smap, rig, description = load_target(args.target)
        build_s = time.perf_counter() - t0
    except (RigError, ScatterMapError, FileNotFoundError) as e:
        print(f"bevpool-inspect: {e}", file=sys.stderr)
        return 2
    stats = report(smap, description, build_s, rig, args.fov_warn / 100)
    if args.save_map:
        stats["saved_map"] = str(smap.save(args.save_map))
    if args.png:
        stats["png"] = save_interval_png(args.png, smap, rig, description)
    try:
        if args.json:
            json.dump(stats, sys.stdout, indent=1)
            print()
        else:
            print_text(stats)
        sys.stdout.flush()
    except BrokenPipeError:
        return reader_gone()
    return 0


if __name__ == "__main__":
    sys.exit(main())
