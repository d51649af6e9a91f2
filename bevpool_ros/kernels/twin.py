"""The V3 kernel's float64 twin: plugin/bevpool_v3.cuh's algorithm replayed in numpy.

Entry weights (depth pairs summed first), per-slot partial sums, the segmented shuffle tree
within a warp, the cross-warp shared-memory step, the owners' single writes and the empty-cell
zeros, over the schedule the launch uses. The CPU tests compare it with the FP64 reference, so
the schedule AND the reduction rule the kernel implements are checked without a GPU.
Cells nobody writes stay NaN (as a poisoned output would).
"""
from __future__ import annotations

import numpy as np

from ..scatter_map import ScatterMap
from .schedule import V3Schedule, entry_points, team_end_of


def v3_kernel_twin(smap: ScatterMap, sched: V3Schedule, depth: np.ndarray, feat: np.ndarray) -> np.ndarray:
    C, B, WARP = smap.channels, sched.block, sched.warp  # noqa: N806
    d = np.asarray(depth, np.float64).reshape(-1)
    f = np.asarray(feat, np.float64).reshape(-1)
    s = sched.slots.astype(np.int64)
    begin, count, cell, _ = s.T
    team_end = team_end_of(s)
    # entry weight = the sum of its points' depth values; one feature row per entry
    e, di, off = entry_points(sched)
    n_entries = sched.pidx.shape[0]
    weight = np.bincount(e, weights=d[di], minlength=n_entries)
    row_off = off[:n_entries]  # entry_points lists every entry once first, in order
    prod = weight[:, None] * f[row_off[:, None] + np.arange(C)]
    csum = np.vstack([np.zeros((1, C)), np.cumsum(prod, axis=0)])
    r = (csum[begin + count] - csum[begin]).reshape(-1, B, C)  # what each slot's lanes accumulate
    tid = np.arange(B)
    lane, wbase = tid % WARP, tid - tid % WARP
    te = team_end.reshape(-1, B)
    seg_end = np.minimum(te, wbase + WARP) - wbase
    off_ = 1
    while off_ < WARP:  # shuffle-down tree: a group reads group+off of its warp (before this step)
        src = np.where(lane + off_ < WARP, tid + off_, tid)
        take = (lane + off_ < seg_end)[..., None]
        r = r + np.where(take, r[:, src, :], 0.0)
        off_ *= 2
    part = r[:, tid[::WARP], :]  # first group of every warp: [blocks, warps, C]
    out = np.full((smap.num_cells, C), np.nan)
    for i in np.flatnonzero(cell >= 0).tolist():
        b, t = divmod(i, B)
        acc = r[b, t].copy()
        w = t // WARP + 1
        while w * WARP < te[b, t]:
            acc += part[b, w]
            w += 1
        out[cell[i]] = acc
    out[sched.empty_cells] = 0.0
    return out.reshape(smap.bev_shape)
