"""Small maps and the TensorRT(-RTX) module for the test_tensorrt_* tests."""
from __future__ import annotations

import numpy as np
import pytest

from bevpool_ros.scatter_map import scatter_map_from_ranks


def tiny_map(channels: int = 16, points: int = 300, seed: int = 0, grid=(1, 6, 7), depth_shape=(2, 4, 3, 5),
             key: str = "tiny"):
    rng = np.random.default_rng(seed)
    N, D, H, W = depth_shape
    Z, Y, X = grid
    rd = rng.integers(0, N * D * H * W, points)
    rb = rng.integers(0, Z * Y * X, points)
    order = np.argsort(rb, kind="stable")
    rd, rb = rd[order], rb[order]
    rf = (rd // (D * H * W)) * (H * W) + rd % (H * W)
    return scatter_map_from_ranks(rd, rf, rb, depth_shape=depth_shape, grid_shape=grid, channels=channels,
                                  key=key)


def trt_rtx_or_skip():
    """The TensorRT module, skipping unless it is TensorRT-RTX with a safe ONNX parser."""
    from bevpool_ros.backends.tensorrt.trt_import import TensorRTMissing, load_tensorrt

    try:
        lib = load_tensorrt()
    except TensorRTMissing as e:
        pytest.skip(f"no TensorRT module: {e}")
    if not lib.is_rtx:
        pytest.skip(f"{lib.tag}: these AOT tests are for TensorRT-RTX (full TensorRT builds for a live GPU)")
    if not lib.onnx_parser_safe:
        pytest.skip("TensorRT-RTX ONNX parser unsafe in this process (library fix not applied)")
    return lib
