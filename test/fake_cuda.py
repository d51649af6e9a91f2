"""The CUDA driver without a GPU, for measuring what BevPooler's device path asks of it.

``fake_gpu()`` puts a counting stand-in where ``from cuda.bindings import driver`` finds the real
module: the driver wrappers (bevpool_ros/device/driver.py) then run their own code, pay
what they pay in Python (the real cuda.bindings types and enums are used: CUstream(...) costs
what it costs), and every ``cu*`` call is counted by name and answered with success. A
BevPooler made inside it gets a stand-in cuda backend (its pooling step is one kernel launch),
so the pooler, the device frame, the grid and the driver wrappers are all the real code.

``torch_stand_in()`` is a minimal ``torch`` module (put in sys.modules by the caller) whose
Tensor has the accessors BevPooler's PyTorch fast path reads, and protocol methods that count
their reads (the fast path must not need them).

Used by bench/inprocess_host_cost.py (Python time and driver calls per pool() call) and the
tests of the device path's host side (test_inprocess_host_cost.py, test_grid_memory.py,
test_inprocess.py).
"""

from __future__ import annotations

import ctypes
import itertools
import sys
import types
from collections import Counter
from contextlib import contextmanager
from types import SimpleNamespace

import numpy as np

from bevpool_ros.backends.gpu.device_frame import DeviceFrame
from bevpool_ros.device import driver
from bevpool_ros.inprocess import pooler as pooler_module

DEVICE_BASE = 0x7F00_0000_0000  # fake device addresses: 1 MiB apart, so every one is aligned


class FakeDriver:
    """Stands in for cuda.bindings.driver: the real module's types, counted ``cu*`` calls."""

    def __init__(self, real):
        self._real = real
        self.calls: Counter[str] = Counter()
        self.log: list[tuple] | None = None  # a list: every call's (name, *args) appended
        self._ids = itertools.count(1)
        self._host: dict[int, ctypes.Array] = {}  # cuMemHostAlloc: real memory, kept here
        self._sizes: dict[int, int] = {}  # live device allocations: address -> bytes
        self._freed: dict[int, list[int]] = {}  # bytes -> addresses, reused last freed first
        ok = real.CUresult.CUDA_SUCCESS
        self._answers = {
            "cuMemAlloc": lambda nbytes: (ok, self._alloc(nbytes)),
            "cuMemAllocAsync": lambda nbytes, stream: (ok, self._alloc(nbytes)),
            "cuMemFree": lambda ptr: self._free(ptr),
            "cuMemFreeAsync": lambda ptr, stream: self._free(ptr),
            "cuMemHostAlloc": lambda nbytes, flags: (ok, self._host_alloc(nbytes)),
            "cuMemHostGetDevicePointer": lambda ptr, flags: (ok, ptr),
            "cuStreamCreate": lambda flags: (ok, real.CUstream(0x5000 + next(self._ids))),
            "cuStreamCreateWithPriority": lambda flags, prio: (ok, real.CUstream(0x5000 + next(self._ids))),
            "cuCtxGetStreamPriorityRange": lambda: (ok, 0, -5),
            "cuEventCreate": lambda flags: (ok, real.CUevent(0x6000 + next(self._ids))),
            "cuStreamEndCapture": lambda s: (ok, real.CUgraph(next(self._ids))),
            "cuGraphInstantiate": lambda g, flags: (ok, real.CUgraphExec(next(self._ids))),
            "cuModuleGetFunction": lambda m, name: (ok, real.CUfunction(next(self._ids))),
            "cuDeviceGetAttribute": lambda attribute, dev: (ok, 1),
            "cuDeviceGetCount": lambda: (ok, 1),
            "cuPointerGetAttribute": lambda attribute, ptr: (ok, 0),
            "cuGetErrorName": lambda err: (ok, b"CUDA_ERROR_FAKE"),
            "cuEventElapsedTime": lambda start, end: (ok, 0.0),
        }

    def _alloc(self, nbytes: int) -> int:
        """A device address; a freed one of the same size first, as a memory pool gives back."""
        nbytes = int(nbytes)
        reuse = self._freed.get(nbytes)
        ptr = reuse.pop() if reuse else DEVICE_BASE + next(self._ids) * (1 << 20)
        self._sizes[ptr] = nbytes
        return ptr

    def _free(self, ptr) -> tuple:
        nbytes = self._sizes.pop(int(ptr), None)
        if nbytes is None:
            return (self._real.CUresult.CUDA_ERROR_INVALID_VALUE,)
        self._freed.setdefault(nbytes, []).append(int(ptr))
        return (self._real.CUresult.CUDA_SUCCESS,)

    def _host_alloc(self, nbytes: int) -> int:
        buf = (ctypes.c_byte * max(int(nbytes), 16))()
        ptr = ctypes.addressof(buf)
        self._host[ptr] = buf
        return ptr

    def __getattr__(self, name: str):
        value = getattr(self._real, name)
        if name.startswith("cu") and callable(value):
            answer = self._answers.get(name)
            ok = (self._real.CUresult.CUDA_SUCCESS,)
            calls, fake = self.calls, self

            def call(*args, _name=name, _answer=answer):
                calls[_name] += 1
                if fake.log is not None:
                    fake.log.append((_name, *args))
                return _answer(*args) if _answer is not None else ok

            value = call
        setattr(self, name, value)  # later lookups cost what a module attribute costs
        return value


class _Module:
    """The backend's loaded module: functions resolved once, as driver.Module does."""

    def __init__(self):
        self._functions = {}

    def function(self, name: str):
        if name not in self._functions:
            cu = driver.api()
            self._functions[name] = driver.check(
                cu.cuModuleGetFunction(None, name.encode()), "cuModuleGetFunction"
            )
        return self._functions[name]


def _backend(name, precision, fallback=True, *, check_finite=True, **options):
    """``create_backend`` as BevPooler calls it, answered with the cuda backend as BevPooler uses
    it: its device frame (the real DeviceFrame around a one-launch pooling step), describe."""
    rt = SimpleNamespace(
        device=SimpleNamespace(ordinal=0, ctx=driver._default_ctx, dev=0, sm_count=132),
        module=_Module(),
    )

    def enqueue_kernel(stream, bindings):  # the pooling step: one launch over the map's arrays
        maps = [("ptr", DEVICE_BASE + i * 256) for i in range(5)]
        args = [("ptr", bindings[k].ptr) for k in ("depth", "feat", "out")] + maps
        driver.launch_args(rt.module, "bevpool_v3", (264, 1, 1), (256, 1, 1), args, stream)

    be = SimpleNamespace(
        name="cuda",
        precision="fp16" if precision == "auto" else precision,
        check_finite=check_finite,
        fp8_scales=(1.0, 1.0),
        describe=lambda: {"backend": "cuda (fake driver)"},
        close=lambda: None,
    )
    be.prepare = lambda smap: setattr(be, "smap", smap)
    be.device_frame = lambda: DeviceFrame(rt, be.smap, be.precision, enqueue_kernel, check_finite=check_finite)
    return be


@contextmanager
def fake_gpu():
    """Inside: the driver is a FakeDriver (yielded: read ``.calls``), BevPooler's cuda backend a
    stand-in. Everything is put back on the way out."""
    import cuda.bindings

    real = sys.modules["cuda.bindings.driver"] if "cuda.bindings.driver" in sys.modules else None
    if real is None:
        from cuda.bindings import driver as real
    fake = FakeDriver(real)
    saved = {
        "ctx": driver._default_ctx,
        "bound": getattr(driver._bound, "ctx", None),
        "backend": pooler_module.create_backend,
    }
    cached = hasattr(driver, "_cu")  # the driver wrappers may keep the module they imported

    def use(module):
        sys.modules["cuda.bindings.driver"] = module
        cuda.bindings.driver = module
        if cached:
            driver._cu = None  # imported again on next use: the module just put there

    use(fake)
    driver._default_ctx = fake.CUcontext(0xC0)
    driver._bound.ctx = None
    pooler_module.create_backend = _backend
    try:
        yield fake
    finally:
        use(real)
        driver._default_ctx = saved["ctx"]
        driver._bound.ctx = saved["bound"]
        pooler_module.create_backend = saved["backend"]


class ArrayInterface:
    """A device array as CuPy shows it: ``__cuda_array_interface__`` v3 and ``__dlpack_device__``
    (``device=False``: v2 only, like a bare driver allocation, so the driver is asked where it
    lives)."""

    def __init__(self, shape, typestr, ptr, stream=None, device=True):
        self.ptr = ptr
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (self.ptr, False),
            "strides": None,
            "version": 3 if device else 2,
            "stream": stream if device else None,
        }
        if device:
            self.__dlpack_device__ = lambda: (2, 0)


def device_inputs(smap, dtype=np.float16, device=True):
    """(depth, feat) for ``smap`` at fixed addresses, as ArrayInterface objects."""
    typestr = np.dtype(dtype).str
    base = DEVICE_BASE + (1 << 41)
    return (
        ArrayInterface(smap.depth_shape, typestr, base, device=device),
        ArrayInterface(smap.feat_shape, typestr, base + (1 << 32), device=device),
    )


class _TorchDtype:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def torch_stand_in() -> types.ModuleType:
    """A ``torch`` module as far as bevpool_ros reads one: Tensor (accessors, protocols that count
    their reads in ``Tensor.protocol_reads``), dtypes, layouts, the current raw stream."""
    torch = types.ModuleType("torch")
    typestrs = {}
    for name, typestr in (("float16", "<f2"), ("float32", "<f4"), ("float64", "<f8"),
                          ("uint8", "|u1"), ("float8_e4m3fn", None)):
        dtype = _TorchDtype(name)
        setattr(torch, name, dtype)
        typestrs[id(dtype)] = typestr
    torch.strided, torch.sparse_coo = object(), object()

    class Tensor:
        protocol_reads = 0

        def __init__(self, shape, dtype, ptr, device=0, *, requires_grad=False,
                     contiguous=True, layout=None):
            self.shape, self.dtype, self._ptr, self._device = tuple(shape), dtype, ptr, device
            self.requires_grad, self._contiguous = requires_grad, contiguous
            self.layout = torch.strided if layout is None else layout

        is_cuda = property(lambda self: self._device is not None)
        device = property(lambda self: types.SimpleNamespace(
            type="cpu" if self._device is None else "cuda", index=self._device))

        def data_ptr(self) -> int:
            return self._ptr

        def get_device(self) -> int:
            return -1 if self._device is None else self._device

        def is_contiguous(self) -> bool:
            return self._contiguous

        @property
        def __cuda_array_interface__(self):  # what PyTorch's (Python) property refuses or says
            Tensor.protocol_reads += 1
            if not self.is_cuda or self.layout is not torch.strided:
                raise AttributeError("not a dense CUDA tensor")
            if self.requires_grad:
                raise RuntimeError("Can't get __cuda_array_interface__ on Variable that "
                                   "requires grad. Use var.detach().")
            typestr = typestrs[id(self.dtype)]
            if typestr is None:
                raise TypeError(f"dtype {self.dtype.name} is not supported")
            strides = None if self._contiguous else tuple(reversed(range(1, len(self.shape) + 1)))
            return {"typestr": typestr, "shape": self.shape, "strides": strides,
                    "data": (self._ptr, False), "version": 2}

        def __dlpack_device__(self):
            Tensor.protocol_reads += 1
            return (1, 0) if self._device is None else (2, self._device)

    Tensor.__module__ = "torch"  # as PyTorch's: how a framework's tensors are told apart
    torch.Tensor = Tensor
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: 0xC0DE + device)
    torch.cuda = types.SimpleNamespace(  # the public way: a Stream object per call
        current_stream=lambda device=None: types.SimpleNamespace(
            cuda_stream=0xC0DE + (getattr(device, "index", None) or 0)
        )
    )
    return torch
