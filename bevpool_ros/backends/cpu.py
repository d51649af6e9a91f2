"""CPU backend: vectorised float32 sorted-segment reduction (numpy, always available)."""
from __future__ import annotations

import numpy as np

from .base import Backend, check_inputs


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, precision: str = "fp32"):
        # The CPU computes in float32 whatever was asked; fp16/fp8 inputs are widened on entry.
        super().__init__(precision)
        self.precision = "fp32"

    def pool(self, depth: np.ndarray, feat: np.ndarray) -> np.ndarray:
        smap = self._require_map()
        check_inputs(smap, depth, feat)
        d = depth.reshape(-1).astype(np.float32, copy=False)
        f = feat.reshape(-1, smap.channels).astype(np.float32, copy=False)
        out = np.zeros((smap.num_cells, smap.channels), dtype=np.float32)
        if smap.num_points:
            # products in point order, then one reduceat per interval (intervals are sorted runs)
            prod = f[smap.ranks_feat] * d[smap.ranks_depth, None]
            out[smap.ranks_bev[smap.interval_starts]] = np.add.reduceat(prod, smap.interval_starts, axis=0)
        return out.reshape(smap.bev_shape)
