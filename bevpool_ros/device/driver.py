"""Thin, checked wrappers over the CUDA driver API (cuda.bindings.driver).

One primary context per device, one stream, device buffers, pinned host buffers, module
loading, kernel launches from a LaunchPlan, CUDA-graph capture/replay and event timing.
Every call's return code is checked; failures raise CudaError naming the call.

Threads: the driver keeps the current context per thread, and the node calls its backend from
its pooling thread (TensorRT from its own callbacks). So every wrapper that talks to the
driver first makes the device's primary context current in the calling thread (``bind``: a
thread-local check, one cuCtxSetCurrent per thread and context).
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass

import numpy as np

from ..errors import BackendUnavailable


class CudaError(RuntimeError):
    pass


_cu = None  # the module, once imported: an import statement per driver call costs microseconds


def api():
    """The cuda.bindings driver module (imported on first use): the raw driver API for callers
    that need calls this module does not wrap (VMM, IPC events in handoff/)."""
    global _cu
    if _cu is None:
        try:
            from cuda.bindings import driver as cu
        except ImportError as e:  # pragma: no cover - depends on the machine
            raise BackendUnavailable(f"cuda-bindings not installed ({e})") from e
        _cu = cu
    return _cu


def check(result, what: str):
    """Unpack a cuda.bindings result tuple, raising CudaError on a non-success code."""
    cu = api()
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        raise CudaError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


_bound = threading.local()   # .ctx: the context this thread has made current through us
_default_ctx = None          # the last Device's primary context: what a bare wrapper call binds


def bind(ctx=None) -> None:
    """Make ``ctx`` (default: the last opened device's) current in this thread, once per thread."""
    ctx = ctx if ctx is not None else _default_ctx
    if ctx is None or getattr(_bound, "ctx", None) is ctx:
        return
    check(api().cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    _bound.ctx = ctx


class Device:
    """Primary context of one GPU, made current on construction (and by ``bind`` in any thread)."""

    def __init__(self, ordinal: int = 0):
        cu = api()
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
        # memory shared with the host (DRIVE Thor, Jetson) and whether pinned host memory can be mapped
        self.integrated = bool(check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_INTEGRATED, self.dev), "attr"))
        self.can_map_host = bool(check(cu.cuDeviceGetAttribute(
            attr.CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, self.dev), "attr"))
        self.ordinal = ordinal
        global _default_ctx
        _default_ctx = self.ctx

    @property
    def arch(self) -> str:
        return f"sm_{self.major}{self.minor}"

    def make_current(self) -> None:
        _bound.ctx = None
        bind(self.ctx)

    def synchronize(self) -> None:
        bind(self.ctx)
        check(api().cuCtxSynchronize(), "cuCtxSynchronize")


@dataclass(frozen=True)
class DeviceView:
    """A device address (part of a buffer, or mapped host memory) a launch can bind by name."""

    ptr: int
    nbytes: int


class DeviceBuffer:
    def __init__(self, nbytes: int):
        bind()
        self.nbytes = int(nbytes)
        self._ctx = _default_ctx
        self.ptr = int(check(api().cuMemAlloc(max(self.nbytes, 16)), "cuMemAlloc"))

    def view(self, offset: int, nbytes: int) -> DeviceView:
        if offset < 0 or offset + nbytes > max(self.nbytes, 16):
            raise ValueError(f"view [{offset}, {offset + nbytes}) outside a {self.nbytes}-byte buffer")
        return DeviceView(self.ptr + offset, nbytes)

    def free(self) -> None:
        if self.ptr:
            bind(self._ctx)
            api().cuMemFree(self.ptr)
            self.ptr = 0

    def __del__(self):  # best effort; the context may already be gone at exit
        try:
            self.free()
        except Exception:
            pass


class DeviceCopy:
    """A host array copied once into a device buffer of its own, offered as a CUDA array
    (``__cuda_array_interface__`` v3): a tensor as a network in this process, or the producer of
    a hand-off, would hold it. For benchmarks and tests of the device-input paths."""

    def __init__(self, arr: np.ndarray):
        arr = np.ascontiguousarray(arr)
        self.buf = DeviceBuffer(arr.nbytes)
        check(api().cuMemcpyHtoD(self.buf.ptr, arr.ctypes.data, arr.nbytes), "cuMemcpyHtoD")
        self.shape, self.dtype = arr.shape, arr.dtype
        self.__cuda_array_interface__ = {"shape": arr.shape, "typestr": arr.dtype.str,
                                         "data": (self.buf.ptr, False), "version": 3,
                                         "strides": None, "stream": None}


class PinnedBuffer:
    """Page-locked host memory viewed as a numpy array (async copies need it).

    ``mapped``: also mapped into the device's address space (``device_ptr``), so kernels read and
    write it in place: the integrated-GPU path, where host and device share one memory.
    """

    def __init__(self, shape, dtype, mapped: bool = False, ctx=None):
        bind(ctx)  # pinned for that context (default: the last opened device's)
        cu = api()
        dtype = np.dtype(dtype)
        self._ctx = ctx if ctx is not None else _default_ctx
        self.nbytes = int(np.prod(shape)) * dtype.itemsize
        flags = cu.CU_MEMHOSTALLOC_DEVICEMAP if mapped else 0
        self.ptr = int(check(cu.cuMemHostAlloc(max(self.nbytes, 16), flags), "cuMemHostAlloc"))
        self.device_ptr = int(check(cu.cuMemHostGetDevicePointer(self.ptr, 0), "cuMemHostGetDevicePointer")) \
            if mapped else 0
        raw = (ctypes.c_byte * max(self.nbytes, 16)).from_address(self.ptr)
        self.array = np.frombuffer(raw, dtype=np.uint8, count=self.nbytes).view(dtype).reshape(shape)

    def free(self) -> None:
        if self.ptr:
            self.array = None
            bind(self._ctx)
            api().cuMemFreeHost(self.ptr)
            self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


class HostRegistration:
    """Page-lock memory we did not allocate (a numpy array over a message's payload), so the frame
    graph can copy straight into it; ``mapped`` also gives its device address. Holds the array,
    so the memory outlives the registration; ``release`` unregisters."""

    def __init__(self, array: np.ndarray, mapped: bool = False):
        bind()
        cu = api()
        if not array.flags.c_contiguous or not array.flags.writeable:
            raise ValueError("only a writable C-contiguous array can be registered")
        self.array, self._ctx = array, _default_ctx
        self.ptr, self.nbytes = int(array.ctypes.data), int(array.nbytes)
        flags = cu.CU_MEMHOSTREGISTER_DEVICEMAP if mapped else 0
        check(cu.cuMemHostRegister(self.ptr, max(self.nbytes, 1), flags), "cuMemHostRegister")
        self.device_ptr = int(check(cu.cuMemHostGetDevicePointer(self.ptr, 0), "cuMemHostGetDevicePointer")) \
            if mapped else 0

    def covers(self, array: np.ndarray) -> bool:
        return self.array is not None and array.ctypes.data == self.ptr and array.nbytes == self.nbytes

    def release(self) -> None:
        if self.array is not None:
            bind(self._ctx)
            api().cuMemHostUnregister(self.ptr)
            self.array = None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


# "highest" by default (node parameter gpu.stream_priority, BevPooler's stream_priority), so a
# set's few microseconds of kernels go ahead of the queued work of networks on normal-priority
# streams of the same context (or of the same MPS server).
STREAM_PRIORITIES = ("highest", "normal")


def stream_priority_value(priority: str) -> int:
    """The driver's number for ``priority`` on the current device: cuCtxGetStreamPriorityRange
    gives (least, greatest); greatest is the numerically lowest (e.g. -5), normal is 0."""
    if priority not in STREAM_PRIORITIES:
        raise ValueError(f"stream priority: expected one of {STREAM_PRIORITIES}, got {priority!r}")
    if priority == "normal":
        return 0
    _least, greatest = check(api().cuCtxGetStreamPriorityRange(), "cuCtxGetStreamPriorityRange")
    return int(greatest)


class Stream:
    def __init__(self, priority: str = STREAM_PRIORITIES[0]):
        """A non-blocking stream at ``priority`` (STREAM_PRIORITIES)."""
        bind()
        cu = api()
        self.priority = priority
        self.handle = check(cu.cuStreamCreateWithPriority(int(cu.CUstream_flags.CU_STREAM_NON_BLOCKING),
                                                          stream_priority_value(self.priority)),
                            "cuStreamCreateWithPriority")

    @classmethod
    def wrap(cls, handle: int) -> "Stream":
        """Someone else's stream (a framework's CUstream, by address) with this class's methods;
        never destroyed here."""
        stream = cls.__new__(cls)
        stream.handle = api().CUstream(int(handle))
        return stream

    def synchronize(self) -> None:
        bind()
        check(api().cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def h2d(self, dst: DeviceBuffer, src_ptr: int, nbytes: int) -> None:
        bind()
        check(api().cuMemcpyHtoDAsync(dst.ptr, src_ptr, nbytes, self.handle), "cuMemcpyHtoDAsync")

    def d2h(self, dst_ptr: int, src: DeviceBuffer, nbytes: int) -> None:
        bind()
        check(api().cuMemcpyDtoHAsync(dst_ptr, src.ptr, nbytes, self.handle), "cuMemcpyDtoHAsync")

    def d2d(self, dst: DeviceBuffer, src: DeviceBuffer, nbytes: int) -> None:
        bind()
        check(api().cuMemcpyDtoDAsync(dst.ptr, src.ptr, nbytes, self.handle), "cuMemcpyDtoDAsync")

    def memset8(self, dst: DeviceBuffer, value: int, nbytes: int) -> None:
        bind()
        check(api().cuMemsetD8Async(dst.ptr, value, nbytes, self.handle), "cuMemsetD8Async")


class Module:
    def __init__(self, image: bytes):
        bind()
        cu = api()
        self._image = np.frombuffer(image, dtype=np.uint8).copy()  # kept alive while loaded
        self.handle = check(cu.cuModuleLoadData(self._image.ctypes.data), "cuModuleLoadData")
        self._functions = {}

    def function(self, name: str):
        if name not in self._functions:
            self._functions[name] = check(api().cuModuleGetFunction(self.handle, name.encode()),
                                          f"cuModuleGetFunction({name})")
        return self._functions[name]


_SCALAR = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "f32": np.float32}


def launch(module: Module, plan, buffers: dict, stream: Stream) -> None:
    """Launch ``plan`` (launch.LaunchPlan) with its symbolic buffers bound to ``buffers``.

    A plan names a buffer that is not bound -> KeyError before anything reaches the GPU; a name
    bound to None passes a null pointer (an optional argument, e.g. no finiteness flags).
    """
    args = [("ptr", 0 if buffers[v] is None else buffers[v].ptr) if k == "buf" else (k, v) for k, v in plan.args]
    launch_args(module, plan.kernel, plan.grid, plan.block, args, stream, getattr(plan, "shared_bytes", 0))


def _holder(kind: str, value) -> np.ndarray:
    if kind == "bytes":
        return np.frombuffer(bytes(value), dtype=np.uint8).copy()
    return np.array([value], dtype=np.uint64 if kind == "ptr" else _SCALAR[kind])


def launch_args(module: Module, kernel: str, grid, block, args, stream: Stream, shared_bytes: int = 0) -> None:
    """Launch ``kernel`` with concrete arguments: ("ptr", address), ("i32"|"u32"|"i64"|"f32", value) or
    ("bytes", a struct passed by value, laid out as the kernel declares it)."""
    bind()
    holders = [_holder(kind, value) for kind, value in args]
    params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
    f = module.function(kernel)
    check(api().cuLaunchKernel(f, *grid, *block, shared_bytes, stream.handle,
                               params.ctypes.data if holders else 0, 0), f"cuLaunchKernel({kernel})")


class Graph:
    """Capture whatever ``record(stream)`` enqueues; replay it with one launch."""

    def __init__(self, stream: Stream, record):
        bind()
        cu = api()
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
        bind()
        check(api().cuGraphLaunch(self.exec, (stream or self.stream).handle), "cuGraphLaunch")

    def destroy(self) -> None:
        cu = api()
        if self.exec is not None:
            bind()
            cu.cuGraphExecDestroy(self.exec)
            cu.cuGraphDestroy(self.graph)
            self.exec = None


class Event:
    """A CUDA event without timing (the cheap kind): ``record`` on one stream, ``wait`` from another
    stream (no host involvement), ``synchronize`` or ``done`` from the host."""

    def __init__(self, ctx=None):
        bind(ctx)  # an event of that context (default: the last opened device's)
        cu = api()
        self._ctx = ctx if ctx is not None else _default_ctx
        flags = int(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        self.handle = check(cu.cuEventCreate(flags), "cuEventCreate")

    def record(self, stream_handle, external: bool = False) -> None:
        """``external``: while ``stream_handle`` is captured, record the event from the graph
        (an event record node: every replay records it), not only order the capture by it."""
        bind(self._ctx)
        cu = api()
        if external:
            flags = int(cu.CUevent_record_flags.CU_EVENT_RECORD_EXTERNAL)
            check(cu.cuEventRecordWithFlags(self.handle, stream_handle, flags), "cuEventRecord")
        else:
            check(cu.cuEventRecord(self.handle, stream_handle), "cuEventRecord")

    def wait(self, stream_handle) -> None:
        """Work enqueued on ``stream_handle`` from now on runs after the recorded work."""
        bind(self._ctx)
        check(api().cuStreamWaitEvent(stream_handle, self.handle, 0), "cuStreamWaitEvent")

    def synchronize(self) -> None:
        bind(self._ctx)
        check(api().cuEventSynchronize(self.handle), "cuEventSynchronize")

    def done(self) -> bool:
        bind(self._ctx)
        cu = api()
        err, = cu.cuEventQuery(self.handle)
        if err == cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        check(err, "cuEventQuery")
        return True

    def destroy(self) -> None:
        if self.handle is not None:
            bind(self._ctx)
            api().cuEventDestroy(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.destroy()
        except Exception:
            pass


def pointer_device(ptr: int) -> int | None:
    """Ordinal of the device ``ptr`` belongs to (device or managed memory), None for memory the
    driver does not know (plain host memory, a freed or foreign address)."""
    bind()
    cu = api()
    attribute = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, ordinal = cu.cuPointerGetAttribute(attribute, int(ptr))
    return int(ordinal) if err == cu.CUresult.CUDA_SUCCESS else None


class EventTimer:
    def __init__(self):
        bind()
        cu = api()
        self.start = check(cu.cuEventCreate(0), "cuEventCreate")
        self.end = check(cu.cuEventCreate(0), "cuEventCreate")

    def record_start(self, stream: Stream) -> None:
        bind()
        check(api().cuEventRecord(self.start, stream.handle), "cuEventRecord")

    def record_end(self, stream: Stream) -> None:
        bind()
        check(api().cuEventRecord(self.end, stream.handle), "cuEventRecord")

    def elapsed_ms(self) -> float:
        bind()
        cu = api()
        check(cu.cuEventSynchronize(self.end), "cuEventSynchronize")
        return float(check(cu.cuEventElapsedTime(self.start, self.end), "cuEventElapsedTime"))


class FrameTimer:
    """Device time of one frame against its wall time on the host, without a host wait of its own.

    ``begin(stream)`` records a timing event where the frame's own work starts (after any wait for
    its inputs' producer), ``end(stream)`` after its last work; once the caller's own host wait has
    returned, ``read(submitted_s, done_s)`` gives (device ms, wall ms): the wall time from
    submission to completion minus the device time is what the frame waited for the GPU (another
    context's time slice, its inputs' producer)."""

    def __init__(self):
        bind()
        cu = api()
        self._ctx = _default_ctx
        self.start = check(cu.cuEventCreate(0), "cuEventCreate")
        self.end = check(cu.cuEventCreate(0), "cuEventCreate")

    def begin(self, stream_handle) -> None:
        check(api().cuEventRecord(self.start, stream_handle), "cuEventRecord")

    def finish(self, stream_handle) -> None:
        check(api().cuEventRecord(self.end, stream_handle), "cuEventRecord")

    def device_ms(self) -> float | None:
        """The frame's device time; None if its end is not reached yet (never waits)."""
        cu = api()
        err, ms = cu.cuEventElapsedTime(self.start, self.end)
        return float(ms) if err == cu.CUresult.CUDA_SUCCESS else None

    def destroy(self) -> None:
        bind(self._ctx)
        for ev in (self.start, self.end):
            api().cuEventDestroy(ev)


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


def live_l2_bytes(device: int = 0) -> int | None:
    """L2 size of the local GPU, or None without one (no driver, no device): never raises."""
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        return None
    try:
        (err,) = cu.cuInit(0)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        err, dev = cu.cuDeviceGet(device)
        if err != cu.CUresult.CUDA_SUCCESS:
            return None
        err, l2 = cu.cuDeviceGetAttribute(cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev)
        return int(l2) if err == cu.CUresult.CUDA_SUCCESS else None
    except Exception:  # driver library missing or broken: treat as no GPU
        return None
