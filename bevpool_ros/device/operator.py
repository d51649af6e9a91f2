"""Operators: one launch plan and the device buffers it binds, owned together.

``V3Operator`` (one map, one precision, one launch): the launch (kernels/planning.V3Launch), its
schedule, its plan and the schedule's device arrays (slots, pidx, empty_cells). The cuda
backend's pooling step is one, each autotune candidate is one. ``operator_for`` also makes the
V2 and V2+DO baselines over the map's five arrays (the benchmark, the GPU tests).

Every operator enqueues into the caller's ``depth``, ``feat`` and ``out`` bindings, and can run
once or be timed on buffers of its own (``run``, ``time``).
"""
from __future__ import annotations

import numpy as np

from ..kernels import table as L
from ..kernels.planning import V3Launch, v3_launch
from ..kernels.schedule import V3Schedule, v2do_intervals
from ..scatter_map import ScatterMap
from .driver import DeviceArrays, DeviceBuffer, Stream
from .driver import launch as launch_kernel
from .runtime import KernelRuntime, regime_for

IO = ("depth", "feat", "out")  # the caller's bindings; every other buffer is the operator's


class Operator:
    """A launch plan over device arrays it uploaded itself (the plan's non-IO buffers)."""

    schedule: V3Schedule | None = None

    def __init__(self, rt: KernelRuntime, smap: ScatterMap, precision: str, plan: L.LaunchPlan, arrays: dict):
        smap.validate()  # a bad index never reaches a kernel (min/max per array: cheap)
        self.rt, self.smap, self.precision, self.plan = rt, smap, precision, plan
        bound = {value for kind, value in plan.args if kind == "buf"} - set(IO)
        self.buffers = DeviceArrays.upload({k: arrays[k] for k in sorted(bound)}, rt.stream).buffers
        rt.module.function(plan.kernel)  # resolved now: not while a frame graph is captured

    def enqueue(self, stream: Stream, io: dict) -> None:
        """The per-frame device work: (companion memset +) the kernel, into ``io`` (depth, feat, out)."""
        if self.plan.zero_output_first:
            stream.memset8(io["out"], 0, io["out"].nbytes)
        launch_kernel(self.rt.module, self.plan, {**self.buffers, **io}, stream)

    def io_buffers(self) -> dict:
        s, n_in = self.smap, L.PRECISION_DTYPES[self.precision].input.itemsize
        return {"depth": DeviceBuffer(s.num_depth * n_in),
                "feat": DeviceBuffer(s.num_feat_rows * s.channels * n_in),
                "out": DeviceBuffer(s.num_cells * s.channels * np.dtype(self.plan.out_dtype).itemsize)}

    def run(self, depth: np.ndarray, feat: np.ndarray, poison: bool = True) -> np.ndarray:
        """Upload, poison the output (NaN bytes), run once, download: for tests and checks."""
        io = self.io_buffers()
        st = self.rt.stream
        for name, arr in (("depth", depth), ("feat", feat)):
            a = np.ascontiguousarray(arr)
            st.h2d(io[name], a.ctypes.data, a.nbytes)
        if poison:
            st.memset8(io["out"], 0xFF, io["out"].nbytes)
        self.enqueue(st, io)
        out = np.empty(self.smap.bev_shape, dtype=np.dtype(self.plan.out_dtype))
        st.d2h(out.ctypes.data, io["out"], out.nbytes)
        st.synchronize()
        for b in io.values():
            b.free()
        return out

    def time(self, depth: np.ndarray, feat: np.ndarray, rotate: bool = True, inner: int = 32,
             reps: int = 100) -> dict:
        """Graph-replay timing (timing.time_graph). With ``rotate``, enough input/output sets to
        cover twice the L2 are cycled, so no launch finds its inputs left in L2 by itself."""
        from .timing import rotation_sets, time_graph

        probe = self.io_buffers()
        set_bytes = sum(b.nbytes for b in probe.values())
        for b in probe.values():
            b.free()
        R = rotation_sets(set_bytes, self.rt.device.l2_bytes) if rotate else 1
        st, ios = self.rt.stream, []
        try:
            for _ in range(R):
                io = self.io_buffers()
                st.h2d(io["depth"], depth.ctypes.data, depth.nbytes)
                st.h2d(io["feat"], feat.ctypes.data, feat.nbytes)
                st.memset8(io["out"], 0xFF, io["out"].nbytes)
                ios.append(io)
            st.synchronize()
            n_inner = R * -(-inner // R)
            res = time_graph(st, lambda i, s: self.enqueue(s, ios[i % R]), inner=n_inner, reps=reps)
        finally:
            for io in ios:
                for b in io.values():
                    b.free()
        res["rotation_sets"] = R
        return res

    def free(self) -> None:
        for buf in self.buffers.values():
            buf.free()
        self.buffers = {}


class V3Operator(Operator):
    """One map's V3 launch at one precision: schedule, plan and the schedule's device arrays.

    ``schedule``: one already built for this launch's ``schedule_key`` (the tuner shares them
    between kernels of one geometry); built here otherwise.
    """

    def __init__(self, rt: KernelRuntime, smap: ScatterMap, precision: str, launch: V3Launch, *,
                 out_scale: float = 1.0, schedule: V3Schedule | None = None):
        self.launch = launch
        self.schedule = schedule if schedule is not None else launch.schedule(smap)
        plan = launch.plan(smap, self.schedule, out_scale)
        s = self.schedule
        super().__init__(rt, smap, precision, plan, {"slots": s.slots, "pidx": s.pidx, "empty_cells": s.empty_cells})

    @classmethod
    def build(cls, rt: KernelRuntime, smap: ScatterMap, precision: str, *, out_scale: float = 1.0,
              schedule: V3Schedule | None = None, **launch) -> "V3Operator":
        """``launch``: kernels/planning.v3_launch's choice, kernel, acc, k_min, threads; the
        regime (which kernel family, when none is named) is this GPU's for the map."""
        spec = v3_launch(smap, precision, regime_for(smap, precision, rt.device.l2_bytes), **launch)
        return cls(rt, smap, precision, spec, out_scale=out_scale, schedule=schedule)

    @property
    def regime(self) -> str:
        return regime_for(self.smap, self.precision, self.rt.device.l2_bytes)

    def describe(self) -> dict:
        plan, s = self.plan, self.schedule
        return {"kernel": plan.kernel, "grid": list(plan.grid), "block": list(plan.block),
                "points_per_slot": s.points_per_slot, "teams": s.num_teams}


def operator_for(rt: KernelRuntime, smap: ScatterMap, variant: str, precision: str = "fp16",
                 **launch) -> Operator:
    """An operator of ``variant``: v3 (V3Operator.build with ``launch``), or the V2 / V2+DO
    baselines (FP16, over the map's arrays; ``launch`` ignored)."""
    if variant == "v3":
        return V3Operator.build(rt, smap, precision, **launch)
    if variant == "v2":
        plan = L.plan_v2(smap)
    elif variant == "v2do":
        plan = L.plan_v2do(smap)
    else:
        raise ValueError(f"variant: expected one of {L.VARIANTS}, got {variant!r}")
    arrays = {k: getattr(smap, k) for k in ("ranks_depth", "ranks_feat", "ranks_bev", "interval_starts",
                                            "interval_lengths")}
    if variant == "v2do":
        arrays["intervals3"] = v2do_intervals(smap)
    return Operator(rt, smap, "fp16", plan, arrays)
