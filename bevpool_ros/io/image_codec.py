"""sensor_msgs/Image <-> numpy: through cv_bridge when it is installed, the package's own otherwise.

The own conversion is zero-copy on read (``np.frombuffer`` over the received bytes, row padding
skipped by a strided view) and one copy on write. Both paths check the message before touching
its payload: a known encoding, ``step`` and ``data`` consistent with width x height, and a byte
count under a limit; a failed check raises ``ImageError`` whose ``reason`` is the drop counter.
"""
from __future__ import annotations

import array

import numpy as np

from ..logtext import shown
from .tensor_codec import TensorError, set_payload

# encoding -> (numpy dtype, channels); the encodings a depth camera or a visualisation uses
ENCODINGS = {
    "32FC1": (np.float32, 1), "16UC1": (np.uint16, 1), "mono16": (np.uint16, 1), "mono8": (np.uint8, 1),
    "8UC1": (np.uint8, 1), "rgb8": (np.uint8, 3), "bgr8": (np.uint8, 3), "rgba8": (np.uint8, 4),
    "bgra8": (np.uint8, 4), "64FC1": (np.float64, 1),
}


class ImageError(TensorError):
    """An Image message that cannot be used; ``reason`` is the counter it is dropped under."""


def _cv_bridge():
    try:
        from cv_bridge import CvBridge
    except ImportError:  # not installable from PyPI/Debian for ROS 2: the own conversion below
        return None
    return CvBridge()


_BRIDGE = _cv_bridge()


def check_image(msg, max_bytes: int) -> tuple[np.dtype, int]:
    """(dtype, channels) of a well-formed image; ImageError otherwise. No allocation."""
    if msg.encoding not in ENCODINGS:
        raise ImageError("bad_encoding", f"encoding {shown(msg.encoding)} not in {sorted(ENCODINGS)}")
    dtype, channels = ENCODINGS[msg.encoding]
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    row = width * channels * np.dtype(dtype).itemsize
    if height == 0 or width == 0:
        raise ImageError("bad_size", f"empty image {width}x{height}")
    if step < row:
        raise ImageError("bad_size", f"step {step} < {row} bytes for {width} px of {msg.encoding}")
    if step * height > max_bytes or len(msg.data) > max_bytes:
        raise ImageError("too_large", f"{step * height} bytes > maximum {max_bytes}")
    if len(msg.data) != step * height:
        raise ImageError("bad_size", f"data {len(msg.data)} bytes != step {step} x height {height}")
    return np.dtype(dtype), channels


def image_to_array(msg, max_bytes: int = 1 << 31) -> np.ndarray:
    """[H, W] (one channel) or [H, W, C] array of a checked Image, in native byte order."""
    dtype, channels = check_image(msg, max_bytes)
    if _BRIDGE is not None:
        return np.asarray(_BRIDGE.imgmsg_to_cv2(msg, desired_encoding="passthrough"))
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    flat = np.frombuffer(memoryview(msg.data).cast("B"), np.uint8)
    rows = np.lib.stride_tricks.as_strided(flat, shape=(h, w * channels * dtype.itemsize),
                                           strides=(step, 1), writeable=False)
    arr = rows.view(dtype.newbyteorder(">" if msg.is_bigendian else "<"))
    if not arr.dtype.isnative:
        arr = arr.astype(dtype.newbyteorder("="))  # foreign byte order: one converting copy
    return arr.reshape(h, w, channels) if channels > 1 else arr.reshape(h, w)


def array_to_image(arr: np.ndarray, encoding: str, header=None):
    """sensor_msgs/Image from [H, W] or [H, W, C] (one copy; cv_bridge's when installed)."""
    from sensor_msgs.msg import Image

    if encoding not in ENCODINGS:
        raise ImageError("bad_encoding", f"cannot write encoding {shown(encoding)}")
    dtype, channels = ENCODINGS[encoding]
    arr = np.ascontiguousarray(arr, dtype=np.dtype(dtype).newbyteorder("<"))
    if arr.ndim != (2 if channels == 1 else 3) or (channels > 1 and arr.shape[2] != channels):
        raise ImageError("bad_shape", f"shape {arr.shape} does not fit {encoding}")
    if _BRIDGE is not None:
        img = _BRIDGE.cv2_to_imgmsg(arr, encoding=encoding)
    else:
        img = Image()
        img.height, img.width = int(arr.shape[0]), int(arr.shape[1])
        img.encoding = encoding
        img.is_bigendian = 0
        img.step = img.width * channels * arr.dtype.itemsize
        data = array.array("B")
        data.frombytes(memoryview(arr).cast("B"))
        set_payload(img, data)
    if header is not None:
        img.header = header
    return img
