"""GPU-side state shared by the backend, the benchmark and the GPU tests.

``KernelRuntime``: device + stream + the NVRTC-built module (one per process and device).
``MapOnDevice``: one scatter map's per-calibration device arrays (the five arrays, the V3
schedule, the V2+DO int3 records) and the launch plans over them.
"""
from __future__ import annotations

import logging
from functools import lru_cache

import numpy as np

from ...kernels import table as L
from ...kernels.schedule import DEFAULT_K_MIN, build_v3_schedule, v2do_intervals
from ...regime import classify, working_set_bytes
from ...scatter_map import ScatterMap
from .driver import Device, DeviceArrays, DeviceBuffer, Module, Stream
from .driver import launch as launch_kernel
from .nvrtc_build import get_kernel_image

log = logging.getLogger(__name__)

INPUT_ITEMSIZE = {"fp16": 2, "fp8": 1}
OUTPUT_ITEMSIZE = {"float32": 4, "float16": 2}


class KernelRuntime:
    def __init__(self, ordinal: int = 0):
        self.device = Device(ordinal)
        self.stream = Stream()  # driver.default_stream_priority when the runtime is first made
        self.module = Module(get_kernel_image(self.device.arch))
        log.info("cuda runtime: %s (%s, %d SMs, L2 %.0f MiB)", self.device.name, self.device.arch,
                 self.device.sm_count, self.device.l2_bytes / 2**20)


@lru_cache(maxsize=None)
def get_runtime(ordinal: int = 0) -> KernelRuntime:
    return KernelRuntime(ordinal)


def regime_for(smap: ScatterMap, precision: str, l2_bytes: int) -> str:
    dtype = L.PRECISION_INPUT[precision]
    return classify(working_set_bytes(smap, dtype), l2_bytes)


class MapOnDevice:
    def __init__(self, rt: KernelRuntime, smap: ScatterMap, k_min: int = DEFAULT_K_MIN,
                 threads: int = L.V3_DEFAULT_THREADS):
        smap.validate()  # a bad index never reaches a kernel
        self.rt, self.smap = rt, smap
        self.k_min, self.threads = k_min, threads
        self._scheds = {}
        self.sched = self.schedule(L.choose_v3_kernel(smap.channels, "fp16", "L2-resident"))
        arrays = {k: getattr(smap, k) for k in ("ranks_depth", "ranks_feat", "ranks_bev",
                                                 "interval_starts", "interval_lengths")}
        arrays.update(intervals3=v2do_intervals(smap), pidx=self.sched.pidx, empty_cells=self.sched.empty_cells)
        self.arrays = DeviceArrays.upload(arrays, rt.stream)

    def schedule(self, info: L.KernelInfo, threads: int | None = None, k_min: int | None = None):
        """The V3 schedule for a kernel's geometry and entry kind (built once; slots and
        depth-pair entries uploaded lazily)."""
        g = L.v3_geometry(self.smap.channels, info, threads or self.threads)
        return self._schedule_for(self.smap, g.groups_per_block, g.groups_per_warp, k_min or self.k_min,
                                  info.depth_pairs)

    def sched_for(self, kernel: str, threads: int | None = None, k_min: int | None = None):
        return self.schedule(L.V3_KERNELS[kernel], threads, k_min)

    def free(self) -> None:
        for buf in self.arrays.buffers.values():
            buf.free()
        self.arrays.buffers.clear()

    def regime(self, precision: str) -> str:
        return regime_for(self.smap, precision, self.rt.device.l2_bytes)

    def plan(self, variant: str, precision: str = "fp16", *, acc: str = "f32", kernel: str | None = None,
             out_scale: float = 1.0, threads: int | None = None, k_min: int | None = None,
             choice=None) -> L.LaunchPlan:
        if variant == "v2":
            return L.plan_v2(self.smap)
        if variant == "v2do":
            return L.plan_v2do(self.smap)
        if variant != "v3":
            raise ValueError(f"variant: expected one of {L.VARIANTS}, got {variant!r}")
        from ...kernels.planning import plan_for

        _, plan = plan_for(self.smap, precision, self.regime(precision), choice=choice, kernel=kernel, acc=acc,
                           k_min=k_min or self.k_min, threads=threads or self.threads, out_scale=out_scale,
                           schedule=self._schedule_for, buffers=self._buffers_for)
        return plan

    def _schedule_for(self, smap, block: int, warp: int, k_min: int, depth_pairs: bool = False):
        """Schedules built once per geometry and entry kind; uploaded when a plan first binds them."""
        key = (block, warp, k_min, depth_pairs)
        if key not in self._scheds:
            self._scheds[key] = build_v3_schedule(smap, k_min=k_min, block=block, warp=warp,
                                                  depth_pairs=depth_pairs)
        return self._scheds[key]

    def _buffers_for(self, sched) -> tuple[str, str]:
        """(slots, pidx) device buffer names of a schedule; depth-pair entries have their own pidx."""
        (b, w, k, pairs), = [key for key, s in self._scheds.items() if s is sched]
        slots = self._upload_once(f"slots_{b}_{w}_{k}" + "_pairs" * pairs, sched.slots)
        return slots, self._upload_once("pidx_pairs", sched.pidx) if pairs else "pidx"

    def _upload_once(self, name: str, array: np.ndarray) -> str:
        if name not in self.arrays.buffers:
            self.arrays.buffers.update(DeviceArrays.upload({name: array}, self.rt.stream).buffers)
        return name

    def io_buffers(self, precision: str, out_dtype: str) -> dict:
        s = self.smap
        n_in = INPUT_ITEMSIZE[precision]
        return {"depth": DeviceBuffer(s.num_depth * n_in),
                "feat": DeviceBuffer(s.num_feat_rows * s.channels * n_in),
                "out": DeviceBuffer(s.num_cells * s.channels * OUTPUT_ITEMSIZE[out_dtype])}

    def enqueue(self, plan: L.LaunchPlan, io: dict, stream: Stream | None = None) -> None:
        """The per-frame device work of one variant: (companion memset +) the kernel."""
        stream = stream or self.rt.stream
        if plan.zero_output_first:
            stream.memset8(io["out"], 0, io["out"].nbytes)
        launch_kernel(self.rt.module, plan, {**self.arrays.buffers, **io}, stream)

    def run(self, plan: L.LaunchPlan, depth: np.ndarray, feat: np.ndarray, poison: bool = True) -> np.ndarray:
        """Upload, poison the output (NaN bytes), run once, download: for tests and checks."""
        precision = "fp8" if depth.dtype == np.uint8 else "fp16"
        io = self.io_buffers(precision, plan.out_dtype)
        st = self.rt.stream
        for name, arr in (("depth", depth), ("feat", feat)):
            a = np.ascontiguousarray(arr)
            st.h2d(io[name], a.ctypes.data, a.nbytes)
        if poison:
            st.memset8(io["out"], 0xFF, io["out"].nbytes)
        self.enqueue(plan, io, st)
        out = np.empty(self.smap.bev_shape, dtype=np.dtype(plan.out_dtype))
        st.d2h(out.ctypes.data, io["out"], out.nbytes)
        st.synchronize()
        for b in io.values():
            b.free()
        return out

    def time(self, plan: L.LaunchPlan, depth: np.ndarray, feat: np.ndarray, rotate: bool = True,
             inner: int = 32, reps: int = 100) -> dict:
        """Graph-replay timing of one plan (timing.time_graph). With ``rotate``, enough input/output
        sets to cover twice the L2 are cycled, so no launch finds its inputs left in L2 by itself."""
        from .timing import rotation_sets, time_graph

        precision = "fp8" if depth.dtype == np.uint8 else "fp16"
        probe = self.io_buffers(precision, plan.out_dtype)
        set_bytes = sum(b.nbytes for b in probe.values())
        for b in probe.values():
            b.free()
        R = rotation_sets(set_bytes, self.rt.device.l2_bytes) if rotate else 1
        st, ios = self.rt.stream, []
        try:
            for _ in range(R):
                io = self.io_buffers(precision, plan.out_dtype)
                st.h2d(io["depth"], depth.ctypes.data, depth.nbytes)
                st.h2d(io["feat"], feat.ctypes.data, feat.nbytes)
                st.memset8(io["out"], 0xFF, io["out"].nbytes)
                ios.append(io)
            st.synchronize()
            n_inner = R * -(-inner // R)
            res = time_graph(st, lambda i, s: self.enqueue(plan, ios[i % R], s), inner=n_inner, reps=reps)
        finally:
            for io in ios:
                for b in io.values():
                    b.free()
        res["rotation_sets"] = R
        return res
