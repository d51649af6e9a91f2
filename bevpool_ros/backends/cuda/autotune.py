"""Per-map V3 launch choice by measurement: kernel family x points per slot (k_min) x block size.

The H200 sweeps (docs/kernels.md) showed no single setting wins everywhere: cutting intervals
finer helps blog-like maps and hurts long-interval rig maps, and the block size that wins moves
with the channel count. So, like ``precision: auto``, the choice is measured once per (GPU, map)
with graph replay on rotated random inputs, kept, and logged. Candidates stay few (a dozen
graph timings of ~30 replays: well under a second per map).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from . import fp8
from . import launch as L

log = logging.getLogger(__name__)

K_MIN_CHOICES = (8, 16, 32)
THREAD_CHOICES = (128, 256)


@dataclass(frozen=True)
class V3Choice:
    kernel: str
    k_min: int
    threads: int
    median_us: float


def candidate_kernels(channels: int, precision: str, regime: str) -> list[str]:
    """The regime's kernel first, then the other fp16 family (both accumulate in FP32)."""
    first = L.choose_v3_kernel(channels, precision, regime)
    names = [first.name]
    if precision == "fp16":
        other = "DRAM-bound" if regime == "L2-resident" else "L2-resident"
        names.append(L.choose_v3_kernel(channels, precision, other).name)
    else:
        for k in ("bevpool_v3_fp8_v8",):
            try:
                L.v3_geometry(channels, L.V3_KERNELS[k])
                names.append(k)
            except L.UnsupportedShape:
                pass
    names += [n + "_pf" for n in names if n + "_pf" in L.V3_KERNELS]  # index-prefetch twins
    return list(dict.fromkeys(names))


def tune_v3(md, precision: str, reps: int = 30, seed: int = 0) -> tuple[V3Choice, list[dict]]:
    smap = md.smap
    rng = np.random.default_rng(seed)
    d = rng.random(smap.depth_shape)
    f = rng.uniform(-1, 1, smap.feat_shape)
    if precision == "fp16":
        d, f, scale = d.astype(np.float16), f.astype(np.float16), 1.0
    else:
        s_d, s_f = fp8.pow2_scale(d), fp8.pow2_scale(f)
        d, f, scale = fp8.quantize(d, s_d), fp8.quantize(f, s_f), 1.0 / (s_d * s_f)
    table = []
    for kernel in candidate_kernels(smap.channels, precision, md.regime(precision)):
        for k_min in K_MIN_CHOICES:
            for threads in THREAD_CHOICES:
                plan = md.plan("v3", precision, kernel=kernel, k_min=k_min, threads=threads, out_scale=scale)
                t = md.time(plan, d, f, rotate=True, reps=reps)["median_us"]
                table.append({"kernel": kernel, "k_min": k_min, "threads": plan.block[0], "median_us": t})
    best = min(table, key=lambda r: r["median_us"])
    choice = V3Choice(best["kernel"], best["k_min"], best["threads"], best["median_us"])
    log.info("v3 autotune %s %s: %s (k_min %d, %d threads) %.2f us of %d candidates", smap.key, precision,
             choice.kernel, choice.k_min, choice.threads, choice.median_us, len(table))
    return choice, table
