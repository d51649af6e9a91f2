"""What ``BevPooler.pool`` is given, read without copying: device memory through
``__cuda_array_interface__`` (CuPy, Numba, PyTorch, hand-off views) or ``__dlpack__`` (any
DLPack producer), host memory as numpy (or a DLPack CPU tensor, e.g. a PyTorch CPU tensor).

A ``DeviceTensor`` is only a description (address, dtype, shape, the device it lives on and the
stream its producer wrote it on); the caller keeps the tensor alive, as with any stream-ordered
operation. Only C-contiguous tensors are taken: the kernels index flat arrays.

A plain PyTorch CUDA tensor is read through its own accessors (``data_ptr()``, ``dtype``,
``shape``, ``is_contiguous()``: C++, well under a microsecond each); its protocol methods are
Python and cost several microseconds per call, on a path whose every microsecond is latency.
Anything the accessors cannot vouch for (a tensor that requires grad, a subclass, another layout
or dtype, non-contiguous) goes through the protocols, which raise what they raise.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np

from ..errors import InputError
from . import dlpack

# DLPack dtype codes this module reads (dlpack.h): float8_e4m3fn is E4M3 codes by another name
_DL_FLOAT8_E4M3FN = 10
_DL_DTYPES = {
    (2, 16): np.dtype(np.float16),
    (2, 32): np.dtype(np.float32),
    (2, 64): np.dtype(np.float64),
    (1, 8): np.dtype(np.uint8),
    (_DL_FLOAT8_E4M3FN, 8): np.dtype(np.uint8),
}
_KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 3, 13
_TYPESTRS = {s: np.dtype(s).newbyteorder("=") for s in ("<f2", "<f4", "<f8", "|u1", "<u1")}
DEVICE_KINDS = (dlpack.KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED)


class DeviceTensor(NamedTuple):
    """A C-contiguous device array somebody else owns. ``stream``: the CUstream (as an int) its
    producer says to synchronise with before reading (``__cuda_array_interface__`` v3), or None.
    (A tuple: built twice per pool call, it must cost next to nothing.)"""

    ptr: int
    dtype: np.dtype
    shape: tuple
    device: int | None  # ordinal when the protocol said; None: ask the driver
    stream: int | None = None
    readonly: bool = False  # the producer said so: never an output

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def _torch_tensor_type():
    """torch.Tensor when the process imported PyTorch (nothing is imported here), else None."""
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


_torch_dtypes: dict = {}  # torch dtype -> numpy dtype, filled once per torch module
_torch_dtypes_of = None


def _from_torch(t) -> DeviceTensor | None:
    """A plain CUDA ``torch.Tensor`` through its accessors; None where only the protocols can
    judge it (their refusals carry PyTorch's own words)."""
    global _torch_dtypes, _torch_dtypes_of
    torch = sys.modules["torch"]
    if _torch_dtypes_of is not torch:
        names = {"float32": np.float32, "float16": np.float16, "uint8": np.uint8,
                 "float8_e4m3fn": np.uint8}  # float8_e4m3fn: E4M3 codes by another name
        _torch_dtypes = {getattr(torch, n): np.dtype(d) for n, d in names.items()
                         if hasattr(torch, n)}
        _torch_dtypes_of = torch
    dtype = _torch_dtypes.get(t.dtype)
    if (
        dtype is None
        or not t.is_cuda
        or t.requires_grad
        or t.layout is not torch.strided
        or not t.is_contiguous()
    ):
        return None
    return DeviceTensor(t.data_ptr(), dtype, tuple(t.shape), t.get_device())


def is_device(obj) -> bool:
    """True for objects that live on a GPU, judged without reading their data: the DLPack device
    when offered (a PyTorch tensor has both protocols on the CPU too), else the interface."""
    if isinstance(obj, np.ndarray):
        return False
    if type(obj) is _torch_tensor_type():
        return obj.is_cuda
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is not None:
        try:
            return int(dev()[0]) in DEVICE_KINDS
        except Exception:  # a producer that cannot say: judged by the interface below
            pass
    return hasattr(type(obj), "__cuda_array_interface__") or hasattr(
        obj, "__cuda_array_interface__"
    )


def host_array(obj, name: str) -> np.ndarray:
    """numpy as is; a DLPack CPU tensor as a numpy view (no copy); anything else refused."""
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (TypeError, BufferError, RuntimeError, ValueError) as e:
            raise InputError(
                f"{name}: cannot read {type(obj).__name__} as a host array ({e})"
            ) from None
    raise InputError(
        f"{name}: expected a numpy array or a device tensor (DLPack / "
        f"__cuda_array_interface__), got {type(obj).__name__}"
    )


def _c_strides(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def _contiguous(shape, strides_bytes, itemsize: int) -> bool:
    """C order, ignoring the strides of size-1 dimensions (any value is valid there)."""
    if strides_bytes is None:
        return True
    want = _c_strides(shape, itemsize)
    return all(n == 1 or s == w for n, s, w in zip(shape, strides_bytes, want))


def from_cuda_array_interface(cai: dict, name: str, device: int | None = None) -> DeviceTensor:
    """A ``__cuda_array_interface__`` dict (version 2 or 3) as a DeviceTensor on ``device``."""
    try:
        typestr = cai["typestr"]
        dtype = _TYPESTRS.get(typestr) or np.dtype(typestr)
        shape = tuple(map(int, cai["shape"]))
        ptr = int(cai["data"][0])
        readonly = bool(cai["data"][1])
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise InputError(f"{name}: malformed __cuda_array_interface__ ({e})") from None
    if dtype.byteorder == ">":
        raise InputError(f"{name}: big-endian {dtype} is not a device dtype")
    if not _contiguous(shape, cai.get("strides"), dtype.itemsize):
        raise InputError(f"{name}: the kernels read C-contiguous tensors; call .contiguous() first")
    if cai.get("mask") is not None:
        raise InputError(f"{name}: masked arrays are not taken")
    stream = cai.get("stream") if int(cai.get("version", 0)) >= 3 else None
    stream = None if stream is None else int(stream)
    if dtype.byteorder != "=" and dtype.itemsize > 1:
        dtype = dtype.newbyteorder("=")
    return DeviceTensor(ptr, dtype, shape, device, stream, readonly)


def from_dlpack(obj, name: str, stream: int | None) -> DeviceTensor:
    """Read the producer's capsule, then release it at once: the caller's reference keeps the
    memory (``stream``: ours, so the producer orders its pending work before it)."""
    try:
        capsule = obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    except (TypeError, BufferError, RuntimeError, ValueError) as e:
        raise InputError(f"{name}: __dlpack__ failed ({e})") from None
    managed = dlpack.open_capsule(capsule)
    if managed is None:
        raise InputError(f"{name}: not a DLPack (dltensor) capsule")
    t = managed.dl_tensor
    try:
        key = (int(t.dtype.code), int(t.dtype.bits))
        if key not in _DL_DTYPES or int(t.dtype.lanes) != 1:
            raise InputError(
                f"{name}: DLPack dtype code {key[0]} bits {key[1]} lanes {t.dtype.lanes} "
                "is not float32, float16 or E4M3 codes"
            )
        if int(t.device.device_type) not in DEVICE_KINDS:
            raise InputError(
                f"{name}: DLPack device type {t.device.device_type} is not CUDA memory"
            )
        dtype = _DL_DTYPES[key]
        shape = tuple(int(t.shape[i]) for i in range(t.ndim))
        strides = (
            None
            if not t.strides
            else tuple(int(t.strides[i]) * dtype.itemsize for i in range(t.ndim))
        )
        if not _contiguous(shape, strides, dtype.itemsize):
            raise InputError(
                f"{name}: the kernels read C-contiguous tensors; call .contiguous() first"
            )
        ptr = int(t.data or 0) + int(t.byte_offset)
        ordinal = int(t.device.device_id) if int(t.device.device_type) == dlpack.KDL_CUDA else None
        return DeviceTensor(ptr, dtype, shape, ordinal, None)
    finally:
        dlpack.consume(capsule, managed)


def device_tensor(obj, name: str, stream: int | None = None) -> DeviceTensor:
    """``__cuda_array_interface__`` when offered (an attribute read), else ``__dlpack__``. A
    producer refusing both (a PyTorch tensor that requires grad, a dtype it cannot export) is
    an InputError carrying its own words."""
    if type(obj) is _torch_tensor_type():
        t = _from_torch(obj)
        if t is not None:
            return t
    own = getattr(obj, "device_tensor", None)  # a hand-off view read its protocols once, at open
    if isinstance(own, DeviceTensor):
        return own
    refusal = None
    try:
        cai = getattr(obj, "__cuda_array_interface__", None)
    except Exception as e:  # noqa: BLE001 - the property itself raised: the producer's refusal
        cai, refusal = None, e
    if cai is not None:
        try:  # the interface names no device; DLPack's device query does, without a capsule
            return from_cuda_array_interface(cai, name, _dlpack_ordinal(obj))
        except Exception as e:  # noqa: BLE001 - DLPack may still describe it (float8, ...)
            refusal = e
    if hasattr(obj, "__dlpack__"):
        try:
            return from_dlpack(obj, name, stream)
        except InputError:
            if refusal is None:
                raise
    if refusal is not None:
        raise InputError(f"{name}: {type(obj).__name__} could not be read ({refusal})") from None
    raise InputError(
        f"{name}: {type(obj).__name__} offers neither __cuda_array_interface__ nor __dlpack__"
    )


def _dlpack_ordinal(obj) -> int | None:
    """The CUDA ordinal ``__dlpack_device__`` reports; None when it is absent or not kDLCUDA
    (pinned or managed memory: the driver is asked instead)."""
    query = getattr(obj, "__dlpack_device__", None)
    if query is None:
        return None
    try:
        kind, ordinal = query()
    except Exception:  # noqa: BLE001 - a producer that cannot say: the driver is asked
        return None
    return int(ordinal) if int(kind) == dlpack.KDL_CUDA else None


def check_shape(t: DeviceTensor, name: str, shape) -> None:
    if tuple(t.shape) != tuple(shape):
        raise InputError(f"{name}: shape {tuple(t.shape)} != expected {tuple(shape)}")
