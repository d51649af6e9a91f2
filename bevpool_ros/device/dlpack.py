"""DLPack capsules (legacy "dltensor" protocol, version 0.x ABI), made and read.

``to_capsule``: a capsule over memory someone else owns, enough for ``torch.from_dlpack``,
``cupy.from_dlpack`` and ``numpy.from_dlpack``: it points at the caller's memory and keeps
``owner`` alive until the consumer's deleter runs. ``open_capsule`` / ``consume``: a producer's
capsule read, then released (tensors.from_dlpack).
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




def _capi(name: str, restype, *argtypes):
    """A CPython capsule function with argument types of its own. ``ctypes.pythonapi.<name>`` is
    one object for the whole process: two callers setting different argtypes on it break each
    other (the destructor below passes an address, a consumer a capsule object)."""
    f = ctypes.pythonapi[name]  # a new function object per lookup
    f.restype, f.argtypes = restype, list(argtypes)
    return f


_CapsuleDestructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_capsule_new = _capi("PyCapsule_New", ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _CapsuleDestructor)
# the destructor is given the capsule's address
_capsule_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)
_capsule_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)
# a consumer holds the capsule object
_is_valid = _capi("PyCapsule_IsValid", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)
_get_pointer = _capi("PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)
_set_name = _capi("PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_char_p)


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


def open_capsule(capsule) -> DLManagedTensor | None:
    """The DLManagedTensor a producer's "dltensor" capsule holds; None if it is not one."""
    if not _is_valid(capsule, b"dltensor"):
        return None
    return DLManagedTensor.from_address(_get_pointer(capsule, b"dltensor"))


def consume(capsule, managed: DLManagedTensor) -> None:
    """Mark ``capsule`` consumed and release its tensor now (the producer's memory stays alive
    through the caller's reference to the producer's object)."""
    _set_name(capsule, b"used_dltensor")
    if managed.deleter:
        managed.deleter(ctypes.pointer(managed))
