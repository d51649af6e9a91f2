"""The operator's definition: FP64 reference and a brute-force ``np.add.at`` twin.

    bev[ranks_bev[t], c] += depth[ranks_depth[t]] * feat[ranks_feat[t], c]

Both return the dense BEV tensor ``[Z, Y, X, C]`` (docs/contracts.md) with zeros in empty cells.
"""
from __future__ import annotations

import numpy as np

from .scatter_map import ScatterMap


def pool_reference(depth: np.ndarray, feat: np.ndarray, smap: ScatterMap) -> np.ndarray:
    """Float64, interval by interval: obviously right, not fast."""
    d = np.asarray(depth, dtype=np.float64).reshape(-1)
    f = np.asarray(feat, dtype=np.float64).reshape(-1, smap.channels)
    out = np.zeros((smap.num_cells, smap.channels), dtype=np.float64)
    for start, length in zip(smap.interval_starts.tolist(), smap.interval_lengths.tolist()):
        t = slice(start, start + length)
        w = d[smap.ranks_depth[t]]
        out[smap.ranks_bev[start]] = w @ f[smap.ranks_feat[t]]
    return out.reshape(smap.bev_shape)


def pool_bruteforce(depth: np.ndarray, feat: np.ndarray, smap: ScatterMap) -> np.ndarray:
    """Float64 scatter-add over points, ignoring intervals entirely (tests the intervals too)."""
    d = np.asarray(depth, dtype=np.float64).reshape(-1)
    f = np.asarray(feat, dtype=np.float64).reshape(-1, smap.channels)
    out = np.zeros((smap.num_cells, smap.channels), dtype=np.float64)
    np.add.at(out, smap.ranks_bev, d[smap.ranks_depth, None] * f[smap.ranks_feat])
    return out.reshape(smap.bev_shape)
