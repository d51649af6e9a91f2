"""Camera payloads that live on a GPU (a hand-off view of another process's tensor, any
``__cuda_array_interface__`` / DLPack device tensor) as the backends take them.

The GPU backends read them in place (gpu/device_inputs.py); a backend without a device (cpu)
downloads each one here, after waiting for its producer (``wait()``, a hand-off view's IPC
event), so every backend accepts the same camera sets.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError


def is_device_payload(obj) -> bool:
    if obj is None or isinstance(obj, np.ndarray):
        return False
    from .tensors import is_device

    return is_device(obj)


def any_device(cameras) -> bool:
    return any(is_device_payload(t) for cam in cameras for t in cam)


def download(obj, name: str = "camera") -> np.ndarray:
    """A device payload as a new host array (E4M3 codes stay codes); anything else as it is."""
    if not is_device_payload(obj):
        return obj
    wait = getattr(obj, "wait", None)
    if wait is not None:
        wait()  # the producer's write is done before the bytes are read
    copy = getattr(obj, "copy_to_host", None)
    if copy is not None:
        return copy()
    from .driver import api, check
    from .tensors import device_tensor

    t = device_tensor(obj, name)
    out = np.empty(t.shape, t.dtype)
    try:
        check(api().cuMemcpyDtoH(out.ctypes.data, t.ptr, t.nbytes), "cuMemcpyDtoH")
    except Exception as e:  # a pointer of another context or a freed buffer
        raise InputError(f"{name}: cannot read the device tensor ({e})") from None
    return out
