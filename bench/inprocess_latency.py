"""In-process latency of ``BevPooler`` (bench/latency.py --transport inprocess).

Per camera set, paced at ``rate``: the set's values are copied into the network's output
tensors on the stream (what a depth net's last layer does), then

    e2e     pool call -> grid ready on the stream: device events recorded on the stream right
            before the call and right after it returns, timed on the GPU (the device idles while
            the host enqueues, so this includes the call's host cost)
    stage   the call on the host: pool() entered -> returned (nothing waits on the host)
    wait    pool() entered -> grid ready seen by the host (event synchronize): for reference
    kernel  the pooling kernel alone (graph-replay median, the cuda backend's kernel_time_us)

Inputs are PyTorch tensors on a side stream (``--tensors torch``, the documented use), CuPy
arrays, or plain driver allocations behind ``__cuda_array_interface__`` (``driver``: no framework).
The grid is the pooler's own (stream-ordered), dropped by the consumer before the next set.
"""

from __future__ import annotations

import time

import numpy as np

from bevpool_ros.device.driver import DeviceBuffer, EventTimer, Stream
from bevpool_ros.inprocess import BevPooler
from bevpool_ros.kernels.fp8 import pow2_scale, quantize
from bevpool_ros.synthetic import SyntheticScene

TENSORS = ("auto", "torch", "cupy", "driver")


class DriverArray:
    """Device memory of our own, offered through ``__cuda_array_interface__`` (no framework)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.buffer = DeviceBuffer(int(np.prod(self.shape)) * self.dtype.itemsize)
        self.__cuda_array_interface__ = {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.buffer.ptr, False),
            "strides": None,
            "version": 2,
        }

    def copy_from(self, other: "DriverArray", stream: Stream) -> None:
        stream.d2d(self.buffer, other.buffer, self.buffer.nbytes)

    def upload(self, host: np.ndarray, stream: Stream) -> "DriverArray":
        host = np.ascontiguousarray(host, self.dtype)
        stream.h2d(self.buffer, host.ctypes.data, host.nbytes)
        stream.synchronize()
        return self


class _Framework:
    """Tensors and a side stream of one framework: ``empty``, ``upload``, ``copy``, ``stream``."""

    def __init__(self, kind: str, priority: str = "normal"):
        """``priority``: the side stream's (highest: what docs/gpu_sharing.md advises a caller
        whose networks run on normal-priority streams of the same process)."""
        self.kind = kind
        if kind == "torch":
            import torch

            least, greatest = torch.cuda.Stream.priority_range()
            self.lib, self.side = torch, torch.cuda.Stream(priority=greatest if priority == "highest" else least)
            self.handle = int(self.side.cuda_stream)
        elif kind == "cupy":
            import cupy

            self.lib, self.side = cupy, cupy.cuda.Stream(non_blocking=True)
            self.handle = int(self.side.ptr)
        else:
            self.lib, self.side = None, Stream(priority)
            self.handle = int(self.side.handle)
        self.stream = Stream.wrap(self.handle)

    def upload(self, host: np.ndarray):
        if self.kind == "torch":
            return self.lib.from_numpy(np.ascontiguousarray(host)).cuda()
        if self.kind == "cupy":
            return self.lib.asarray(host)
        return DriverArray(host.shape, host.dtype).upload(host, self.stream)

    def empty_like(self, x):
        if self.kind == "torch":
            return self.lib.empty_like(x)
        if self.kind == "cupy":
            return self.lib.empty_like(x)
        return DriverArray(x.shape, x.dtype)

    def copy(self, dst, src) -> None:
        """dst <- src, enqueued on the side stream."""
        if self.kind == "torch":
            with self.lib.cuda.stream(self.side):
                dst.copy_(src, non_blocking=True)
        elif self.kind == "cupy":
            with self.side:
                dst[...] = src
        else:
            dst.copy_from(src, self.stream)

    def synchronize(self) -> None:
        if self.kind == "torch":
            self.lib.cuda.synchronize()
        else:
            self.stream.synchronize()


def pick_tensors(kind: str) -> str:
    if kind != "auto":
        return kind
    try:
        import torch

        return "torch" if torch.cuda.is_available() else "driver"
    except ImportError:
        return "driver"


def inputs(rig, input_dtype: str, cycle: int):
    """``cycle`` synthetic sets in the wire dtype; E4M3 with the power-of-two scales of set 0."""
    scene = SyntheticScene(rig)
    sets = [scene.frame(i) for i in range(cycle)]
    if input_dtype != "float8_e4m3":
        return [(d.astype(input_dtype), f.astype(input_dtype)) for d, f in sets], (1.0, 1.0)
    scales = (pow2_scale(sets[0][0]), pow2_scale(sets[0][1]))
    return [(quantize(d, scales[0]), quantize(f, scales[1])) for d, f in sets], scales


def run(
    rig,
    *,
    precision: str,
    input_dtype: str,
    bev_dtype: str,
    frames: int,
    rate: float,
    warmup: int,
    tensors: str = "auto",
    cycle: int = 8,
    caller_priority: str = "normal",
) -> dict:
    kind = pick_tensors(tensors)
    sets, scales = inputs(rig, input_dtype, cycle)
    pooler = BevPooler(
        rig, precision=precision, grid_dtype=bev_dtype, backend="cuda", fp8_scales=scales
    )
    fw = _Framework(kind, caller_priority)
    sources = [(fw.upload(d), fw.upload(f)) for d, f in sets]
    depth, feat = fw.empty_like(sources[0][0]), fw.empty_like(sources[0][1])
    fw.synchronize()
    timer = EventTimer()
    period = 1.0 / rate
    e2e, stage, wait, ok = [], [], [], 0
    grid = None
    next_tick = time.perf_counter()
    for i in range(warmup + frames):
        next_tick += period
        while (delay := next_tick - time.perf_counter()) > 0:
            time.sleep(min(delay, 0.002))
        src_d, src_f = sources[i % cycle]
        fw.copy(depth, src_d)  # the network's output tensors get this set's values
        fw.copy(feat, src_f)
        grid = None  # the consumer is done with the previous grid
        timer.record_start(fw.stream)
        t0 = time.perf_counter()
        grid = pooler.pool(depth, feat, stream=fw.handle)
        t1 = time.perf_counter()
        timer.record_end(fw.stream)
        gpu_ms = timer.elapsed_ms()  # waits for the end event
        t2 = time.perf_counter()
        try:
            grid.check()
            ok += i >= warmup
        except (ValueError, RuntimeError):
            pass
        if i >= warmup:
            e2e.append(gpu_ms)
            stage.append((t1 - t0) * 1e3)
            wait.append((t2 - t0) * 1e3)
    kernel_us = pooler.backend.kernel_time_us()
    described = pooler.describe()
    pooler.close()
    q = lambda v, p: float(np.percentile(v, p))  # noqa: E731
    return {
        "backend": described["backend"],
        "precision": pooler.precision,
        "input_dtype": input_dtype,
        "output_dtype": bev_dtype,
        "transport": "inprocess",
        "rig": rig.name,
        "rate_hz": rate,
        "frames": frames,
        "received": ok,
        "e2e_p50_ms": q(e2e, 50),
        "e2e_p99_ms": q(e2e, 99),
        "stage_p50_ms": q(stage, 50),
        "stage_p99_ms": q(stage, 99),
        "kernel_us": kernel_us,
        "host_wait_p50_ms": q(wait, 50),
        "host_wait_p99_ms": q(wait, 99),
        "tensors": kind,
        "caller_priority": caller_priority if kind != "cupy" else "normal",
        "graph_replays": described["graph_replays"],
        "eager_frames": described["eager_frames"],
        "e2e_minus_kernel_p99_us": q(e2e, 99) * 1e3 - kernel_us,
    }
