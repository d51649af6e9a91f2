"""bevpool-bench: the source article's Table 1 on this GPU, for every workload of the suite.

For each workload: V2 FP16, V2+DO FP16, V3 FP16, V3 FP8 (and their ratios) plus the floor
measured in the same run = compulsory bytes / device-to-device copy bandwidth + the graph-replay
time of an empty kernel launch. Every time is the median of >= 100 CUDA-graph replays after
warm-up (bevpool_ros/device/timing.py). Inputs and outputs are rotated over enough sets
to cover twice the L2, so no launch finds its frame's depth/features in L2 from its previous run
(a real frame's inputs arrive fresh); the scatter map and schedule are shared. ``median_hot_us``
gives the same kernel without rotation (everything L2-resident where it fits).

    bevpool-bench --json bench/results/kernels_h200.json --md bench/results/kernels_h200.md
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from ..progress import track

log = logging.getLogger("bevpool.bench")

TABLE_VARIANTS = (("v2", "fp16"), ("v2do", "fp16"), ("v3", "fp16"), ("v3", "fp8"))


def make_inputs(smap, seed: int):
    """Fresh random inputs: float64 originals, FP16 copies, FP8 codes + the scaling rule's scales."""
    from ..kernels import fp8

    rng = np.random.default_rng(seed)
    depth = rng.random(smap.depth_shape)
    feat = rng.uniform(-1.0, 1.0, smap.feat_shape)
    s_d, s_f = fp8.pow2_scale(depth), fp8.pow2_scale(feat)
    return {
        "depth64": depth, "feat64": feat,
        "depth16": depth.astype(np.float16), "feat16": feat.astype(np.float16),
        "depth8": fp8.quantize(depth, s_d), "feat8": fp8.quantize(feat, s_f),
        "fp8_out_scale": 1.0 / (s_d * s_f),
    }


def time_op(op, inputs: dict, precision: str, rotate: bool, inner: int, reps: int) -> dict:
    d = inputs["depth16" if precision == "fp16" else "depth8"]
    f = inputs["feat16" if precision == "fp16" else "feat8"]
    return op.time(d, f, rotate=rotate, inner=inner, reps=reps)


def check_op(op, inputs: dict, precision: str, refs: dict) -> dict:
    """Max abs error vs the FP64 reference (FP16: on the FP16 inputs; FP8: on the original
    inputs, plus the kernel-only error on the dequantised inputs), and a repeat-identity check."""
    if precision == "fp16":
        a = op.run(inputs["depth16"], inputs["feat16"])
        b = op.run(inputs["depth16"], inputs["feat16"])
        err = np.abs(a.astype(np.float64) - refs["fp16"])
        out = {"max_abs_err": float(np.nanmax(err)) if np.isfinite(a).all() else float("nan")}
    else:
        a = op.run(inputs["depth8"], inputs["feat8"])
        b = op.run(inputs["depth8"], inputs["feat8"])
        finite = bool(np.isfinite(a).all())
        err = np.abs(a.astype(np.float64) - refs["fp64"])
        out = {"max_abs_err": float(err.max()) if finite else float("nan"),
               "max_abs_err_vs_dequantised": float(np.abs(a.astype(np.float64) - refs["fp8_deq"]).max())
               if finite else float("nan")}
        from ..kernels.precision import fp8_within_tolerance

        out["fp8_within_tolerance"] = fp8_within_tolerance(a, refs["fp64"], refs["abs64"])[0]
    out["repeat_identical"] = bool(np.array_equal(a.view(np.uint8), b.view(np.uint8)))
    out["all_finite"] = bool(np.isfinite(a).all())
    return out


SECTOR = 32  # bytes: the unit a gather moves between L2 and the SM


def v3_touched_bytes(smap, sched, precision: str) -> int:
    """The tighter floor's bytes: only what V3 must touch. Depth sectors some point references,
    distinct feature rows, V3's own index arrays (slots, entries, empty cells) and the output."""
    eb = 2 if precision == "fp16" else 1
    out_b = 4 if precision == "fp16" else 2
    depth_sectors = np.unique(smap.ranks_depth.astype(np.int64) * eb // SECTOR).size
    rows = np.unique(smap.ranks_feat).size
    return int(depth_sectors * SECTOR + rows * smap.channels * eb + sched.slots.nbytes + sched.pidx.nbytes
               + sched.empty_cells.nbytes + smap.num_cells * smap.channels * out_b)


def references(smap, inputs: dict) -> dict:
    from ..kernels import fp8
    from ..reference import pool_reference

    s = inputs["fp8_out_scale"]
    return {
        "fp16": pool_reference(inputs["depth16"], inputs["feat16"], smap),
        "fp64": pool_reference(inputs["depth64"], inputs["feat64"], smap),
        "abs64": pool_reference(np.abs(inputs["depth64"]), np.abs(inputs["feat64"]), smap),
        "fp8_deq": pool_reference(fp8.decode(inputs["depth8"]), fp8.decode(inputs["feat8"]), smap) * s,
    }


def bench_workload(rt, name: str, smap, args, bw: float, launch_us: float) -> list[dict]:
    from ..device.operator import operator_for

    t0 = time.time()
    inputs = make_inputs(smap, seed=args.seed)
    refs = references(smap, inputs) if args.check else None
    rows = []
    st = smap.stats()
    for variant, precision in TABLE_VARIANTS:
        row = {"workload": name, "variant": variant, "precision": precision,
               "channels": smap.channels, "points": smap.num_points, "intervals": smap.num_intervals,
               "max_interval": st["max_interval"], "mean_interval": st["interval_lengths"].get("mean", 0.0)}
        scale = inputs["fp8_out_scale"] if precision == "fp8" else 1.0
        try:
            if variant == "v3" and args.autotune:
                from ..device.autotune import tune_v3

                choice, table = tune_v3(rt, smap, precision, seed=args.seed + 7,
                                        exclude=tuple(args.exclude_kernels))
                launch = dict(kernel=choice.kernel, k_min=choice.k_min, threads=choice.threads)
                row["autotune"] = table
            else:
                launch = dict(acc=args.acc, k_min=args.k_min, threads=args.threads)
            op = operator_for(rt, smap, variant, precision, out_scale=scale, **launch)
        except ValueError as e:  # e.g. unsupported channel count for a baseline
            row["error"] = str(e)
            rows.append(row)
            continue
        try:
            rows.append(bench_row(rt, row, op, inputs, refs, args, bw, launch_us))
        finally:
            op.free()
    by = {(r["variant"], r["precision"]): r for r in rows}
    v2 = by.get(("v2", "fp16"), {}).get("median_us")
    do = by.get(("v2do", "fp16"), {}).get("median_us")
    for r in rows:
        if "median_us" in r and r["variant"] == "v3":
            if v2:
                r["speedup_vs_v2"] = v2 / r["median_us"]
            if do:
                r["speedup_vs_v2do"] = do / r["median_us"]
    log.info("%s done in %.1f s", name, time.time() - t0)
    return rows


def bench_row(rt, row: dict, op, inputs: dict, refs: dict | None, args, bw: float, launch_us: float) -> dict:
    """One table row: the operator's launch, floors, checks and times."""
    from ..device.runtime import regime_for
    from ..regime import working_set_bytes

    smap, plan, precision = op.smap, op.plan, row["precision"]
    dtype = "float16" if precision == "fp16" else "float8_e4m3"
    bytes_ = working_set_bytes(smap, dtype)
    bw_us = bytes_ / bw * 1e6
    row.update(kernel=plan.kernel, grid=list(plan.grid), block=list(plan.block),
               regime=regime_for(smap, precision, rt.device.l2_bytes), out_dtype=plan.out_dtype,
               companion_memset=plan.zero_output_first, compulsory_bytes=bytes_,
               bw_floor_us=bw_us, launch_us=launch_us, floor_us=bw_us + launch_us)
    if op.schedule is not None:
        sc = op.schedule
        tight = v3_touched_bytes(smap, sc, precision)
        row.update(points_per_slot=sc.points_per_slot, teams=sc.num_teams, max_team=sc.max_team,
                   slots=sc.num_slots, entries=int(sc.pidx.shape[0]),
                   shared_bytes=plan.shared_bytes, k_min=op.launch.k_min, threads=plan.block[0],
                   touched_bytes=tight, tight_floor_us=tight / bw * 1e6 + launch_us)
    if refs is not None:
        row.update(check_op(op, inputs, precision, refs))
    rot = time_op(op, inputs, precision, not args.no_rotate, args.inner, args.reps)
    row.update(median_us=rot["median_us"], min_us=rot["min_us"], p90_us=rot["p90_us"],
               samples=rot["samples"], inner=rot["inner"], rotation_sets=rot["rotation_sets"])
    if args.hot:
        row["median_hot_us"] = time_op(op, inputs, precision, False, args.inner, args.reps)["median_us"]
    row["x_floor"] = row["median_us"] / row["floor_us"]
    if "tight_floor_us" in row:
        row["x_tight_floor"] = row["median_us"] / row["tight_floor_us"]
    return row


def tune_workload(rt, name, smap, args) -> list[dict]:
    """Sweep: V3 kernel x k_min x block size, each checked then timed
    (recorded in the meta file; the autotuner makes the per-map choice)."""
    import itertools

    from ..device.operator import V3Operator
    from ..kernels import table as L

    inputs = make_inputs(smap, seed=args.seed + 1)
    refs = references(smap, inputs)
    out = []
    # the widest tiles only: narrow generic tiles exist for odd channel counts, not for speed
    kernels = [k for k, v in L.V3_KERNELS.items() if v.vec >= 8 and smap.channels % v.vec == 0
               and v.c_fixed in (0, smap.channels)
               and (not args.tune_kernels or k in args.tune_kernels)]
    for kern, k_min, block in itertools.product(kernels, args.tune_k, args.tune_threads):
        prec = L.V3_KERNELS[kern].precision
        op = V3Operator.build(rt, smap, prec, kernel=kern, k_min=k_min, threads=block,
                              out_scale=inputs["fp8_out_scale"] if prec == "fp8" else 1.0)
        try:
            chk = check_op(op, inputs, prec, refs)
            rot = time_op(op, inputs, prec, not args.no_rotate, args.inner, args.reps)
        finally:
            op.free()
        plan, sc = op.plan, op.schedule
        out.append({"workload": name, "kernel": kern, "precision": prec, "k_min": k_min,
                    "threads": plan.block[0], "K": sc.points_per_slot, "median_us": rot["median_us"], **chk})
        print(f"tune {name:11s} {kern:32s} k_min={k_min:2d} threads={plan.block[0]:3d} "
              f"K={sc.points_per_slot:3d} {rot['median_us']:8.2f} us err {chk['max_abs_err']:.4f} "
              f"ok={chk['all_finite'] and chk['repeat_identical']}", flush=True)
    return out


def launch_label(r: dict) -> str:
    if "kernel" not in r:
        return "n/a"
    return f"{r['kernel'].replace('bevpool_v3_', '')} k{r.get('k_min')} t{r.get('threads')}"


def markdown(rows: list[dict], meta: dict) -> str:
    by = {}
    for r in rows:
        by.setdefault(r["workload"], {})[(r["variant"], r["precision"])] = r

    def t(r):
        return f"{r['median_us']:.1f}" if r and "median_us" in r else "n/a"

    lines = [f"# BEV pooling on {meta['device']} ({meta['arch']}, L2 {meta['l2_mib']:.0f} MiB)", "",
             f"CUDA-graph replay, median of {meta['reps']} samples x {meta['inner']}+ launches after warm-up; "
             f"inputs/outputs rotated over enough sets to cover 2x L2. D2D copy bandwidth "
             f"{meta['d2d_gbps']:.0f} GB/s (read+write); empty-launch graph replay {meta['launch_us']:.2f} us. "
             "Floor = compulsory bytes (FP16 in, FP32 out) / D2D bandwidth + empty launch; tight floor = "
             "only the bytes V3 must touch (referenced depth sectors, distinct feature rows, its own "
             "index arrays, the output) / D2D bandwidth + empty launch. "
             "V2 and V2+DO times include their output memset. Times in microseconds.", "",
             "| workload | C | points | max interval | V2 FP16 | V2+DO FP16 | V3 FP16 | V3 FP8 | V3 FP8 / V2 "
             "| V3 FP16 vs V2 | V3 FP16 vs V2+DO | floor | V3 FP16 / floor | tight floor | V3 FP16 / tight "
             "| V3 FP8 vs FP16 | regime (FP16) | V3 FP16 launch |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for w, d in by.items():
        v2, do, v3, v8 = (d.get(k) for k in TABLE_VARIANTS)
        any_r = v3 or v2

        def ratio(a, b):
            return (f"{a['median_us'] / b['median_us']:.2f}x"
                    if a and b and "median_us" in a and "median_us" in b else "n/a")

        lines.append(f"| {w} | {any_r['channels']} | {any_r['points']:,} | {any_r['max_interval']} | {t(v2)} | "
                     f"{t(do)} | "
                     f"{t(v3)} | {t(v8)} | {ratio(v2, v8)} | {ratio(v2, v3)} | {ratio(do, v3)} | "
                     f"{v3['floor_us']:.2f} | {v3['x_floor']:.2f}x | {v3.get('tight_floor_us', float('nan')):.2f} | "
                     f"{v3.get('x_tight_floor', float('nan')):.2f}x | {ratio(v3, v8)} | {v3.get('regime', '')} | "
                     f"{launch_label(v3)} |")
    lines += ["", "Accuracy (max abs error vs FP64 reference; FP16 rows on the FP16 inputs, FP8 on the original "
              "inputs, tolerance in docs/kernels.md):", "",
              "| workload | V2 | V2+DO | V3 FP16 | V3 FP8 | V3 FP8 kernel-only | repeat bit-identical |",
              "|---|---|---|---|---|---|---|"]
    for w, d in by.items():
        v2, do, v3, v8 = (d.get(k) or {} for k in TABLE_VARIANTS)

        def e(r, k="max_abs_err"):
            return f"{r[k]:.4f}" if k in r else "n/a"

        same = all(r.get("repeat_identical", False) for r in (v2, do, v3, v8) if r)
        lines.append(f"| {w} | {e(v2)} | {e(do)} | {e(v3)} | {e(v8)} | {e(v8, 'max_abs_err_vs_dequantised')} | "
                     f"{same} |")
    return "\n".join(lines) + "\n"


def _gpu_runtime():
    """The CUDA runtime on GPU 0, or None after one line on stderr saying why there is none."""
    from ..backends import BackendUnavailable

    try:
        from ..device.runtime import get_runtime

        return get_runtime(0)
    except (BackendUnavailable, ImportError, OSError) as e:
        print(f"bevpool-bench: times CUDA kernels, and this machine has no usable GPU: {e} "
              "(--save-maps works without one)", file=sys.stderr)
        return None


def main(argv=None) -> int:
    from ..workloads import WORKLOADS, get_workload

    p = argparse.ArgumentParser(prog="bevpool-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--json", type=Path, help="write the rows as JSON here")
    p.add_argument("--md", type=Path, help="write the markdown table here")
    p.add_argument("--save-maps", type=Path, metavar="DIR",
                   help="write every workload's scatter map (.npz) and input shapes (.json) to DIR")
    p.add_argument("--reps", type=int, default=100, help="timing samples (>= 100 for reported numbers)")
    p.add_argument("--inner", type=int, default=32, help="launches per graph replay")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--acc", default="f32", choices=("half2", "f32"), help="V3 FP16 accumulation")
    p.add_argument("--k-min", type=int, default=16, help="schedule: minimum points per slot")
    p.add_argument("--threads", type=int, default=256, help="V3 threads per block")
    p.add_argument("--no-rotate", action="store_true", help="time without input/output rotation")
    p.add_argument("--hot", action="store_true", help="also time without rotation (median_hot_us)")
    p.add_argument("--no-autotune", dest="autotune", action="store_false",
                   help="V3 with the default launch instead of the per-map measured choice")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the FP64 accuracy check")
    p.add_argument("--tune", default="", help="comma list of workloads to sweep V3 kernels/schedules on")
    p.add_argument("--tune-k", default="8,16,32")
    p.add_argument("--tune-threads", default="128,256")
    p.add_argument("--tune-kernels", default="", help="comma list of kernel names to sweep (default: every wide one)")
    p.add_argument("--exclude-kernels", default="", help="comma list of V3 kernels the autotuner skips")
    p.add_argument("--ncu-once", default="", help="launch each variant once on these workloads (for ncu)")
    p.add_argument("--ncu-from", type=Path, help="with --ncu-once: V3 launches (kernel, k_min, threads) "
                   "as autotuned in this bench JSON")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    args.tune_k = [int(v) for v in args.tune_k.split(",") if v]
    args.tune_threads = [int(v) for v in args.tune_threads.split(",") if v]
    args.tune_kernels = [v for v in args.tune_kernels.split(",") if v]
    args.exclude_kernels = [v for v in args.exclude_kernels.split(",") if v]
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    names = [w for w in args.workloads.split(",") if w]

    if args.save_maps:
        args.save_maps.mkdir(parents=True, exist_ok=True)
        for w in names:
            smap = get_workload(w)
            smap.save(args.save_maps / f"{w}.npz")
            shapes = {"depth": list(smap.depth_shape), "feat": list(smap.feat_shape),
                      "bev": list(smap.bev_shape), "points": smap.num_points, "intervals": smap.num_intervals}
            (args.save_maps / f"{w}.json").write_text(json.dumps(shapes, indent=1))
        print(f"saved {len(names)} scatter maps to {args.save_maps}")
        if not (args.json or args.md or args.tune or args.ncu_once):
            return 0

    rt = _gpu_runtime()
    if rt is None:
        return 2
    dev = rt.device
    if args.ncu_once:
        from ..device.operator import operator_for

        tuned = {}
        if args.ncu_from:
            tuned = {(r["workload"], r["precision"]): dict(kernel=r["kernel"], k_min=r["k_min"], threads=r["threads"])
                     for r in json.loads(args.ncu_from.read_text()) if r["variant"] == "v3" and "kernel" in r}
        for w in args.ncu_once.split(","):
            smap = get_workload(w)
            inputs = make_inputs(smap, args.seed)
            for variant, precision in TABLE_VARIANTS:
                launch = {"k_min": args.k_min, "threads": args.threads, "acc": args.acc}
                launch.update(tuned.get((w, precision), {}) if variant == "v3" else {})
                op = operator_for(rt, smap, variant, precision, **launch,
                                  out_scale=inputs["fp8_out_scale"] if precision == "fp8" else 1.0)
                d, f = ((inputs["depth16"], inputs["feat16"]) if precision == "fp16"
                        else (inputs["depth8"], inputs["feat8"]))
                op.run(d, f)
                op.free()
        return 0

    from ..device.driver import launch as launch_kernel
    from ..device.timing import d2d_bandwidth, time_graph
    from ..kernels.table import plan_empty

    bw = d2d_bandwidth(rt.stream)
    empty = plan_empty()
    launch_us = time_graph(rt.stream, lambda i, s: launch_kernel(rt.module, empty, {}, s),
                           inner=args.inner, reps=args.reps)["median_us"]
    meta = {"device": dev.name, "arch": dev.arch, "l2_mib": dev.l2_bytes / 2**20, "sms": dev.sm_count,
            "d2d_gbps": bw / 1e9, "launch_us": launch_us, "reps": args.reps, "inner": args.inner,
            "acc": args.acc, "k_min": args.k_min, "threads": args.threads, "autotune": args.autotune,
            "rotate": not args.no_rotate,
            "command": "bevpool-bench " + " ".join(argv if argv is not None else sys.argv[1:])}
    print(f"{dev.name} {dev.arch} L2 {meta['l2_mib']:.0f} MiB, D2D {bw / 1e9:.0f} GB/s, "
          f"empty launch {launch_us:.2f} us", flush=True)

    tuning = []
    for w in [w for w in args.tune.split(",") if w]:
        tuning += tune_workload(rt, w, get_workload(w), args)

    rows = []
    for w in track(names, "bevpool-bench", "workload"):
        rows += bench_workload(rt, w, get_workload(w), args, bw, launch_us)
        for r in rows[-4:]:
            print(f"{w:11s} {r['variant']:4s} {r['precision']} {r.get('median_us', float('nan')):9.2f} us "
                  f"floor {r.get('floor_us', float('nan')):6.2f} err {r.get('max_abs_err', float('nan')):.4f} "
                  f"{r.get('kernel', r.get('error', ''))}", flush=True)
    md_text = markdown(rows, meta)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
        args.json.with_name(args.json.stem + "_meta.json").write_text(
            json.dumps({"meta": meta, "tuning": tuning}, indent=1) + "\n")
    if args.md:
        args.md.parent.mkdir(parents=True, exist_ok=True)
        args.md.write_text(md_text)
    print(md_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
