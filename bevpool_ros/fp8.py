"""OCP FP8 E4M3FN codec in numpy (numpy has no float8 dtype): the one copy the project uses.

E4M3FN: 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; subnormals when the exponent
field is 0; no infinities; 0x7F / 0xFF are NaN; the largest finite magnitude is 448.
Encoding rounds to nearest, ties to the even code, and saturates at +-448; NaN -> 0x7F.
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
    return values


DECODE = _decode_table()                        # code -> float64, exact
_POS_CODES = np.arange(0x7F)                    # 0..126: the finite non-negative codes, ascending
_POS_VALUES = DECODE[:0x7F]


def decode(codes: np.ndarray, dtype=np.float32) -> np.ndarray:
    """uint8 codes -> floats (every E4M3 value is exact in float16 and wider)."""
    return DECODE[np.asarray(codes, dtype=np.uint8)].astype(dtype, copy=False)


def _encode_exact(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    mag = np.minimum(np.abs(v), E4M3_MAX)
    hi = np.clip(np.searchsorted(_POS_VALUES, mag, side="left"), 1, 0x7E)
    lo = hi - 1
    with np.errstate(invalid="ignore"):  # NaN lanes are overwritten below
        d_lo, d_hi = mag - _POS_VALUES[lo], _POS_VALUES[hi] - mag
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (_POS_CODES[hi] % 2 == 0))
    code = np.where(pick_hi, _POS_CODES[hi], _POS_CODES[lo]).astype(np.uint8)
    code = np.where(np.signbit(v), code | 0x80, code)  # -0.0 -> 0x80
    return np.where(np.isnan(v), np.uint8(0x7F), code).astype(np.uint8)


# float16 bit pattern -> E4M3 code: one table lookup encodes a float16 array exactly
_FROM_FP16 = _encode_exact(np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16))


def encode(values: np.ndarray) -> np.ndarray:
    """floats -> uint8 codes (see module doc). float16 input takes the exact lookup-table path."""
    v = np.asarray(values)
    if v.dtype == np.float16:
        return _FROM_FP16[v.view(np.uint16)]
    return _encode_exact(v)


def nan_mask(codes: np.ndarray) -> np.ndarray:
    return (np.asarray(codes, dtype=np.uint8) & 0x7F) == 0x7F


def has_nan_codes(codes: np.ndarray) -> bool:
    return bool(nan_mask(codes).any())
