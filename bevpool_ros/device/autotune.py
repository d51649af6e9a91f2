"""Per-map V3 launch choice by measurement, in two stages.

The H200 sweeps (docs/kernels.md) showed no single setting wins everywhere: cutting intervals
finer helps blog-like maps and hurts long-interval rig maps, the block size that wins moves with
the channel count, and depth pairs pay only on maps with many of them. So, like
``precision: auto``, the choice is measured once per (GPU, map) with graph
replay on rotated random inputs, kept, and logged:

1. the schedule: the base kernel at every k_min x block size;
2. the kernel: every variant of the precision's families at stage 1's best schedule.

About twenty graph timings of ~30 replays: well under a second per map on the H200.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..kernels import fp8
from ..kernels import table as L
from ..kernels.planning import v3_launch
from .operator import V3Operator
from .runtime import regime_for

log = logging.getLogger(__name__)

K_MIN_CHOICES = (8, 16, 32, 64, 128)
THREAD_CHOICES = (64, 128, 256)
# stage 2: the variants of the main family worth measuring (suffixes of launch.V3_KERNELS names)
VARIANT_SUFFIXES = ("", "_pf", "_pf_dp")


@dataclass(frozen=True)
class V3Choice:
    kernel: str
    k_min: int
    threads: int
    median_us: float


def _fits(channels: int, name: str) -> bool:
    try:
        L.v3_geometry(channels, L.V3_KERNELS[name])
        return True
    except (KeyError, L.UnsupportedShape):
        return False


def candidate_kernels(channels: int, precision: str, regime: str) -> list[str]:
    """Stage 2's kernels; the first is stage 1's base (index prefetch; for FP16 the L2-path
    family whatever the regime: it won every H200 workload, docs/kernels.md)."""
    families = [L.choose_v3_kernel(channels, precision, regime).name]
    if precision == "fp16":
        families = list(dict.fromkeys([L.choose_v3_kernel(channels, precision, r).name
                                       for r in ("L2-resident", "DRAM-bound")]))
    elif _fits(channels, "bevpool_v3_fp8_v8"):
        families.append("bevpool_v3_fp8_v8")
    # every variant of the main family; the other family's plain and prefetch kernels
    names = [families[0] + s for s in VARIANT_SUFFIXES if _fits(channels, families[0] + s)]
    names += [f + s for f in families[1:] for s in ("", "_pf") if _fits(channels, f + s)]
    base = families[0] + "_pf" if families[0] + "_pf" in names else families[0]
    return list(dict.fromkeys([base, *names]))


def random_inputs(smap, precision: str, seed: int):
    rng = np.random.default_rng(seed)
    d = rng.random(smap.depth_shape)
    f = rng.uniform(-1, 1, smap.feat_shape)
    if precision == "fp16":
        return d.astype(np.float16), f.astype(np.float16), 1.0
    s_d, s_f = fp8.pow2_scale(d), fp8.pow2_scale(f)
    return fp8.quantize(d, s_d), fp8.quantize(f, s_f), 1.0 / (s_d * s_f)


def tune_v3(rt, smap, precision: str, reps: int = 30, seed: int = 0, exclude: tuple[str, ...] = ()
            ) -> tuple[V3Choice, list[dict]]:
    """Each candidate is a V3Operator of its own, freed once timed; schedules are built once per
    geometry (stage 2's kernels mostly share stage 1's best)."""
    d, f, scale = random_inputs(smap, precision, seed)
    regime = regime_for(smap, precision, rt.device.l2_bytes)
    kernels = [k for k in candidate_kernels(smap.channels, precision, regime) if k not in exclude]
    table, schedules = [], {}

    def measure(kernel: str, k_min: int, threads: int) -> None:
        launch = v3_launch(smap, precision, regime, kernel=kernel, k_min=k_min, threads=threads)
        sched = schedules.get(launch.schedule_key)
        if sched is None:
            sched = schedules[launch.schedule_key] = launch.schedule(smap)
        op = V3Operator(rt, smap, precision, launch, out_scale=scale, schedule=sched)
        try:
            t = op.time(d, f, rotate=True, reps=reps)["median_us"]
        finally:
            op.free()
        table.append({"kernel": kernel, "k_min": k_min, "threads": op.plan.block[0], "median_us": t})

    for k_min in K_MIN_CHOICES:
        for threads in THREAD_CHOICES:
            measure(kernels[0], k_min, threads)
    s1 = min(table, key=lambda r: r["median_us"])
    for kernel in kernels[1:]:
        measure(kernel, s1["k_min"], s1["threads"])
    best = min(table, key=lambda r: r["median_us"])
    choice = V3Choice(best["kernel"], best["k_min"], best["threads"], best["median_us"])
    log.info("v3 autotune %s %s: %s (k_min %d, %d threads) %.2f us of %d candidates", smap.key,
             precision, choice.kernel, choice.k_min, choice.threads, choice.median_us, len(table))
    return choice, table
