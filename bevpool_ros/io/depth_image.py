"""A depth camera's ``sensor_msgs/Image`` -> ``MetricDepth`` at the feature grid (metric_depth.py).

Per image: decode (cv_bridge, or the package's zero-copy reader: image_codec.py), take the pixel
under each feature-pixel centre (nearest; on the raw values, so a 16UC1 image is never converted
whole), then scale to metres: 32FC1 as is, 16UC1 / mono16 millimetres x 0.001 (REP 118). The
expansion into the distribution over depth bins happens in the backend, on its device.
"""
from __future__ import annotations

import numpy as np

from ..logtext import shown
from ..metric_depth import DISTRIBUTIONS, DepthBins, DepthSpec, MetricDepth, depth_distribution, resize_nearest
from .image_codec import ImageError, image_to_array

DEPTH_ENCODINGS = {"32FC1": 1.0, "16UC1": 1e-3, "mono16": 1e-3}  # encoding -> metres per unit


def depth_metres(msg, height: int, width: int, max_bytes: int = 1 << 31) -> np.ndarray:
    """[height, width] float32 metres sampled from a depth Image; ImageError for any other encoding."""
    if msg.encoding not in DEPTH_ENCODINGS:
        raise ImageError("bad_encoding",
                         f"depth encoding {shown(msg.encoding)}, expected one of {sorted(DEPTH_ENCODINGS)}")
    return metres_at_grid(image_to_array(msg, max_bytes), msg.encoding, height, width)


def metres_at_grid(raw: np.ndarray, encoding: str, height: int, width: int) -> np.ndarray:
    """A decoded depth image (raw units of ``encoding``) -> [height, width] float32 metres."""
    small = resize_nearest(raw, height, width)  # a gather: a new small array
    scale = DEPTH_ENCODINGS[encoding]
    return small.astype(np.float32) * np.float32(scale) if scale != 1.0 else small.astype(np.float32, copy=False)


class DepthImageConverter:
    """One camera's depth Image -> MetricDepth on the rig's feature grid and bins."""

    def __init__(self, rig, mode: str = "one_hot", sigma: float = 0.5, max_bytes: int = 1 << 31):
        self.spec = DepthSpec(DepthBins.of_rig(rig), mode, float(sigma))
        self.height, self.width = rig.feature_height, rig.feature_width
        self.max_bytes = int(max_bytes)

    def __call__(self, msg) -> MetricDepth:
        return MetricDepth(depth_metres(msg, self.height, self.width, self.max_bytes), self.spec)


def converters_for(cameras, modes, rig, distribution: str, sigma: float, max_bytes: int) -> dict:
    """{camera: DepthImageConverter} for the cameras whose ``input.depth_mode`` is 'image'.

    ``modes``: one value for every camera or one per camera (in ``cameras`` order); ValueError otherwise.
    """
    modes = list(modes)
    if len(modes) not in (1, len(cameras)):
        raise ValueError(f"input.depth_mode: {len(modes)} values for {len(cameras)} cameras (give 1 or {len(cameras)})")
    per_camera = modes * len(cameras) if len(modes) == 1 else modes
    return {cam: DepthImageConverter(rig, distribution, sigma, max_bytes)
            for cam, mode in zip(cameras, per_camera) if mode == "image"}


__all__ = ["DEPTH_ENCODINGS", "DISTRIBUTIONS", "DepthBins", "DepthSpec", "MetricDepth", "DepthImageConverter",
           "converters_for", "depth_distribution", "depth_metres", "metres_at_grid", "resize_nearest"]
