"""bevpool-demo: synthetic 6-camera nuScenes rig -> bevpool_node -> consumer -> BEV PNG + latency.

One command, no ROS install beyond the venv: a private DDS domain on localhost, the node in a
child process (backend 'best': the fastest one available here), a synthetic publisher and a
consumer in this process. Writes the last BEV grid as a PNG (the figure code of bevpool-inspect:
axes in metres, colour bar, legend), prints latency statistics and checks the last grid against
the FP64 reference, then stops the node and exits.

A backend or precision the machine cannot run (``--backend cuda`` without a GPU, fp8 on the cpu
backend) is not an error: the node falls back as it does in production (``backend_fallback``),
the demo runs on and says in one line what ran instead and why.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bevpool-demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=60, help="camera sets to publish (default 60)")
    ap.add_argument("--rate", type=float, default=20.0, help="camera rate in Hz (default 20)")
    ap.add_argument("--backend", default="best", choices=("best", "tensorrt", "cuda", "cpu"))
    ap.add_argument("--precision", default=None, choices=("fp32", "fp16", "fp8", "auto"),
                    help="default fp16 (the cpu backend always computes fp32)")
    ap.add_argument("--rig", default=None, help="rig YAML (default: the nuScenes BEVDet-R50 rig)")
    ap.add_argument("--png", default="out/bev_demo.png", help="where to write the BEV image (default out/bev_demo.png)")
    args = ap.parse_args(argv)

    import numpy as np

    from ..demo.fallback import fallback_note
    from ..demo.node_account import account
    from ..demo.session import PipelineSession
    from ..reference import pool_reference
    from ..rig import RigError
    from ..scatter_map import build_scatter_map
    from ..tolerance import error_ratio
    from ..visualize import bev_energy_map, save_bev_figure

    asked = {"backend": args.backend, "precision": args.precision or "fp16"}
    try:
        session = PipelineSession(args.rig, {**asked, "diagnostics.period_s": 0.5})
    except RigError as e:  # the rig is read before any process starts
        print(f"bevpool-demo: {e}", file=sys.stderr)
        return 2
    print(f"[demo] ROS_DOMAIN_ID={session.domain}, localhost only; starting bevpool_node ...", flush=True)
    try:
        if not session.wait_ready(30.0):
            rc, log = session.close()
            print(f"[demo] bevpool_node did not come up (exit code {rc}). Its output:\n{log}", file=sys.stderr)
            return 1
        print(f"[demo] publishing {args.frames} sets of {session.rig.num_cameras} cameras at {args.rate:g} Hz",
              flush=True)
        result = session.run(args.frames, args.rate, warmup=min(5, args.frames // 4))
        died = not session.node.alive()
    finally:
        rc, log = session.close()
    d = result.diagnostics
    print(f"[demo] sets sent {result.sent}, BEV grids received {result.received} "
          f"(backend {d.get('backend', '?')}, precision {d.get('precision', '?')})")
    note = fallback_note(args.backend, args.precision or "auto", d, log)  # only what was asked for
    if note:
        print(f"[demo] {note}")
    if result.last_bev is None:
        print(f"[demo] no BEV grid received. Node output:\n{log}", file=sys.stderr)
        return 1
    p = result.percentiles()
    print(f"[demo] end-to-end latency (last input published -> BEV received): "
          f"p50 {p[50]:.1f} ms, p95 {p[95]:.1f} ms, p99 {p[99]:.1f} ms over {len(result.e2e_ms)} sets")
    ms = lambda k: f"{float(d.get(k, 'nan')):.1f}"  # noqa: E731
    print(f"[demo] inside the node: latency p50 {ms('latency_p50_ms')} / p99 {ms('latency_p99_ms')} ms, "
          f"pool p50 {ms('pool_p50_ms')} / p99 {ms('pool_p99_ms')} ms, "
          f"overhead beyond the kernel p50 {ms('overhead_p50_ms')} / p99 {ms('overhead_p99_ms')} ms")
    if died:
        print(f"[demo] bevpool_node is gone: it exited with code {rc} during the run", file=sys.stderr)
    counted = account("bevpool_node", {}, d, result.sent, gone=died) if d else \
        "no status of bevpool_node received: what it counted is unknown"
    print(f"[demo] {counted}" + (" (by its last status, before it went)" if died and d else ""))
    rig, r = session.rig, result.last_bev
    title = (f"bevpool-demo: last BEV grid (set {result.last_index}), rig {rig.name}, "
             f"{r.msg.backend} {r.msg.precision}")
    png = save_bev_figure(Path(args.png), bev_energy_map(r.bev), rig.x.lower, rig.y.lower,
                          rig.x.step, rig.y.step, title=title, label="feature norm (max over z)")
    depth, feat = session.pub.arrays(result.last_index)
    ref = pool_reference(depth, feat, build_scatter_map(rig))
    err = float(np.abs(r.bev.astype(np.float64) - ref).max())
    precision = r.msg.precision
    ratio = error_ratio(r.bev, ref, precision)
    print(f"[demo] BEV picture (metres, x forward = up, ego = green triangle): {png.resolve()}")
    print(f"[demo] last grid vs FP64 reference: max |error| {err:.2e} (max |value| {np.abs(ref).max():.2f}), "
          f"{ratio:.2g} of the {precision} tolerance: {'ok' if ratio <= 1 else 'OUT OF TOLERANCE'}")
    print(f"[demo] bevpool_node exited with code {rc}")
    return 0 if rc == 0 and ratio <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
