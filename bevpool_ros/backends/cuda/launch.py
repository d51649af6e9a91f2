"""The one launch description: which kernel, which grid, which arguments, for every variant.

Both the cuda backend and the benchmark (and a TensorRT plugin's enqueue) take their launches
from here; nothing else computes a grid. Arguments are symbolic: ("buf", name) is a device
buffer the caller binds (depth, feat, out, slots, ...), ("i32"|"u32"|"f32", value) a scalar.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...scatter_map import ScatterMap
from .schedule import V3Schedule

VARIANTS = ("v2", "v2do", "v3")
PRECISION_INPUT = {"fp16": "float16", "fp8": "float8_e4m3"}
REGIMES = ("DRAM-bound", "L2-resident")

V2_BLOCK = 256          # BEVDet's launch
V2DO_THREADS = 1024     # CUDA-BEVFusion's block: (C / pack) x (1024 / (C / pack))


@dataclass(frozen=True)
class KernelInfo:
    name: str
    precision: str   # fp16 | fp8
    tile: int        # channels per thread (V3)
    c_fixed: int = 0  # compiled for this C only (0: any C divisible by tile)
    acc: str = "half2"  # half2 | f32
    streaming: bool = False


V3_KERNELS = {k.name: k for k in (
    KernelInfo("bevpool_v3_fp16_dram", "fp16", 16, acc="half2", streaming=True),
    KernelInfo("bevpool_v3_fp16_dram_f32acc", "fp16", 16, acc="f32", streaming=True),
    KernelInfo("bevpool_v3_fp16_l2", "fp16", 8, acc="half2"),
    KernelInfo("bevpool_v3_fp16_l2_f32acc", "fp16", 8, acc="f32"),
    KernelInfo("bevpool_v3_fp16_t4", "fp16", 4, acc="f32"),
    KernelInfo("bevpool_v3_fp8_c80", "fp8", 16, 80),
    KernelInfo("bevpool_v3_fp8_c128", "fp8", 32, 128),
    KernelInfo("bevpool_v3_fp8_c256", "fp8", 32, 256),
    KernelInfo("bevpool_v3_fp8_t16", "fp8", 16),
    KernelInfo("bevpool_v3_fp8_t8", "fp8", 8),
    KernelInfo("bevpool_v3_fp8_t4", "fp8", 4),
)}
OTHER_KERNELS = ("bevpool_v2_fp16", "bevpool_v2do_pack10_fp16", "bevpool_v2do_pack8_fp16",
                 "bevpool_empty_kernel")
ALL_KERNELS = (*OTHER_KERNELS, *V3_KERNELS)


class UnsupportedShape(ValueError):
    """No kernel of the requested family handles this channel count."""


@dataclass(frozen=True)
class LaunchPlan:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[tuple[str, object], ...]
    zero_output_first: bool  # companion memset (V2, V2+DO) that every timing includes
    out_dtype: str           # float32 | float16

    @property
    def threads(self) -> int:
        g, b = self.grid, self.block
        return g[0] * g[1] * g[2] * b[0] * b[1] * b[2]


def choose_v3_kernel(channels: int, precision: str, regime: str, acc: str = "half2") -> KernelInfo:
    """Kernel family by precision and memory regime, then the widest tile that divides C."""
    if precision == "fp8":
        for k in (f"bevpool_v3_fp8_c{channels}", "bevpool_v3_fp8_t16", "bevpool_v3_fp8_t8", "bevpool_v3_fp8_t4"):
            info = V3_KERNELS.get(k)
            if info and channels % info.tile == 0 and info.c_fixed in (0, channels):
                return info
    elif precision == "fp16":
        suffix = "" if acc == "half2" else "_f32acc"
        prefer = ["bevpool_v3_fp16_dram" + suffix] if regime == "DRAM-bound" else []
        for k in (*prefer, "bevpool_v3_fp16_l2" + suffix, "bevpool_v3_fp16_t4"):
            info = V3_KERNELS[k]
            if channels % info.tile == 0:
                return info
    else:
        raise ValueError(f"precision: expected fp16 or fp8, got {precision!r}")
    raise UnsupportedShape(f"V3 {precision} needs C % 4 == 0, got C = {channels}")


def plan_v3(smap: ScatterMap, sched: V3Schedule, kernel: KernelInfo, out_scale: float = 1.0) -> LaunchPlan:
    C = smap.channels
    if C % kernel.tile or kernel.c_fixed not in (0, C):
        raise UnsupportedShape(f"{kernel.name} cannot run C = {C}")
    grid = (sched.compute_blocks + sched.zero_blocks, C // kernel.tile, 1)
    args = (("buf", "depth"), ("buf", "feat"), ("buf", "slots"), ("buf", "pidx"), ("buf", "empty_cells"),
            ("i32", int(sched.empty_cells.size)), ("i32", sched.compute_blocks), ("i32", C),
            ("f32", float(out_scale)), ("buf", "out"))
    return LaunchPlan(kernel.name, grid, (sched.block, 1, 1), args, False,
                      "float32" if kernel.precision == "fp16" else "float16")


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


def plan_v2do(smap: ScatterMap) -> LaunchPlan:
    C, I = smap.channels, smap.num_intervals
    pack = v2do_pack(C)
    tx = C // pack
    ty = max(1, V2DO_THREADS // tx)
    N, D, H, W = smap.depth_shape
    args = (("buf", "depth"), ("buf", "feat"), ("u32", C), ("buf", "intervals3"), ("u32", I),
            ("buf", "ranks_depth"), ("u32", D), ("u32", H * W), ("buf", "out"))
    return LaunchPlan(f"bevpool_v2do_pack{pack}_fp16", (1, max(1, -(-I // ty)), 1), (tx, ty, 1), args,
                      True, "float32")


def plan_empty() -> LaunchPlan:
    return LaunchPlan("bevpool_empty_kernel", (1, 1, 1), (32, 1, 1), (), False, "float32")
