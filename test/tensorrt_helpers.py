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


def build_for(lib, smap, precision: str, target, **launch_options):
    """(BuiltEngine, this calibration's schedule) for ``smap`` on ``target``."""
    from bevpool_ros.backends.tensorrt.builder import build_engine, plugin_config_for

    cfg, sched = plugin_config_for(smap, precision, target, **launch_options)
    return build_engine(lib, cfg, target), sched


def bind_to_map(plugin, smap, sched):
    """Play TensorRT's on_shape_change for this calibration's map inputs; returns the arrays."""
    from bevpool_ros.backends.tensorrt.plugin_config import map_inputs
    from bevpool_ros.backends.tensorrt.standin import TensorDesc

    cfg = plugin.cfg
    arrays = map_inputs(cfg, smap, sched)
    shapes = [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in arrays.values())]
    plugin.on_shape_change([TensorDesc(tuple(s)) for s in shapes], [TensorDesc(tuple(cfg.output_shape))])
    return arrays


def recalibrated(rig, shift=(0.04, -0.03, 0.02)):
    """The same rig after a calibration update: every camera moved by a few centimetres."""
    from dataclasses import replace

    return rig.with_cameras([replace(c, translation=tuple(t + d for t, d in zip(c.translation, shift)))
                             for c in rig.cameras])
