"""One frame on the GPU, shared by the cuda and tensorrt backends: one copy in, one copy out.

Per frame the host does three things: copy each camera's payload, as it arrived, into its slot
of a pinned staging buffer (staging.CameraStaging); replay one CUDA graph; wait and read one
flag word. The graph holds everything else:

    H2D depth, feat (wire dtype)            [no copy on an integrated GPU: mapped memory]
    depth images -> distributions           (metres at the feature grid, 1/D of the bytes, expanded
                                             into their depth slots: metric_depth.py)
    convert -> kernel input on the device   (float32 -> float16; float -> E4M3 with the power-of-two
                                             scale computed on the device from the frame's amax)
    value checks (NaN/Inf, FP16 range)      -> flag bits (input.check_finite)
    the pooling step                        (cuda: the V3 launch; tensorrt: the engine)
    epilogue -> the published dtype         (FP8: x 2^(8 - k_depth - k_feat), exponents read from
                                             device memory: a new scale needs no re-capture)
    D2H of the BEV into the caller's array  (the message payload: registered once, no host copy)
    D2H of the flag word

One graph is captured per (staged layout: wire dtypes and depth-image slots, output array): in a
deployment that is one graph, captured on the first frame, in whatever thread calls (driver.bind).
"""
from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...device.driver import DeviceBuffer, FrameTimer, Graph, HostRegistration, PinnedBuffer, launch_args
from ...errors import NonFiniteInput, NonFiniteOutput, check_out
from ...kernels.planning import FP8_KERNEL_OUT_SCALE
from ...kernels.table import CONVERT_KERNELS, PRECISION_DTYPES
from ...scatter_map import ScatterMap
from ..staging import ALL_WIRE, CameraStaging, Staged
from . import kernel_copies

log = logging.getLogger(__name__)

FLAG_INPUT = 1    # bevpool_convert.cuh: BEVPOOL_FLAG_INPUT_NONFINITE
FLAG_OUTPUT = 2   # BEVPOOL_FLAG_OUTPUT_NONFINITE
_SUFFIX = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.uint8): "e4m3"}
_THREADS = 256
HOST_MEMORY = ("auto", "copy", "mapped")


def choose_host_memory(integrated: bool, can_map_host: bool, requested: str = "auto") -> str:
    """'mapped' (kernels use pinned host memory in place, no copies) where host and device share
    one memory (an integrated GPU: DRIVE Thor, Jetson) and it can be mapped; 'copy' otherwise."""
    if requested not in HOST_MEMORY:
        raise ValueError(f"host_memory: expected one of {HOST_MEMORY}, got {requested!r}")
    if requested == "mapped" and not can_map_host:
        raise ValueError("host_memory: mapped asked for, but this GPU cannot map host memory")
    if requested != "auto":
        return requested
    return "mapped" if integrated and can_map_host else "copy"


def pow2_exponent(scale: float) -> int:
    """log2 of a power-of-two FP8 scale (the documented rule only makes those)."""
    m, e = math.frexp(float(scale))
    if m != 0.5:
        raise ValueError(f"fp8 scale {scale} is not a power of two")
    return e - 1


def slot_runs(count: int, skip=(), keep=None) -> list[tuple[int, int]]:
    """(first, length) runs of consecutive slots in range(count): those in ``keep`` (when given),
    else those not in ``skip``; one copy or launch per run instead of one per slot."""
    chosen = [n for n in range(count) if (n in keep if keep is not None else n not in skip)]
    runs: list[list[int]] = []
    for n in chosen:
        if runs and runs[-1][0] + runs[-1][1] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    return [tuple(r) for r in runs]


@dataclass(frozen=True)
class FrameTiming:
    """One frame: host wall time from its submission to its completion seen by the host, and the
    device time between its work's first and last timing event (None if unreadable). On a GPU
    time-sliced with another process the latter includes the other's slices when the frame was
    switched out midway: node/gpu_share.py takes the least of recent frames as the reference."""

    wall_ms: float
    device_ms: float | None


@dataclass(frozen=True)
class DeviceOutput:
    """Where the published-dtype BEV of the last frame lives on the device (for a zero-copy
    consumer): valid until the next frame. ``stream`` is the frame's CUstream handle (work
    enqueued there runs after the frame's), ``device`` the driver.Device it belongs to."""

    ptr: int
    nbytes: int
    dtype: np.dtype
    shape: tuple
    stream: object
    device: object


class _Ptr:
    """An address as launch bindings take it."""

    def __init__(self, ptr: int):
        self.ptr = int(ptr)


class GpuFrame:
    """Device buffers, staging and frame graphs of one map at one kernel precision.

    ``enqueue_kernel(stream, bindings)`` records the pooling step reading ``bindings['depth']``,
    ``bindings['feat']`` (kernel input dtype) and writing ``bindings['out']`` (its output dtype, PRECISION_DTYPES); an
    FP8 step must run with out_scale FP8_KERNEL_OUT_SCALE.
    """

    def __init__(self, rt, smap: ScatterMap, precision: str, enqueue_kernel: Callable, *,
                 check_finite: bool = True, host_memory: str = "auto", fp8_scales=(1.0, 1.0)):
        self.rt, self.smap, self.precision = rt, smap, precision
        self.enqueue_kernel = enqueue_kernel
        self._graphs: dict[tuple, tuple[Graph, DeviceOutput]] = {}
        self.check_finite = check_finite
        dev = rt.device
        self.host_memory = choose_host_memory(dev.integrated, dev.can_map_host, host_memory)
        self.integrated = bool(dev.integrated)
        mapped = self.host_memory == "mapped"
        self._pinned = []

        def alloc(nbytes):
            buf = PinnedBuffer((nbytes,), np.uint8, mapped=mapped)
            self._pinned.append(buf)
            return buf.array

        # depth images expand into float16 slots (exact for one-hot; FP8 quantises them with the
        # device amax like any float16 stream) unless distribution cameras set the stream's dtype
        self.staging = CameraStaging(smap.depth_shape, smap.feat_shape, alloc, allowed=ALL_WIRE,
                                     metric_dtype=np.float16)
        self._region_buf = dict(zip(self.staging.regions, self._pinned))
        self.kin, self.kout = PRECISION_DTYPES[precision].input, PRECISION_DTYPES[precision].output
        n_in = {"depth": smap.num_depth, "feat": smap.num_feat_rows * smap.channels}
        self.n = {**n_in, "out": smap.num_cells * smap.channels}
        self._kin = {s: DeviceBuffer(n * self.kin.itemsize) for s, n in n_in.items()}
        self._raw: dict[str, DeviceBuffer] = {}       # wire-dtype copies awaiting conversion
        self._metric: DeviceBuffer | None = None       # depth images' metres (not on mapped memory)
        self._kout = DeviceBuffer(self.n["out"] * self.kout.itemsize)
        self._bev: dict[np.dtype, DeviceBuffer] = {}  # published dtype != kernel output dtype
        # device scratch: flags (u32) | amax depth, feat (u32 bits) | k depth, feat (i32)
        self._scratch = DeviceBuffer(32)
        # host, mapped: k depth, k feat (raw E4M3) | flags; read and written by kernels (kernel_copies.py)
        self._small = PinnedBuffer((4,), np.int32, mapped=True)
        self._own_out: dict[np.dtype, PinnedBuffer] = {}
        self._registered: dict[int, HostRegistration] = {}
        self.after_frame: list[Callable[[DeviceOutput], None]] = []
        self.last_output: DeviceOutput | None = None
        self.last_timing: FrameTiming | None = None
        self._timer: FrameTimer | None = None
        self.fp8_scales = fp8_scales

    # --- configuration ---------------------------------------------------------------------------
    @property
    def check_finite(self) -> bool:
        return self._check_finite

    @check_finite.setter
    def check_finite(self, on: bool) -> None:
        """Input value checks in the graph (input.check_finite); a change re-captures on the next frame."""
        if getattr(self, "_check_finite", None) is not None and bool(on) != self._check_finite:
            self._drop_graphs(lambda k: True)
        self._check_finite = bool(on)

    @property
    def fp8_scales(self) -> tuple[float, float]:
        return self._fp8_scales

    @fp8_scales.setter
    def fp8_scales(self, scales) -> None:
        """Scales that raw E4M3 inputs carry (powers of two); read by the graph every frame."""
        k = (pow2_exponent(scales[0]), pow2_exponent(scales[1]))
        self._fp8_scales = (float(scales[0]), float(scales[1]))
        self._small.array[:2] = k

    # --- per frame -------------------------------------------------------------------------------
    def run(self, cameras, out: np.ndarray | None = None) -> np.ndarray:
        """Stage, replay, sync, check the flags; the BEV lands in ``out`` (or a fresh array)."""
        if out is not None:
            check_out(self.smap, out)
        staged = self.staging.stage(cameras)  # header checks: refused before any device work
        target = out if out is not None else self.own_output(self.kout).array
        graph, dev_out = self._graph(staged, target)
        with self.timed(self.rt.stream):
            graph.replay()
            self.last_output = dev_out
            for hook in self.after_frame:
                hook(dev_out)
        flags = int(self._small.array[2])
        if flags & FLAG_INPUT:
            raise NonFiniteInput("inputs hold NaN/Inf (or values beyond FP16's range)")
        if flags & FLAG_OUTPUT:
            raise NonFiniteOutput(f"{self.precision} grid holds NaN/Inf (overflow of the published dtype?)")
        return out if out is not None else target.copy()

    @contextmanager
    def timed(self, stream):
        """Around a frame's submission: its work between two timing events, then the frame's one
        host wait; ``last_timing`` says how long the frame was on the device and how long it
        waited for it (FrameTiming)."""
        if self._timer is None:
            self._timer = FrameTimer()
        submitted = time.perf_counter()
        self._timer.begin(stream.handle)
        yield
        self._timer.finish(stream.handle)
        stream.synchronize()
        wall_ms = (time.perf_counter() - submitted) * 1e3
        self.last_timing = FrameTiming(wall_ms, self._timer.device_ms())

    # --- graphs ----------------------------------------------------------------------------------
    def _graph(self, staged: Staged, target: np.ndarray):
        key = (staged, target.dtype, target.ctypes.data, target.nbytes)
        hit = self._graphs.get(key)
        if hit is None:
            host = self.host_target(target)
            self._allocate(staged, target.dtype)  # nothing may allocate while a stream is captured
            recorded = {}
            graph = Graph(self.rt.stream, lambda s: recorded.update(out=self._record(s, staged, target.dtype, host)))
            hit = self._graphs[key] = (graph, recorded["out"])
            log.debug("frame graph captured: wire %s/%s, depth images in slots %s -> %s (%s memory)", staged.depth,
                      staged.feat, list(staged.image_cameras), target.dtype, self.host_memory)
        return hit

    def host_target(self, target: np.ndarray):
        """The output array as the graph sees it: pinned (ours) or registered (the caller's)."""
        for buf in self._own_out.values():
            if buf.array is target:
                return buf
        reg = self._registered.get(target.ctypes.data)
        if reg is None or not reg.covers(target):
            # one registration at a time: the caller moved its payload (a new size or dtype), so the
            # old one is released first (and two registrations can never share a page)
            for old in list(self._registered.values()):
                self._forget_output(old.array)
            reg = self._registered[target.ctypes.data] = HostRegistration(target, self.host_memory == "mapped")
        return reg

    def own_output(self, dtype) -> PinnedBuffer:
        dtype = np.dtype(dtype)
        if dtype not in self._own_out:
            self._own_out[dtype] = PinnedBuffer(self.smap.bev_shape, dtype, mapped=self.host_memory == "mapped")
        return self._own_out[dtype]

    def _record(self, s, staged: Staged, out_dtype: np.dtype, host) -> DeviceOutput:
        mapped = self.host_memory == "mapped"
        scratch = self._scratch.ptr
        flags = _Ptr(scratch) if self.check_finite else None
        out_flags = _Ptr(scratch)
        # fills and small copies as kernels: with host memory mapped, the whole frame is kernels
        # (kernel_copies.py: no copy-engine switch, each of which waits a time slice on a shared GPU)
        scratch_words = [(scratch, None, 12)]  # zeros: flags, amax depth, amax feat
        if self.precision == "fp8" and np.dtype(np.uint8) in (staged.depth, staged.feat):
            # exponents of the raw inputs' scales (a quantised stream overwrites its own)
            scratch_words.append((scratch + 12, self._small.device_ptr, 8))
        kernel_copies.copy_many(self.rt, s, scratch_words)
        kin = {}
        for i, stream in enumerate(("depth", "feat")):
            kin[stream] = self._record_input(s, stream, staged, i, flags, mapped)
        bindings = {"depth": kin["depth"], "feat": kin["feat"], "out": self._kout}
        direct = out_dtype == self.kout and self.precision == "fp16"  # float32 out: check only
        if direct and mapped and self.integrated:
            bindings["out"] = _Ptr(host.device_ptr)  # the kernel writes the caller's memory itself
        self.enqueue_kernel(s, bindings)
        n = self.n["out"]
        if direct:
            bev = bindings["out"]
            self._elementwise(s, "bevconv_check_out_f32", n, ("ptr", bev.ptr), ("i64", n), ("ptr", out_flags.ptr))
            if mapped and not self.integrated:  # over the bus, in one sequential pass
                kernel_copies.copy(self.rt, s, host.device_ptr, bev.ptr, n * out_dtype.itemsize)
        else:
            bev = _Ptr(host.device_ptr) if mapped else self._bev[out_dtype]
            k = ("ptr", scratch + 12) if self.precision == "fp8" else ("ptr", 0)
            name = f"bevconv_out_{_SUFFIX[self.kout]}_to_{_SUFFIX[out_dtype]}"
            self._elementwise(s, name, n, ("ptr", self._kout.ptr), ("ptr", bev.ptr), ("i64", n), k,
                              ("ptr", out_flags.ptr))
        nbytes = n * out_dtype.itemsize
        if not mapped:
            s.d2h(host.ptr, bev, nbytes)
        kernel_copies.copy(self.rt, s, self._small.device_ptr + 8, scratch, 4)
        return DeviceOutput(bev.ptr, nbytes, out_dtype, tuple(self.smap.bev_shape), s.handle, self.rt.device)

    def device_output(self) -> DeviceOutput:
        """The last frame's output; before the first frame, where a float32 grid (the widest
        published dtype) would land: a consumer sizing its buffers from it fits any grid."""
        if self.last_output is not None:
            return self.last_output
        f32 = np.dtype(np.float32)
        if self.kout != f32 and f32 not in self._bev:
            self._bev[f32] = DeviceBuffer(self.n["out"] * f32.itemsize)
        buf = self._kout if self.kout == f32 else self._bev[f32]
        return DeviceOutput(buf.ptr, buf.nbytes, f32, tuple(self.smap.bev_shape), self.rt.stream.handle,
                            self.rt.device)

    def _record_input(self, s, stream: str, staged: Staged, i: int, flags, mapped: bool):
        """H2D (unless mapped), depth images expanded, then convert/check; returns what the pooling
        step reads."""
        n = self.n[stream]
        wire = np.dtype(staged[i])
        images = staged.image_cameras if stream == "depth" else ()
        region = self._region_buf[stream]
        if mapped:
            src = _Ptr(region.device_ptr)
        else:
            src = self._kin[stream] if wire == self.kin else self._raw[stream]
            slot = self.staging.nbytes(stream, wire) // self.staging.cameras
            for first, count in slot_runs(self.staging.cameras, skip=images):  # depth-image slots: filled below
                s.h2d(_Ptr(src.ptr + first * slot), region.ptr + first * slot, count * slot)
        if images:
            self._record_expand(s, staged, src, mapped)
        if wire == self.kin and mapped and not self.integrated:
            # a discrete GPU reads host memory over the bus: one sequential pass into device memory
            # rather than the pooling kernel's scattered reads
            dst = self._kin[stream]
            kernel_copies.copy(self.rt, s, dst.ptr, src.ptr, n * wire.itemsize)
            src = dst
        if wire == self.kin:  # already the kernel's dtype: check only
            if flags is not None:
                self._elementwise(s, f"bevconv_check_{_SUFFIX[wire]}", n, ("ptr", src.ptr), ("i64", n),
                                  ("ptr", flags.ptr))
            return src
        dst = self._kin[stream]
        fl = ("ptr", flags.ptr if flags is not None else 0)
        if self.precision == "fp16":
            self._elementwise(s, f"bevconv_{_SUFFIX[wire]}_to_f16", n, ("ptr", src.ptr), ("ptr", dst.ptr),
                              ("i64", n), fl)
        else:  # float -> E4M3 (E4M3 codes are the fp8 kernel's own dtype: handled above)
            amax = self._scratch.ptr + 4 + 4 * i
            self._elementwise(s, f"bevconv_amax_{_SUFFIX[wire]}", n, ("ptr", src.ptr), ("i64", n), ("ptr", amax), fl)
            self._elementwise(s, f"bevconv_{_SUFFIX[wire]}_to_e4m3", n, ("ptr", src.ptr), ("ptr", dst.ptr),
                              ("i64", n), ("ptr", amax), ("ptr", self._scratch.ptr + 12 + 4 * i))
        return dst

    def _record_expand(self, s, staged: Staged, depth, mapped: bool) -> None:
        """Depth images' metres (host region, copied unless mapped) -> distributions in their depth
        slots of ``depth``, in the stream's wire dtype (E4M3: with the depth scale's exponent)."""
        _, D, H, W = self.smap.depth_shape
        row = H * W * 4
        region = self._region_buf["metric"]
        metres = _Ptr(region.device_ptr) if mapped else self._metric
        spec = staged.spec
        lo, hi = spec.bins.valid_range()
        sigma = 0.0 if spec.mode == "one_hot" else spec.sigma
        wire = np.dtype(staged.depth)
        k = self._scratch.ptr + 12 if wire == np.dtype(np.uint8) and self.precision == "fp8" else 0
        for first, count in slot_runs(self.staging.cameras, keep=staged.image_cameras):
            if not mapped:
                s.h2d(_Ptr(metres.ptr + first * row), region.ptr + first * row, count * row)
            self._elementwise(s, f"bevconv_expand_depth_{_SUFFIX[wire]}", count * H * W, ("ptr", metres.ptr),
                              ("ptr", depth.ptr), ("i32", first), ("i32", count), ("i32", D), ("i32", H * W),
                              ("f32", spec.bins.start), ("f32", spec.bins.step), ("f32", sigma), ("f32", lo),
                              ("f32", hi), ("ptr", k))

    def _elementwise(self, s, kernel: str, n: int, *args) -> None:
        blocks = max(1, min(-(-n // _THREADS), self.rt.device.sm_count * 8))
        launch_args(self.rt.module, kernel, (blocks, 1, 1), (_THREADS, 1, 1), args, s)

    def _allocate(self, staged: Staged, out_dtype: np.dtype) -> None:
        """Device buffers a graph for (staged, out_dtype) needs beyond the kernel's own, and every
        function handle it launches: resolved before capture."""
        for kernel in CONVERT_KERNELS:
            self.rt.module.function(kernel)
        if self.host_memory == "mapped":
            return
        if staged.image_cameras and self._metric is None:
            self._metric = DeviceBuffer(self.staging.regions["metric"].nbytes)
        for stream, dtype in zip(("depth", "feat"), staged[:2]):
            if np.dtype(dtype) != self.kin and stream not in self._raw:
                self._raw[stream] = DeviceBuffer(self.staging.nbytes(stream, np.float32))
        direct = out_dtype == self.kout and self.precision == "fp16"
        if not direct and out_dtype not in self._bev:
            self._bev[out_dtype] = DeviceBuffer(self.n["out"] * out_dtype.itemsize)

    def _drop_graphs(self, which) -> None:
        for key in [k for k in self._graphs if which(k)]:
            self._graphs.pop(key)[0].destroy()

    # --- measurement -----------------------------------------------------------------------------
    def frame_time_us(self, cameras, out_dtype=np.float16, frames: int = 30, warmup: int = 3) -> float:
        """Median wall time of whole frames (staging, graph, sync, flags): what precision: auto compares."""
        import time

        out = np.empty(self.smap.bev_shape, out_dtype)
        times = []
        for i in range(warmup + frames):
            t0 = time.perf_counter()
            self.run(cameras, out)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        self._forget_output(out)
        return float(np.median(times) * 1e6)

    def _forget_output(self, out: np.ndarray) -> None:
        reg = self._registered.pop(out.ctypes.data, None)
        if reg is not None:
            self._drop_graphs(lambda k: k[2] == reg.ptr)
            reg.release()

    def close(self) -> None:
        self._drop_graphs(lambda k: True)
        if self._timer is not None:
            self._timer.destroy()
            self._timer = None
        for reg in self._registered.values():
            reg.release()
        self._registered.clear()
        for buf in (*self._kin.values(), *self._raw.values(), self._kout, *self._bev.values(), self._scratch,
                    *([self._metric] if self._metric is not None else [])):
            buf.free()
        self._metric = None
        for buf in (*self._pinned, self._small, *self._own_out.values()):
            buf.free()
        self._pinned, self._own_out, self._kin, self._raw, self._bev = [], {}, {}, {}, {}


__all__ = ["GpuFrame", "DeviceOutput", "FrameTiming", "choose_host_memory", "pow2_exponent", "FP8_KERNEL_OUT_SCALE",
           "HOST_MEMORY"]
