"""The one FP8 E4M3 codec: exact rounding, the float16 table path, and the kernels' quantiser."""
from __future__ import annotations

import numpy as np
import pytest

from bevpool_ros import fp8
from bevpool_ros.kernels import fp8 as kernel_fp8

ALL_HALF = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def test_known_codes():
    assert fp8.DECODE[0x7E] == fp8.E4M3_MAX == 448.0
    assert fp8.DECODE[0x01] == 2.0 ** -9 and fp8.DECODE[0x38] == 1.0
    assert fp8.encode(np.float32([1.0625, 1000.0, -1000.0, -0.0, np.nan])).tolist() == [0x38, 0x7E, 0xFE, 0x80, 0x7F]


def test_every_finite_code_round_trips():
    codes = np.arange(256, dtype=np.uint8)
    finite = ~fp8.nan_mask(codes)
    assert np.array_equal(fp8.encode(fp8.decode(codes[finite], np.float64)), codes[finite])


def test_ties_go_to_the_even_code():
    # 1.0 (0x38) and 1.125 (0x39): the midpoint 1.0625 rounds to the even code 0x38
    assert fp8.encode(np.float64([1.0625, 1.1875]))[0] == 0x38
    assert fp8.encode(np.float64([1.1875]))[0] == 0x3A  # 1.125 | 1.25 -> even 0x3A


def test_float16_table_matches_exact_rounding_on_every_half():
    assert np.array_equal(fp8.encode(ALL_HALF), fp8._encode_exact(ALL_HALF.astype(np.float64)))


@pytest.mark.parametrize("scale", [1.0, 8.0, 0.125, 2.0 ** -12, 2.0 ** 7, 3.0])
def test_quantize_fast_path_is_exact(scale):
    x = (np.random.default_rng(7).standard_normal(50_000) * 5).astype(np.float16)
    expect = fp8._encode_exact(x.astype(np.float64) * scale)
    assert np.array_equal(kernel_fp8.quantize(x, scale), expect)


def test_kernel_encode_refuses_non_finite():
    with pytest.raises(ValueError, match="NaN or Inf"):
        kernel_fp8.encode(np.array([1.0, np.inf]))
    assert kernel_fp8.has_nan_codes(np.array([0x7F], np.uint8))
