"""A DLPack capsule over memory someone else owns (legacy "dltensor" protocol, version 0.x ABI).

Enough for ``torch.from_dlpack``, ``cupy.from_dlpack`` and ``numpy.from_dlpack``: the capsule
points at the caller's memory and keeps ``owner`` alive until the consumer's deleter runs.
"""
from __future__ import annotations

import ctypes

import numpy as np

KDL_CPU, KDL_CUDA = 1, 2
_KDL_INT, _KDL_UINT, _KDL_FLOAT = 0, 1, 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_Deleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]

_alive: dict[int, tuple] = {}  # address of the DLManagedTensor -> what must outlive the consumer


@_Deleter
def _release(managed) -> None:
    _alive.pop(ctypes.addressof(managed.contents), None)


_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@_CapsuleDestructor
def _capsule_gone(capsule) -> None:
    # a capsule nobody consumed still owns its tensor (a consumer renames it "used_dltensor")
    if _capsule_is_valid(capsule, b"dltensor"):
        _alive.pop(_capsule_pointer(capsule, b"dltensor"), None)


def dl_dtype(dtype) -> DLDataType:
    dtype = np.dtype(dtype)
    code = {"f": _KDL_FLOAT, "i": _KDL_INT, "u": _KDL_UINT}.get(dtype.kind)
    if code is None:
        raise TypeError(f"no DLPack code for dtype {dtype}")
    return DLDataType(code, dtype.itemsize * 8, 1)


def to_capsule(ptr: int, shape, dtype, device_type: int, device_id: int, owner):
    """A "dltensor" capsule of the C-contiguous array at ``ptr``; ``owner`` lives as long as it."""
    shape = tuple(int(s) for s in shape)
    shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    managed = DLManagedTensor()
    managed.dl_tensor = DLTensor(ctypes.c_void_p(int(ptr)), DLDevice(device_type, device_id), len(shape),
                                 dl_dtype(dtype), shape_arr, None, 0)  # strides NULL: C order
    managed.deleter = _release
    address = ctypes.addressof(managed)
    _alive[address] = (managed, shape_arr, owner)
    return _capsule_new(address, b"dltensor", _capsule_gone)
