"""The one launch description: which kernel, which grid, which arguments, for every variant.

The cuda backend, the benchmark and both TensorRT plugins (the Python IPluginV3 and the C++
library) take their launches from here; the grid rule itself is schedule.BlockGrid. Arguments
are symbolic: ("buf", name) is a device
buffer the caller binds (depth, feat, out, slots, ...), ("i32"|"u32"|"f32", value) a scalar.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..scatter_map import ScatterMap
from .schedule import TEAM_FLAG_SHIFT, V3Schedule

VARIANTS = ("v2", "v2do", "v3")


@dataclass(frozen=True)
class PrecisionDtypes:
    """What the kernels of one precision read and write (E4M3 codes travel as uint8)."""
    input: np.dtype
    output: np.dtype
    input_name: str     # the input by its own name: the working-set rule's, the TensorRT plugin's


# the one table: the frames, the operators, the launch plans, the TensorRT plugins read it
PRECISION_DTYPES = {
    "fp16": PrecisionDtypes(np.dtype(np.float16), np.dtype(np.float32), "float16"),
    "fp8": PrecisionDtypes(np.dtype(np.uint8), np.dtype(np.float16), "float8_e4m3"),
}
REGIMES = ("DRAM-bound", "L2-resident")

V2_BLOCK = 256          # BEVDet's launch
V2DO_THREADS = 1024     # CUDA-BEVFusion's block: (C / pack) x (1024 / (C / pack))


@dataclass(frozen=True)
class KernelInfo:
    """One V3 entry point: nvrtc_build generates its extern "C" instantiation from this row."""
    name: str
    precision: str      # fp16 | fp8
    vec: int            # channels per lane
    g_fixed: int = 0    # lanes per group compiled in (0: chosen at launch)
    c_fixed: int = 0    # compiled for this C only (0: any C the geometry fits)
    acc: str = "f32"    # f32 | half2
    streaming: bool = False    # evict-first output stores
    prefetch: bool = False     # next batch's index pairs requested before this batch's products
    depth_pairs: bool = False  # entries may merge two depth bins that share a feature row
    unroll: int = 4            # entries in flight per lane
    max_threads: int = 512     # __launch_bounds__

    @property
    def template_args(self) -> tuple:
        """BEVPOOL_V3_ENTRY's arguments after the name (plugin/bevpool_v3.cuh)."""
        cxx = {True: "true", False: "false"}
        return ("__half" if self.precision == "fp16" else "fp8_e4m3", self.vec, cxx[self.acc == "f32"],
                cxx[self.streaming], self.unroll, self.g_fixed, self.c_fixed, cxx[self.prefetch],
                cxx[self.depth_pairs], self.max_threads)


def _v3(precision: str, family: str, vec: int, g: int = 0, c: int = 0, *, h2: bool = False,
        pf: bool = False, dp: bool = False, **kw) -> KernelInfo:
    """A table row; the name says what differs: _h2acc (__half2 accumulation), _pf (index
    prefetch), _dp (depth pairs). FP8 kernels always accumulate in __half2 per lane."""
    name = f"bevpool_v3_{precision}_{family}" + "_h2acc" * h2 + "_pf" * pf + "_dp" * dp
    acc = "half2" if (h2 or precision == "fp8") else "f32"
    return KernelInfo(name, precision, vec, g, c, acc=acc, prefetch=pf, depth_pairs=dp, **kw)


_FP8_FAMILIES = (("c80", 16, 5, 80), ("c128", 16, 8, 128), ("c256", 32, 8, 256), ("v8", 8, 0, 0))
V3_KERNELS = {k.name: k for k in (
    # FP16, DRAM-bound path: 16 channels per lane, streaming output stores
    _v3("fp16", "dram", 16, streaming=True), _v3("fp16", "dram", 16, h2=True, streaming=True),
    _v3("fp16", "dram", 16, pf=True, streaming=True),
    # FP16, L2-resident path: 8 channels (one LDG.128) per lane, twice the lanes per row
    _v3("fp16", "l2", 8), _v3("fp16", "l2", 8, h2=True), _v3("fp16", "l2", 8, pf=True),
    _v3("fp16", "l2", 8, pf=True, dp=True),
    _v3("fp16", "v4", 4),  # generic narrow (C % 4 == 0)
    # any other C: one 4-byte (C even) or 2-byte (C odd) load per lane; slow, but no C is refused
    _v3("fp16", "v2", 2), _v3("fp16", "v1", 1),
    # FP8 (E4M3 in, FP16 out) per channel count: C=80: 16 channels (one LDG.128) x 5 lanes;
    # C=128: 16 x 8; C=256: 32 channels (two LDG.128) x 8. Generic: 8 (LDG.64) or 4.
    *(_v3("fp8", f, v, g, c) for f, v, g, c in _FP8_FAMILIES),
    *(_v3("fp8", f, v, g, c, pf=True) for f, v, g, c in _FP8_FAMILIES),
    _v3("fp8", "c80", 16, 5, 80, pf=True, dp=True), _v3("fp8", "v8", 8, pf=True, dp=True),
    _v3("fp8", "v4", 4), _v3("fp8", "v2", 2), _v3("fp8", "v1", 1),
)}
# extern "C" kernels written by hand in plugin/*.cuh (not generated from V3_KERNELS)
# the frame path's conversions and checks (plugin/bevpool_convert.cuh, used by backends/gpu/frame.py)
CONVERT_KERNELS = ("bevconv_f32_to_f16", "bevconv_e4m3_to_f16", "bevconv_check_f16", "bevconv_check_e4m3",
                   "bevconv_amax_f32", "bevconv_amax_f16", "bevconv_f32_to_e4m3", "bevconv_f16_to_e4m3",
                   "bevconv_out_f32_to_f16", "bevconv_out_f16_to_f16", "bevconv_out_f16_to_f32",
                   "bevconv_out_f32_to_f32",
                   "bevconv_check_out_f32", "bevconv_expand_depth_f32", "bevconv_expand_depth_f16",
                   "bevconv_expand_depth_e4m3", "bevconv_copy_many", "bevconv_fill_u32")
HANDWRITTEN_KERNELS = ("bevpool_v2_fp16", "bevpool_v2do_pack10_fp16", "bevpool_v2do_pack8_fp16",
                       "bevpool_empty_kernel", *CONVERT_KERNELS)
ALL_KERNELS = (*HANDWRITTEN_KERNELS, *V3_KERNELS)
V3_DEFAULT_THREADS = 256
SMEM_LIMIT = 48 * 1024        # without the opt-in attribute


def entry_points_source() -> str:
    """plugin's bevpool_entries.cuh: one BEVPOOL_V3_ENTRY line per V3_KERNELS row."""
    lines = ["// Generated by bevpool_ros/kernels/table.py (entry_points_source); do not edit.",
             "#pragma once"]
    for k in V3_KERNELS.values():
        lines.append(f"BEVPOOL_V3_ENTRY({k.name}, {', '.join(str(a) for a in k.template_args)})")
    return "\n".join(lines) + "\n"


def compile_defines() -> tuple[str, ...]:
    """-D options: the constants the kernels share with Python, defined here once."""
    return (f"-DBEVPOOL_TEAM_FLAG_SHIFT={TEAM_FLAG_SHIFT}",)


class UnsupportedShape(ValueError):
    """No kernel of the requested family handles this channel count."""


@dataclass(frozen=True)
class V3Geometry:
    """How a V3 kernel covers the channels: G lanes x vec channels per group, `chunks` groups of
    channels over grid.y, groups per warp / per block (the schedule is built for these)."""
    G: int
    chunks: int
    groups_per_warp: int
    groups_per_block: int
    threads: int
    shared_bytes: int


def v3_geometry(channels: int, info: KernelInfo, threads: int = V3_DEFAULT_THREADS) -> V3Geometry:
    if channels % info.vec or info.c_fixed not in (0, channels):
        raise UnsupportedShape(f"{info.name} cannot run C = {channels}")
    per = channels // info.vec
    # lanes per group: the largest divisor of C/vec (<= 32) that keeps >= 3/4 of a warp's lanes
    # busy (each extra channel chunk re-reads the indices); else the best-filling divisor
    divisors = [g for g in range(1, 33) if per % g == 0]
    full = [g for g in divisors if (32 // g) * g >= 24]
    G = info.g_fixed or (max(full) if full else max(divisors, key=lambda g: ((32 // g) * g, g)))
    if per % G:
        raise UnsupportedShape(f"{info.name}: C/vec = {per} not divisible by G = {G}")
    threads = min(threads, info.max_threads)
    while threads > 32 and (threads // 32) * G * info.vec * 4 > SMEM_LIMIT:
        threads //= 2
    warps = threads // 32
    gpw = 32 // G
    return V3Geometry(G, per // G, gpw, warps * gpw, threads, warps * G * info.vec * 4)


@dataclass(frozen=True)
class LaunchPlan:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[tuple[str, object], ...]
    zero_output_first: bool  # companion memset (V2, V2+DO) that every timing includes
    out_dtype: str           # float32 | float16
    shared_bytes: int = 0

    @property
    def threads(self) -> int:
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]


def choose_v3_kernel(channels: int, precision: str, regime: str, acc: str = "f32") -> KernelInfo:
    """Kernel family by precision and memory regime, then the widest vector that divides C
    (the vec-1 rows run every C, so only an unknown precision raises)."""
    if precision == "fp8":
        names = (f"bevpool_v3_fp8_c{channels}", "bevpool_v3_fp8_v8", "bevpool_v3_fp8_v4", "bevpool_v3_fp8_v2",
                 "bevpool_v3_fp8_v1")
    elif precision == "fp16":
        suffix = "" if acc == "f32" else "_h2acc"
        names = (("bevpool_v3_fp16_dram" + suffix,) if regime == "DRAM-bound" else ()) + (
            "bevpool_v3_fp16_l2" + suffix, "bevpool_v3_fp16_v4", "bevpool_v3_fp16_v2", "bevpool_v3_fp16_v1")
    else:
        raise ValueError(f"precision: expected fp16 or fp8, got {precision!r}")
    for k in names:
        info = V3_KERNELS.get(k)
        if info is None:
            continue
        try:
            v3_geometry(channels, info)
            return info
        except UnsupportedShape:
            continue
    raise UnsupportedShape(f"no V3 {precision} kernel runs C = {channels}")


def plan_v3(smap: ScatterMap, sched: V3Schedule, kernel: KernelInfo, geom: V3Geometry,
            out_scale: float = 1.0) -> LaunchPlan:
    C = smap.channels
    if sched.block != geom.groups_per_block or sched.warp != geom.groups_per_warp:
        raise ValueError("schedule was built for another geometry")
    if sched.depth_pairs and not kernel.depth_pairs:
        raise ValueError(f"{kernel.name} cannot read a schedule with depth pairs")
    grid = (sched.compute_blocks + sched.zero_blocks, geom.chunks, 1)
    args = (("buf", "depth"), ("buf", "feat"), ("buf", "slots"), ("buf", "pidx"), ("buf", "empty_cells"),
            ("i32", int(sched.empty_cells.size)), ("i32", sched.compute_blocks), ("i32", C), ("i32", geom.G),
            ("i32", sched.pair_stride), ("f32", float(out_scale)), ("buf", "out"))
    return LaunchPlan(kernel.name, grid, (geom.threads, 1, 1), args, False,
                      PRECISION_DTYPES[kernel.precision].output.name, geom.shared_bytes)


def plan_v2(smap: ScatterMap) -> LaunchPlan:
    C, I = smap.channels, smap.num_intervals
    grid = (max(1, -(-(I * C) // V2_BLOCK)), 1, 1)
    args = (("i32", C), ("i32", I), ("buf", "depth"), ("buf", "feat"), ("buf", "ranks_depth"),
            ("buf", "ranks_feat"), ("buf", "ranks_bev"), ("buf", "interval_starts"),
            ("buf", "interval_lengths"), ("buf", "out"))
    return LaunchPlan("bevpool_v2_fp16", grid, (V2_BLOCK, 1, 1), args, True, "float32")


def v2do_pack(channels: int) -> int:
    if channels % 10 == 0:
        return 10
    if channels % 8 == 0:
        return 8
    raise UnsupportedShape(f"V2+DO needs C % 10 == 0 or C % 8 == 0, got C = {channels}")


def v2do_decodes(smap: ScatterMap) -> bool:
    """V2+DO (as upstream) decodes the feature row from the depth index: camera = i / (D*H*W),
    cell = i % (H*W). It can only run maps whose ranks_feat follow that rule (camera rigs do)."""
    N, D, H, W = smap.depth_shape
    rd = smap.ranks_depth.astype(np.int64)
    return bool(np.array_equal((rd // (D * H * W)) * (H * W) + rd % (H * W), smap.ranks_feat))


def plan_v2do(smap: ScatterMap) -> LaunchPlan:
    C, I = smap.channels, smap.num_intervals
    pack = v2do_pack(C)
    if not v2do_decodes(smap):
        raise UnsupportedShape("V2+DO decodes ranks_feat from ranks_depth; this map's ranks_feat differ")
    tx = C // pack
    ty = max(1, V2DO_THREADS // tx)
    N, D, H, W = smap.depth_shape
    args = (("buf", "depth"), ("buf", "feat"), ("u32", C), ("buf", "intervals3"), ("u32", I),
            ("buf", "ranks_depth"), ("u32", D), ("u32", H * W), ("buf", "out"))
    return LaunchPlan(f"bevpool_v2do_pack{pack}_fp16", (1, max(1, -(-I // ty)), 1), (tx, ty, 1), args,
                      True, "float32")


def plan_empty() -> LaunchPlan:
    return LaunchPlan("bevpool_empty_kernel", (1, 1, 1), (32, 1, 1), (), False, "float32")
