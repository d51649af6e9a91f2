"""numpy <-> bevpool_msgs/Tensor without per-element Python work.

Writing: one ``memoryview`` copy into the message's ``uint8[]`` (an ``array.array``).
Reading: ``np.frombuffer`` over the received bytes (no copy), after every size check, so a
tensor larger than the configured maximum is refused before the node allocates anything.
"""
from __future__ import annotations

import array
import math
import sys
from dataclasses import dataclass

import numpy as np

from .. import fp8
from ..finite import all_finite
from ..logtext import shown

# Codes as in msg/Tensor.msg (kept here too so this module imports without the messages).
DTYPE_CODES = {
    "uint8": 1, "int8": 2, "uint16": 3, "int16": 4, "uint32": 5, "int32": 6, "int64": 7,
    "float16": 8, "float32": 9, "float64": 10, "bfloat16": 11, "float8_e4m3": 12, "float8_e5m2": 13,
}
CODE_NAMES = {v: k for k, v in DTYPE_CODES.items()}
ITEMSIZE = {"uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "uint32": 4, "int32": 4, "int64": 8,
            "float16": 2, "float32": 4, "float64": 8, "bfloat16": 2, "float8_e4m3": 1, "float8_e5m2": 1}
# little-endian numpy storage types; the 8-bit floats and bfloat16 travel as raw unsigned codes
STORAGE = {"uint8": "<u1", "int8": "<i1", "uint16": "<u2", "int16": "<i2", "uint32": "<u4",
           "int32": "<i4", "int64": "<i8", "float16": "<f2", "float32": "<f4", "float64": "<f8",
           "bfloat16": "<u2", "float8_e4m3": "<u1", "float8_e5m2": "<u1"}
FLOAT_INPUTS = ("float32", "float16", "float8_e4m3")  # what the node accepts for depth/feat


class TensorError(ValueError):
    """A tensor message cannot be used; ``reason`` is the counter it is dropped under."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class TensorHeader:
    """What a Tensor message claims, checked before its payload is touched."""

    dtype: str
    shape: tuple[int, ...]
    layout: str
    nbytes: int


def inspect_header(msg, max_bytes: int) -> TensorHeader:
    """Validate dtype code, shape, declared size and payload length; no allocation."""
    name = CODE_NAMES.get(int(msg.dtype))
    if name is None:
        raise TensorError("bad_dtype", f"unknown dtype code {int(msg.dtype)}")
    if len(msg.shape) > 8:
        raise TensorError("bad_shape", f"{len(msg.shape)} dimensions (at most 8)")
    shape = tuple(int(s) for s in msg.shape)
    # Python integers: a hostile shape cannot overflow the size computation
    nbytes = math.prod(shape) * ITEMSIZE[name]
    if nbytes > max_bytes:
        raise TensorError("too_large", f"shape {list(shape)} {name} = {nbytes} bytes > maximum {max_bytes}")
    got = len(msg.data)
    if got > max_bytes:
        raise TensorError("too_large", f"payload {got} bytes > maximum {max_bytes}")
    if got != nbytes:
        raise TensorError("bad_size", f"payload {got} bytes, shape {list(shape)} {name} needs {nbytes}")
    layout = str(msg.layout)
    if layout and len(layout) != len(shape):
        raise TensorError("bad_shape", f"layout {shown(layout)} names {len(layout)} dims, shape has {len(shape)}")
    return TensorHeader(name, shape, layout, nbytes)


def _payload_view(data) -> memoryview:
    # rclpy delivers uint8[] as array.array('B'); bytes/bytearray/ndarray also work
    return memoryview(data).cast("B") if not isinstance(data, memoryview) else data.cast("B")


def raw_array(msg, header: TensorHeader) -> np.ndarray:
    """Zero-copy view of the payload in its storage dtype (codes for fp8/bf16)."""
    arr = np.frombuffer(_payload_view(msg.data), dtype=STORAGE[header.dtype])
    return arr.reshape(header.shape)


def to_float(msg, header: TensorHeader, check_finite: bool = True, raw_fp8: bool = False) -> np.ndarray:
    """Payload as float32/float16 ndarray (a view when possible). Raises TensorError.

    ``raw_fp8``: E4M3 stays as its uint8 codes (a GPU backend converts on the device)."""
    if header.dtype not in FLOAT_INPUTS:
        raise TensorError("bad_dtype", f"dtype {header.dtype} not in {list(FLOAT_INPUTS)}")
    raw = raw_array(msg, header)
    if header.dtype == "float8_e4m3":
        if check_finite and fp8.nan_mask(raw).any():
            raise TensorError("non_finite", "float8_e4m3 tensor holds NaN codes")
        return raw if raw_fp8 else fp8.decode(raw, np.float16)  # every E4M3 value is exact in float16
    arr = raw if sys.byteorder == "little" else raw.astype(raw.dtype.newbyteorder("="))
    if check_finite and not all_finite(arr):
        raise TensorError("non_finite", "tensor holds NaN or Inf")
    return arr


def from_msg(msg, max_bytes: int = 1 << 31, check_finite: bool = True) -> np.ndarray:
    """Convenience: header checks + float conversion in one call."""
    return to_float(msg, inspect_header(msg, max_bytes), check_finite)


def decode_any(msg, max_bytes: int = 1 << 31) -> np.ndarray:
    """Any dtype -> ndarray (fp8 decoded to float32, bfloat16 widened to float32)."""
    h = inspect_header(msg, max_bytes)
    raw = raw_array(msg, h)
    if h.dtype == "float8_e4m3":
        return fp8.decode(raw, np.float32)
    if h.dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if h.dtype == "float8_e5m2":  # E5M2 is the top byte of an IEEE float16
        return (raw.astype(np.uint16) << 8).view(np.float16)
    return raw.astype(raw.dtype.newbyteorder("="), copy=False)


def fill_msg(msg, arr: np.ndarray, name: str = "", layout: str = "", dtype: str | None = None,
             reuse: "ReusableBuffer | None" = None):
    """Write ``arr`` into a Tensor message (shape, dtype code, little-endian bytes); returns msg.

    ``dtype="float8_e4m3"`` encodes a float array to FP8 codes; otherwise the dtype is the
    array's own (or ``dtype`` casts to it). With ``reuse``, the payload is written (and cast)
    straight into a buffer kept from the previous call: one pass, no fresh multi-MB allocation.
    Only valid once the previous message using that buffer has been published.
    """
    arr = np.asarray(arr)
    if dtype == "float8_e4m3":
        payload = fp8.encode(arr)
    else:
        dtype = dtype or arr.dtype.name
        if dtype not in DTYPE_CODES or dtype in ("bfloat16", "float8_e5m2"):
            raise TensorError("bad_dtype", f"cannot encode dtype {dtype}")
        payload = arr if reuse is not None else np.ascontiguousarray(arr, dtype=STORAGE[dtype])
    if layout and len(layout) != arr.ndim:
        raise TensorError("bad_shape", f"layout {shown(layout)} does not match {arr.ndim} dims")
    msg.name = name
    msg.layout = layout
    msg.shape = [int(s) for s in arr.shape]
    msg.dtype = DTYPE_CODES[dtype]
    if reuse is not None:
        set_payload(msg, reuse.write(payload, STORAGE[dtype]))
        return msg
    data = array.array("B")
    data.frombytes(memoryview(np.ascontiguousarray(payload)).cast("B"))  # one copy, no Python loop
    set_payload(msg, data)
    return msg


def set_payload(msg, data: array.array) -> None:
    """msg.data = data without another copy.

    The generated setter copies an ``array.array`` unless field checking is on, in which case it
    only checks the type code and keeps the reference; so checking is switched on for this one
    assignment. Messages without that switch (other generators) get the plain assignment.
    """
    checking = getattr(msg, "_check_fields", None)
    if checking is False:
        msg._check_fields = True
        try:
            msg.data = data
        finally:
            msg._check_fields = False
    else:
        msg.data = data


class ReusableBuffer:
    """One ``array.array('B')`` payload reused from message to message (same size, same dtype).

    ``view`` lends the payload as an array the producer writes into (the pooling thread's backend
    copies the BEV straight there); ``write`` of that very view then copies nothing.
    """

    def __init__(self):
        self._data = array.array("B")

    def view(self, shape, dtype) -> np.ndarray:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if len(self._data) != nbytes:
            self._data = array.array("B", bytes(nbytes))
        return np.frombuffer(self._data, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)

    def holds(self, arr: np.ndarray) -> bool:
        """True when ``arr`` is exactly this payload's memory."""
        addr, _ = self._data.buffer_info()
        return arr.flags.c_contiguous and arr.ctypes.data == addr and arr.nbytes == len(self._data)

    def write(self, arr: np.ndarray, storage: str) -> array.array:
        if self.holds(arr) and arr.dtype == np.dtype(storage):
            return self._data  # the producer wrote it in place
        view = self.view(arr.shape, storage)
        np.copyto(view, arr, casting="same_kind")  # cast + copy in one pass
        return self._data


def make_tensor(arr: np.ndarray, name: str = "", layout: str = "", dtype: str | None = None, header=None):
    """A new bevpool_msgs/Tensor holding ``arr`` (needs the generated messages)."""
    from bevpool_msgs.msg import Tensor

    msg = fill_msg(Tensor(), arr, name, layout, dtype)
    if header is not None:
        msg.header = header
    return msg


def make_camera_tensor(arr: np.ndarray, name: str = "", layout: str = "", dtype: str | None = None):
    """A new bevpool_msgs/CameraTensor (the node's bounded input type) holding ``arr``.
    Its bounds are checked when it is published (rclpy refuses data over 16 MiB)."""
    from bevpool_msgs.msg import CameraTensor

    return fill_msg(CameraTensor(), arr, name, layout, dtype)
