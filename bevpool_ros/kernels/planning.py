"""``plan_for``: the one derivation of a V3 launch (kernel, geometry, schedule, plan) from a map.

The cuda backend (runtime.MapOnDevice) and the TensorRT plugin config both call it; a tuned
``LaunchChoice`` or explicit overrides pick the kernel and its knobs, else the launch
description chooses by precision and memory regime.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..scatter_map import ScatterMap
from . import table as L
from .schedule import DEFAULT_K_MIN, V3Schedule, build_v3_schedule

# The FP8 kernels write sum * 2^-8; the frame epilogue multiplies by 2^(8 - k_depth - k_feat) with
# the scales' exponents read from device memory, so a new FP8 scale needs no new launch.
FP8_KERNEL_OUT_SCALE = 2.0 ** -8


def default_schedule(smap: ScatterMap, block: int, warp: int, k_min: int, depth_pairs: bool = False) -> V3Schedule:
    return build_v3_schedule(smap, k_min=k_min, block=block, warp=warp, depth_pairs=depth_pairs)


@dataclass(frozen=True)
class LaunchChoice:
    """The V3 launch measured fastest for one map and precision on one GPU."""

    kernel: str
    k_min: int
    threads: int
    median_us: float = 0.0


def plan_for(smap: ScatterMap, precision: str, regime: str, *, choice: LaunchChoice | None = None,
             kernel: str | None = None, acc: str | None = None, k_min: int | None = None,
             threads: int | None = None, out_scale: float = 1.0,
             buffers: tuple[str, str] | Callable[[V3Schedule], tuple[str, str]] = ("slots", "pidx"),
             schedule: Callable[..., V3Schedule] = default_schedule
             ) -> tuple[V3Schedule, L.LaunchPlan]:
    """(schedule, plan) of the V3 launch for ``smap`` at ``precision``.

    ``choice`` (a measured LaunchChoice) wins over ``kernel``/``k_min``/``threads``; ``schedule``
    lets a caller reuse schedules it already built (same arguments, same result), and
    ``buffers`` names the device buffers holding that schedule's slots and entries (slots, pidx).
    """
    if choice is not None:
        kernel, k_min, threads = choice.kernel, choice.k_min, choice.threads
    if kernel:
        info = L.V3_KERNELS[kernel]
    else:
        info = L.choose_v3_kernel(smap.channels, precision, regime, **({} if acc is None else {"acc": acc}))
    geom = L.v3_geometry(smap.channels, info, threads or L.V3_DEFAULT_THREADS)
    sched = schedule(smap, geom.groups_per_block, geom.groups_per_warp, k_min or DEFAULT_K_MIN, info.depth_pairs)
    slots, pidx = buffers(sched) if callable(buffers) else buffers
    return sched, L.plan_v3(smap, sched, info, geom, out_scale, slots, pidx)
