"""The node's depth range check on what a GPU backend receives: raw E4M3 codes and unscanned NaN."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def exact_verdict(arr):
    """The check's answer computed on values alone, as the slow path does it."""
    vals = fp8.decode(arr, np.float32) if arr.dtype == np.uint8 else arr.astype(np.float64)
    if not np.isfinite(vals).all():
        return "non_finite"
    return None if (vals.min() >= 0 and vals.max() <= 1.01) else "depth_out_of_range"


def verdict(arr):
    try:
        check_depth_range(arr)
    except TensorError as e:
        return e.reason
    return None


# every bit pattern near the edges: zero, -0.0, just under and over 1.01, NaN/Inf, negatives
EDGE16 = np.array([0x0000, 0x8000, 0x0001, 0x3C00, 0x3C09, 0x3C0A, 0x3C0B, 0x7BFF, 0x7C00, 0x7E00,
                   0x8001, 0xBC00, 0xFC00], np.uint16).view(np.float16)
EDGE32 = np.array([0.0, -0.0, 1e-45, 1.0, 1.0099999, 1.01, 1.0100001, np.inf, np.nan, -1e-45, -1.0],
                  np.float32)


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_the_integer_fast_path_agrees_with_the_values(data):
    """check_depth_range decides by one integer max when it can: its verdict (in range, out of
    range, non-finite) must be the values' own for every dtype the node passes it."""
    kind = data.draw(st.sampled_from(["float16", "float32", "e4m3"]))
    n = data.draw(st.integers(1, 40))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    if kind == "e4m3":
        arr = rng.integers(0, 0x3A, n).astype(np.uint8)  # mostly in range
        edges = np.arange(256, dtype=np.uint8)
    else:
        dtype = np.dtype(kind)
        arr = (rng.random(n) * 1.02).astype(dtype)
        edges = EDGE16 if dtype == np.float16 else EDGE32
    for i in data.draw(st.lists(st.integers(0, n - 1), max_size=3)):
        arr[i] = edges[data.draw(st.integers(0, len(edges) - 1))]
    assert verdict(arr) == exact_verdict(arr)
