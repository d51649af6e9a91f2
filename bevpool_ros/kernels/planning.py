"""The one derivation of a V3 launch from a map: ``v3_launch`` picks kernel, geometry and k_min
(a ``V3Launch``), which then builds its schedule and plan. Device-free: the schedule's device
buffers belong to whoever runs the plan (device/operator.V3Operator; the TensorRT plugin
binds them as engine inputs).

A tuned ``LaunchChoice`` or explicit overrides pick the kernel and its knobs, else the launch
description chooses by precision and memory regime.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..scatter_map import ScatterMap
from . import table as L
from .schedule import DEFAULT_K_MIN, V3Schedule, build_v3_schedule

# The FP8 kernels write sum * 2^-8; the frame epilogue multiplies by 2^(8 - k_depth - k_feat) with
# the scales' exponents read from device memory, so a new FP8 scale needs no new launch.
FP8_KERNEL_OUT_SCALE = 2.0 ** -8


@dataclass(frozen=True)
class LaunchChoice:
    """The V3 launch measured fastest for one map and precision on one GPU."""

    kernel: str
    k_min: int
    threads: int
    median_us: float = 0.0


@dataclass(frozen=True)
class V3Launch:
    """A V3 launch before any schedule exists: the kernel's row, its geometry, the schedule's k_min."""

    info: L.KernelInfo
    geom: L.V3Geometry
    k_min: int

    @property
    def schedule_key(self) -> tuple[int, int, int, bool]:
        """What the schedule depends on besides the map: two launches of one key share a schedule."""
        return self.geom.groups_per_block, self.geom.groups_per_warp, self.k_min, self.info.depth_pairs

    def schedule(self, smap: ScatterMap) -> V3Schedule:
        block, warp, k_min, pairs = self.schedule_key
        return build_v3_schedule(smap, k_min=k_min, block=block, warp=warp, depth_pairs=pairs)

    def plan(self, smap: ScatterMap, sched: V3Schedule, out_scale: float = 1.0) -> L.LaunchPlan:
        return L.plan_v3(smap, sched, self.info, self.geom, out_scale)


def v3_launch(smap: ScatterMap, precision: str, regime: str, *, choice: LaunchChoice | None = None,
              kernel: str | None = None, acc: str | None = None, k_min: int | None = None,
              threads: int | None = None) -> V3Launch:
    """The V3 launch for ``smap`` at ``precision``: ``choice`` (a measured LaunchChoice) wins over
    ``kernel``/``k_min``/``threads``; without a kernel, precision and regime pick one."""
    if choice is not None:
        kernel, k_min, threads = choice.kernel, choice.k_min, choice.threads
    if kernel:
        info = L.V3_KERNELS[kernel]
    else:
        info = L.choose_v3_kernel(smap.channels, precision, regime, **({} if acc is None else {"acc": acc}))
    geom = L.v3_geometry(smap.channels, info, threads or L.V3_DEFAULT_THREADS)
    return V3Launch(info, geom, k_min or DEFAULT_K_MIN)


def plan_for(smap: ScatterMap, precision: str, regime: str, *, out_scale: float = 1.0, **launch
             ) -> tuple[V3Schedule, L.LaunchPlan]:
    """(schedule, plan) of the V3 launch for ``smap`` at ``precision`` (``launch``: v3_launch's
    choice, kernel, acc, k_min, threads)."""
    spec = v3_launch(smap, precision, regime, **launch)
    sched = spec.schedule(smap)
    return sched, spec.plan(smap, sched, out_scale)
