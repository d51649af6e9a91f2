"""The node's depth range check on what a GPU backend receives: raw E4M3 codes and unscanned NaN."""
import numpy as np
import pytest

from bevpool_ros import fp8
from bevpool_ros.io.tensor_codec import TensorError
from bevpool_ros.node.inputs import check_depth_range


def test_raw_e4m3_codes_are_checked_as_values_not_as_codes():
    d = np.random.default_rng(0).random((59, 16, 44)).astype(np.float32)
    d /= d.sum(axis=0, keepdims=True)
    codes = fp8.encode(d)
    assert codes.max() > 1  # as integers the codes would fail a [0, 1] check
    check_depth_range(codes)  # decoded, they are a distribution
    with pytest.raises(TensorError) as e:
        check_depth_range(fp8.encode(np.where(d == d.max(), 2.0, d)))
    assert e.value.reason == "depth_out_of_range"


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_depth_is_non_finite_not_out_of_range(bad):
    d = np.zeros((2, 3, 4), np.float16)
    d[1, 2, 3] = bad
    with pytest.raises(TensorError) as e:
        check_depth_range(d)
    assert e.value.reason == "non_finite"
    codes = fp8.encode(np.zeros((2, 3, 4)))
    codes[0, 0, 0] = 0x7F  # the E4M3 NaN code
    with pytest.raises(TensorError) as e:
        check_depth_range(codes)
    assert e.value.reason == "non_finite"
