"""The backends' errors and the checks every backend runs on what it is given."""
from __future__ import annotations

import numpy as np

from .finite import all_finite
from .scatter_map import ScatterMap


class BackendUnavailable(RuntimeError):
    """The backend cannot run here (no GPU, library missing); the caller may fall back."""


class InputError(ValueError):
    """A frame's tensors do not fit the prepared scatter map; the frame must be dropped."""


class NonFiniteInput(InputError):
    """An input holds NaN/Inf (or, for FP16 kernels, a value beyond FP16): the node's ``non_finite``
    drop, whether its host check or a backend's device check found it."""


class NonFiniteOutput(RuntimeError):
    """The pooled grid holds NaN/Inf (e.g. an FP16 overflow); the frame must not be published."""


OUTPUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def check_out(smap: ScatterMap, out: np.ndarray) -> np.ndarray:
    """``out`` must be where a BEV can land: the map's grid shape, a published dtype, writable, contiguous."""
    if not isinstance(out, np.ndarray) or tuple(out.shape) != tuple(smap.bev_shape) \
            or out.dtype not in OUTPUT_DTYPES or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out: expected a writable contiguous float32/float16 array of shape {smap.bev_shape}")
    return out


def check_inputs(smap: ScatterMap, depth: np.ndarray, feat: np.ndarray,
                 allowed_dtypes=(np.float32, np.float16), check_finite: bool = True) -> None:
    """Raise InputError unless depth/feat have the map's shapes, an allowed dtype (and finite values)."""
    for name, arr, shape in (("depth", depth, smap.depth_shape), ("feat", feat, smap.feat_shape)):
        if not isinstance(arr, np.ndarray):
            raise InputError(f"{name}: expected a numpy array, got {type(arr).__name__}")
        if arr.dtype not in allowed_dtypes:
            raise InputError(f"{name}: dtype {arr.dtype} not in {[np.dtype(d).name for d in allowed_dtypes]}")
        if tuple(arr.shape) != tuple(shape):
            raise InputError(f"{name}: shape {tuple(arr.shape)} != expected {tuple(shape)}")
        if check_finite and not all_finite(arr):
            raise NonFiniteInput(f"{name}: contains NaN or Inf")
