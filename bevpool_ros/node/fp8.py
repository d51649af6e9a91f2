"""OCP FP8 E4M3FN <-> float, vectorised (numpy has no float8 dtype).

E4M3FN: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; subnormals when the exponent
field is 0; no infinities; 0x7F and 0xFF are NaN; the largest finite magnitude is 448.
"""
from __future__ import annotations

import numpy as np

E4M3_MAX = 448.0


def _decode_table() -> np.ndarray:
    codes = np.arange(256, dtype=np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = codes & 0x7
    normal = (1.0 + man / 8.0) * np.exp2(exp - 7.0)
    subnormal = (man / 8.0) * np.exp2(-6.0)
    values = sign * np.where(exp == 0, subnormal, normal)
    values[(codes & 0x7F) == 0x7F] = np.nan
    return values.astype(np.float32)


DECODE = _decode_table()                     # code -> float32, exact
_FINITE_CODES = np.flatnonzero(np.isfinite(DECODE[:128]))  # non-negative finite codes, ascending
_FINITE_VALUES = DECODE[_FINITE_CODES]


def decode(codes: np.ndarray, dtype=np.float32) -> np.ndarray:
    """uint8 codes -> float values (one table lookup per element, done by numpy)."""
    return DECODE[np.asarray(codes, dtype=np.uint8)].astype(dtype, copy=False)


def encode(values: np.ndarray) -> np.ndarray:
    """float values -> uint8 codes, round to nearest (ties to the even code), saturating at 448.

    NaN encodes to 0x7F. Used by tests and the synthetic publisher, not on the node's hot path.
    """
    v = np.asarray(values, dtype=np.float32)
    mag = np.minimum(np.abs(v), E4M3_MAX)
    hi = np.clip(np.searchsorted(_FINITE_VALUES, mag, side="left"), 0, len(_FINITE_VALUES) - 1)
    lo = np.maximum(hi - 1, 0)
    d_hi = _FINITE_VALUES[hi] - mag
    d_lo = mag - _FINITE_VALUES[lo]
    pick_lo = (d_lo < d_hi) | ((d_lo == d_hi) & (_FINITE_CODES[lo] % 2 == 0))
    code = np.where(pick_lo, _FINITE_CODES[lo], _FINITE_CODES[hi]).astype(np.uint8)
    code = np.where(np.signbit(v), code | 0x80, code)  # keeps -0.0 as 0x80
    return np.where(np.isnan(v), np.uint8(0x7F), code).astype(np.uint8)


def nan_mask(codes: np.ndarray) -> np.ndarray:
    return (np.asarray(codes, dtype=np.uint8) & 0x7F) == 0x7F
