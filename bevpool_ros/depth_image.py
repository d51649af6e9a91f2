"""Metric depth images -> the per-pixel distribution over the rig's depth bins that BEV pooling wants.

A depth camera gives one depth per pixel; the pooling operator wants depth[D, H, W], a weight per
depth bin for each feature-map pixel. Conversion, per image:
  1. metres: 32FC1 as is, 16UC1 / mono16 millimetres x 0.001 (the REP 118 encodings);
  2. resized to the feature grid H x W by nearest sampling at feature-pixel centres (averaging
     would invent depths between a foreground edge and the background);
  3. invalid depth (0, negative, NaN, +-Inf: REP 118's "no return" codes) -> an all-zero column;
  4. ``one_hot``: weight 1 in the bin nearest the depth, 0 outside the bins' range;
     ``gaussian``: exp(-(bin - depth)^2 / 2 sigma^2) normalised to sum 1 over the bins, for depths
     within the bins' range (half a step beyond the first/last bin centre).
Written over an array module ``xp`` (numpy, or cupy where the backend's device has it), so the
same code runs on the device that pools.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .image_codec import ImageError, image_to_array
from .node.logtext import shown

DEPTH_ENCODINGS = {"32FC1": 1.0, "16UC1": 1e-3, "mono16": 1e-3}  # encoding -> metres per unit
DISTRIBUTIONS = ("one_hot", "gaussian")


@dataclass(frozen=True)
class DepthBins:
    start: float    # centre of bin 0, metres
    step: float
    count: int

    @classmethod
    def of_rig(cls, rig) -> "DepthBins":
        return cls(float(rig.depth_start), float(rig.depth_step), int(rig.num_depth_bins))

    def centres(self, xp=np):
        return self.start + self.step * xp.arange(self.count, dtype=xp.float32)


def depth_metres(msg, max_bytes: int = 1 << 31) -> np.ndarray:
    """[h, w] float32 metres from a depth Image; ImageError for any other encoding."""
    if msg.encoding not in DEPTH_ENCODINGS:
        raise ImageError("bad_encoding", f"depth encoding {shown(msg.encoding)}, expected one of {sorted(DEPTH_ENCODINGS)}")
    raw = image_to_array(msg, max_bytes)
    scale = DEPTH_ENCODINGS[msg.encoding]
    return raw.astype(np.float32) * np.float32(scale) if scale != 1.0 else raw.astype(np.float32, copy=False)


def resize_nearest(depth, height: int, width: int, xp=np):
    """[h, w] -> [height, width], each output pixel the input pixel under its centre."""
    h, w = depth.shape
    rows = xp.minimum(((xp.arange(height) + 0.5) * (h / height)).astype(xp.int64), h - 1)
    cols = xp.minimum(((xp.arange(width) + 0.5) * (w / width)).astype(xp.int64), w - 1)
    return depth[rows[:, None], cols[None, :]]


def depth_distribution(depth, bins: DepthBins, mode: str = "one_hot", sigma: float = 0.5, xp=np):
    """depth [H, W] metres -> float32 [D, H, W] weights (see the module doc)."""
    if mode not in DISTRIBUTIONS:
        raise ValueError(f"depth distribution {mode!r} not in {DISTRIBUTIONS}")
    depth = xp.asarray(depth, dtype=xp.float32)
    lo, hi = bins.start - 0.5 * bins.step, bins.start + (bins.count - 0.5) * bins.step
    valid = xp.isfinite(depth) & (depth > 0) & (depth >= lo) & (depth < hi)
    d = xp.where(valid, depth, xp.float32(bins.start))  # placeholder where invalid; zeroed below
    if mode == "one_hot":
        index = xp.clip(xp.rint((d - bins.start) / bins.step), 0, bins.count - 1).astype(xp.int64)
        out = (xp.arange(bins.count)[:, None, None] == index[None]).astype(xp.float32)
    else:
        diff = bins.centres(xp)[:, None, None] - d[None]
        out = xp.exp(-0.5 * (diff / xp.float32(sigma)) ** 2).astype(xp.float32)
        out /= xp.maximum(out.sum(axis=0, keepdims=True), xp.float32(1e-30))
    return out * valid[None].astype(xp.float32)


class DepthImageConverter:
    """One camera's depth Image -> [D, H, W] on the rig's bins and feature grid."""

    def __init__(self, rig, mode: str = "one_hot", sigma: float = 0.5, max_bytes: int = 1 << 31, xp=np):
        if mode not in DISTRIBUTIONS:
            raise ValueError(f"depth distribution {mode!r} not in {DISTRIBUTIONS}")
        if not sigma > 0:
            raise ValueError(f"gaussian sigma {sigma} m must be > 0")
        self.bins = DepthBins.of_rig(rig)
        self.height, self.width = rig.feature_height, rig.feature_width
        self.mode, self.sigma, self.max_bytes, self.xp = mode, float(sigma), int(max_bytes), xp

    def __call__(self, msg):
        depth = depth_metres(msg, self.max_bytes)
        small = resize_nearest(self.xp.asarray(depth), self.height, self.width, self.xp)
        return depth_distribution(small, self.bins, self.mode, self.sigma, self.xp)


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
