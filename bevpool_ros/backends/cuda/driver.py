"""Thin, checked wrappers over the CUDA driver API (cuda.bindings.driver).

One primary context per device, one stream, device buffers, pinned host buffers, module
loading, kernel launches from a LaunchPlan, CUDA-graph capture/replay and event timing.
Every call's return code is checked; failures raise CudaError naming the call.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from ..base import BackendUnavailable


class CudaError(RuntimeError):
    pass


def _cu():
    try:
        from cuda.bindings import driver as cu
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise BackendUnavailable(f"cuda-bindings not installed ({e})") from e
    return cu


def check(result, what: str):
    """Unpack a cuda.bindings result tuple, raising CudaError on a non-success code."""
    cu = _cu()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise CudaError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


class Device:
    """Primary context of one GPU, made current on construction."""

    def __init__(self, ordinal: int = 0):
        cu = _cu()
        try:
            err, = cu.cuInit(0)
        except RuntimeError as e:  # libcuda.so missing: no driver on this machine
            raise BackendUnavailable(f"no CUDA driver ({e})") from e
        if err != cu.CUresult.CUDA_SUCCESS:
            raise BackendUnavailable(f"cuInit failed ({err}): no usable CUDA driver/GPU")
        self.dev = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        self.ctx = check(cu.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        self.make_current()
        name = check(cu.cuDeviceGetName(256, self.dev), "cuDeviceGetName")
        self.name = name.split(b"\0", 1)[0].decode()
        attr = cu.CUdevice_attribute
        self.major = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev), "attr")
        self.minor = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev), "attr")
        self.l2_bytes = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, self.dev), "attr")
        self.sm_count = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.dev), "attr")
        self.ordinal = ordinal

    @property
    def arch(self) -> str:
        return f"sm_{self.major}{self.minor}"

    def make_current(self) -> None:
        check(_cu().cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def synchronize(self) -> None:
        check(_cu().cuCtxSynchronize(), "cuCtxSynchronize")


class DeviceBuffer:
    def __init__(self, nbytes: int):
        self.nbytes = int(nbytes)
        self.ptr = int(check(_cu().cuMemAlloc(max(self.nbytes, 16)), "cuMemAlloc"))

    def free(self) -> None:
        if self.ptr:
            _cu().cuMemFree(self.ptr)
            self.ptr = 0

    def __del__(self):  # best effort; the context may already be gone at exit
        try:
            self.free()
        except Exception:
            pass


class PinnedBuffer:
    """Page-locked host memory viewed as a numpy array (async copies need it)."""

    def __init__(self, shape, dtype):
        dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(shape)) * dtype.itemsize
        self.ptr = int(check(_cu().cuMemHostAlloc(max(self.nbytes, 16), 0), "cuMemHostAlloc"))
        raw = (ctypes.c_byte * max(self.nbytes, 16)).from_address(self.ptr)
        self.array = np.frombuffer(raw, dtype=np.uint8, count=self.nbytes).view(dtype).reshape(shape)

    def free(self) -> None:
        if self.ptr:
            self.array = None
            _cu().cuMemFreeHost(self.ptr)
            self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


class Stream:
    def __init__(self):
        cu = _cu()
        self.handle = check(cu.cuStreamCreate(int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING)), "cuStreamCreate")

    def synchronize(self) -> None:
        check(_cu().cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def h2d(self, dst: DeviceBuffer, src_ptr: int, nbytes: int) -> None:
        check(_cu().cuMemcpyHtoDAsync(dst.ptr, src_ptr, nbytes, self.handle), "cuMemcpyHtoDAsync")

    def d2h(self, dst_ptr: int, src: DeviceBuffer, nbytes: int) -> None:
        check(_cu().cuMemcpyDtoHAsync(dst_ptr, src.ptr, nbytes, self.handle), "cuMemcpyDtoHAsync")

    def d2d(self, dst: DeviceBuffer, src: DeviceBuffer, nbytes: int) -> None:
        check(_cu().cuMemcpyDtoDAsync(dst.ptr, src.ptr, nbytes, self.handle), "cuMemcpyDtoDAsync")

    def memset32(self, dst: DeviceBuffer, value: int, count: int) -> None:
        check(_cu().cuMemsetD32Async(dst.ptr, value, count, self.handle), "cuMemsetD32Async")

    def memset8(self, dst: DeviceBuffer, value: int, nbytes: int) -> None:
        check(_cu().cuMemsetD8Async(dst.ptr, value, nbytes, self.handle), "cuMemsetD8Async")


class Module:
    def __init__(self, image: bytes):
        cu = _cu()
        self._image = np.frombuffer(image, dtype=np.uint8).copy()  # kept alive while loaded
        self.handle = check(cu.cuModuleLoadData(self._image.ctypes.data), "cuModuleLoadData")
        self._functions = {}

    def function(self, name: str):
        if name not in self._functions:
            self._functions[name] = check(_cu().cuModuleGetFunction(self.handle, name.encode()),
                                          f"cuModuleGetFunction({name})")
        return self._functions[name]


_SCALAR = {"i32": np.int32, "u32": np.uint32, "f32": np.float32}


def launch(module: Module, plan, buffers: dict, stream: Stream) -> None:
    """Launch ``plan`` (launch.LaunchPlan) with its symbolic buffers bound to ``buffers``.

    A plan names a buffer that is not bound -> KeyError before anything reaches the GPU.
    """
    holders = []
    for kind, value in plan.args:
        if kind == "buf":
            holders.append(np.array([buffers[value].ptr], dtype=np.uint64))
        else:
            holders.append(np.array([value], dtype=_SCALAR[kind]))
    params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
    f = module.function(plan.kernel)
    check(_cu().cuLaunchKernel(f, *plan.grid, *plan.block, getattr(plan, "shared_bytes", 0), stream.handle,
                               params.ctypes.data if holders else 0, 0), f"cuLaunchKernel({plan.kernel})")


class Graph:
    """Capture whatever ``record(stream)`` enqueues; replay it with one launch."""

    def __init__(self, stream: Stream, record):
        cu = _cu()
        check(cu.cuStreamBeginCapture(stream.handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
              "cuStreamBeginCapture")
        try:
            record(stream)
        finally:
            graph = check(cu.cuStreamEndCapture(stream.handle), "cuStreamEndCapture")
        self.graph = graph
        self.exec = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        self.stream = stream

    def replay(self, stream: Stream | None = None) -> None:
        check(_cu().cuGraphLaunch(self.exec, (stream or self.stream).handle), "cuGraphLaunch")

    def destroy(self) -> None:
        cu = _cu()
        if self.exec is not None:
            cu.cuGraphExecDestroy(self.exec)
            cu.cuGraphDestroy(self.graph)
            self.exec = None


class EventTimer:
    def __init__(self):
        cu = _cu()
        self.start = check(cu.cuEventCreate(0), "cuEventCreate")
        self.end = check(cu.cuEventCreate(0), "cuEventCreate")

    def record_start(self, stream: Stream) -> None:
        check(_cu().cuEventRecord(self.start, stream.handle), "cuEventRecord")

    def record_end(self, stream: Stream) -> None:
        check(_cu().cuEventRecord(self.end, stream.handle), "cuEventRecord")

    def elapsed_ms(self) -> float:
        cu = _cu()
        check(cu.cuEventSynchronize(self.end), "cuEventSynchronize")
        return float(check(cu.cuEventElapsedTime(self.start, self.end), "cuEventElapsedTime"))


@dataclass
class DeviceArrays:
    """Named device buffers uploaded from numpy arrays (the per-calibration constants)."""

    buffers: dict

    @classmethod
    def upload(cls, arrays: dict, stream: Stream) -> "DeviceArrays":
        bufs = {}
        for name, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            buf = DeviceBuffer(arr.nbytes)
            if arr.nbytes:
                stream.h2d(buf, arr.ctypes.data, arr.nbytes)
            stream.synchronize()  # arr may be a temporary: finish before it goes away
            bufs[name] = buf
        return cls(bufs)
