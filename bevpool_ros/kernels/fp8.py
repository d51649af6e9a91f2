"""FP8 inputs for the kernels: the scaling rule and quantisation (codec: bevpool_ros/fp8.py).

Scaling rule (documented in docs/kernels.md): depth and features each get one power-of-two
scale s = 2^k chosen so that max|x| * s lies in (8, 16]. Powers of two are exact, values near
the maximum stay far from E4M3's subnormal range, and a product of two scaled values is at most
256, so a lane's FP16 partial sum over at most K points stays finite for K <= 255. The kernel
multiplies each output by 1 / (s_depth * s_feat) before its one FP16 write.
"""
from __future__ import annotations

import math

import numpy as np

from ..fp8 import DECODE, E4M3_MAX, decode, has_nan_codes  # noqa: F401  (the kernels' codec)
from ..fp8 import encode as _encode

SCALE_TARGET = 16.0


def encode(x: np.ndarray) -> np.ndarray:
    """Strict encode for kernel inputs: NaN/Inf are refused, not turned into NaN codes."""
    x = np.asarray(x)
    if not np.isfinite(x).all():
        raise ValueError("encode: input contains NaN or Inf")
    return _encode(x)


def pow2_scale(x: np.ndarray, target: float = SCALE_TARGET) -> float:
    """The scaling rule: 2^k with max|x| * 2^k in (target/2, target]."""
    m = float(np.max(np.abs(x))) if np.size(x) else 0.0
    if m == 0.0 or not np.isfinite(m):
        return 1.0
    return float(2.0 ** np.floor(np.log2(target / m)))


def quantize(x: np.ndarray, scale: float) -> np.ndarray:
    """E4M3 codes of x * scale. float16 input with a power-of-two scale stays exact in float16
    (no double rounding: the product only moves the exponent), so it takes the table path."""
    x = np.asarray(x)
    if x.dtype == np.float16 and math.frexp(scale)[0] == 0.5:
        return encode((x.astype(np.float32) * np.float32(scale)).astype(np.float16))
    return encode(x.astype(np.float64) * scale)
