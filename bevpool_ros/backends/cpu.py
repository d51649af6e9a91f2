"""CPU backend: float32 sorted-segment reduction as one sparse x dense product (scipy).

The intervals are the rows of a CSR matrix whose structure (row pointers = interval starts,
column indices = ranks_feat) is fixed per calibration; only its values, the depth weights
``depth[ranks_depth]``, change per frame. ``A @ feat`` then sums each interval in one pass
without materialising the [P, C] product array (15x faster than a reduceat on canonical).
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sparse

from ..scatter_map import ScatterMap
from .base import Backend, check_inputs


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, precision: str = "fp32"):
        # The CPU computes in float32 whatever was asked; float16 inputs are widened on entry.
        super().__init__(precision)
        self.precision = "fp32"

    def prepare(self, smap: ScatterMap) -> None:
        super().prepare(smap)
        self._indptr = np.append(smap.interval_starts, np.int32(smap.num_points)).astype(np.int32)
        self._cells = smap.ranks_bev[smap.interval_starts]

    def pool(self, depth: np.ndarray, feat: np.ndarray) -> np.ndarray:
        smap = self._require_map()
        check_inputs(smap, depth, feat)
        out = np.zeros((smap.num_cells, smap.channels), dtype=np.float32)
        if smap.num_points:
            weights = depth.reshape(-1)[smap.ranks_depth].astype(np.float32)
            A = sparse.csr_matrix((weights, smap.ranks_feat, self._indptr),
                                  shape=(smap.num_intervals, smap.num_feat_rows))
            out[self._cells] = A @ feat.reshape(-1, smap.channels).astype(np.float32, copy=False)
        return out.reshape(smap.bev_shape)
