"""Metric depth at the feature grid -> the distribution over the rig's depth bins that pooling wants.

A depth camera gives one depth per pixel; the pooling operator wants depth[D, H, W], a weight per
depth bin for each feature-map pixel. Per camera:
  1. resize to the feature grid H x W by nearest sampling at feature-pixel centres (averaging would
     invent depths between a foreground edge and the background); done on the host, where it cuts
     the bytes to copy (a 640 x 480 image -> 16 x 44 values);
  2. invalid depth (0, negative, NaN, +-Inf: REP 118's "no return" codes, and depths outside the
     bins' range: more than half a step beyond the first/last bin centre) -> an all-zero column;
  3. ``one_hot``: weight 1 in the bin nearest the depth; ``gaussian``: exp(-(b_k - d)^2 / 2 sigma^2)
     normalised to sum 1 over the bins.
Step 3 multiplies the bytes by D, so it runs after the copy, on the pooling device:
``MetricDepth`` carries step 1's result to the backend, which expands it there
(plugin/bevpool_convert.cuh ``bevconv_expand_depth_*`` in the GPU frame; ``depth_distribution``
on the host for the cpu backend). ``depth_distribution`` is the expansion's reference twin, written
over an array module ``xp`` (numpy, or cupy) with the device kernel's float32 arithmetic.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

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
        return xp.float32(self.start) + xp.float32(self.step) * xp.arange(self.count, dtype=xp.float32)

    def valid_range(self) -> tuple[np.float32, np.float32]:
        """[lo, hi) in float32: the depths that fall in a bin (half a step beyond the end centres)."""
        return (np.float32(self.start - 0.5 * self.step), np.float32(self.start + (self.count - 0.5) * self.step))


@dataclass(frozen=True)
class DepthSpec:
    """How metric depth becomes a distribution: the bins, ``one_hot`` or ``gaussian`` with ``sigma`` m."""

    bins: DepthBins
    mode: str = "one_hot"
    sigma: float = 0.5

    def __post_init__(self):
        if self.mode not in DISTRIBUTIONS:
            raise ValueError(f"depth distribution {self.mode!r} not in {DISTRIBUTIONS}")
        if not self.sigma > 0:
            raise ValueError(f"gaussian sigma {self.sigma} m must be > 0")


@dataclass(frozen=True, eq=False)
class MetricDepth:
    """One camera's depth in metres, already at the feature grid ([H, W] float32): a [D, H, W]
    distribution the backend expands on its own device (``shape`` is that distribution's)."""

    metres: np.ndarray
    spec: DepthSpec

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.spec.bins.count, *self.metres.shape)

    def distribution(self, xp=np):
        return depth_distribution(self.metres, self.spec.bins, self.spec.mode, self.spec.sigma, xp)


@lru_cache(maxsize=64)
def _centres(size_in: int, size_out: int) -> np.ndarray:
    """Input index under each output pixel's centre (cached: a camera's sizes rarely change)."""
    index = np.minimum(((np.arange(size_out) + 0.5) * (size_in / size_out)).astype(np.int64), size_in - 1)
    index.flags.writeable = False
    return index


def most_likely_depth(distribution: np.ndarray, bins: DepthBins) -> np.ndarray:
    """[..., D, H, W] weights -> [..., H, W] float32 metres of the heaviest bin, 0 (REP 118's "no
    return") where every weight is 0: what a depth camera would report for a synthetic scene."""
    heaviest = bins.start + bins.step * distribution.argmax(axis=-3)
    return (heaviest * (distribution.max(axis=-3) > 0)).astype(np.float32)


def millimetre_image(metres: np.ndarray, height: int, width: int) -> np.ndarray:
    """[h, w] metres -> a [height, width] 16UC1 depth image (millimetres), nearest sampled."""
    return np.rint(resize_nearest(metres, height, width) * 1000).astype(np.uint16)


def resize_nearest(depth, height: int, width: int, xp=np):
    """[h, w] -> [height, width], each output pixel the input pixel under its centre."""
    h, w = depth.shape
    rows, cols = xp.asarray(_centres(h, height)), xp.asarray(_centres(w, width))
    return depth[rows][:, cols]  # the rows first: a gather of whole rows, then of columns


def depth_distribution(depth, bins: DepthBins, mode: str = "one_hot", sigma: float = 0.5, xp=np):
    """depth [H, W] metres -> float32 [D, H, W] weights (see the module doc); float32 throughout,
    in the device kernel's order of operations."""
    DepthSpec(bins, mode, sigma)  # validates mode and sigma
    f32 = xp.float32
    depth = xp.asarray(depth, dtype=f32)
    lo, hi = bins.valid_range()
    valid = xp.isfinite(depth) & (depth > 0) & (depth >= f32(lo)) & (depth < f32(hi))
    d = xp.where(valid, depth, f32(bins.start))  # placeholder where invalid; zeroed below
    if mode == "one_hot":
        index = xp.clip(xp.rint((d - f32(bins.start)) / f32(bins.step)), 0, bins.count - 1).astype(xp.int64)
        out = (xp.arange(bins.count)[:, None, None] == index[None]).astype(f32)
    else:
        q = (bins.centres(xp)[:, None, None] - d[None]) / f32(sigma)
        out = xp.exp(f32(-0.5) * q * q).astype(f32)
        out /= xp.maximum(out.sum(axis=0, keepdims=True, dtype=f32), f32(1e-30))
    return out * valid[None].astype(f32)
