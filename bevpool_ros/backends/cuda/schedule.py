"""Per-calibration work schedule for V3: long intervals split over teams of lanes.

Built once per scatter map (alongside it), never per frame. The five-array map stays the
interface; these are extra precomputed arrays:

* ``slots`` int32 [S, 4]: {first point, point count, output cell or -1, team end | flag << 16}.
  A slot is a run of consecutive points of one interval. An interval of L points becomes a team
  of t = min(block, ceil(L / k_min)) consecutive slots of one block (never crossing a block),
  split as evenly as possible (at most K = max ceil(L / t) points per slot); the team's first
  slot owns the cell (cell >= 0), the others carry -1. "team end" is the slot index in the block
  one past the team's last slot (index + 1 for a lone slot). ``flag`` (bit 16) is set on every
  slot of a block that holds a team crossing a warp: only those blocks take the shared-memory
  step and its barrier.
* ``pidx`` int32 [P, 2]: {ranks_depth, ranks_feat * C} (one LDG.64 per point, no multiply).
* ``empty_cells`` int32 [E]: cells without points; the launch's trailing blocks zero them.

K = max(k_min, ceil(max interval / block)) at most. Teams are placed
first (longest first), gaps at a block's end are filled with the longest lone intervals, then
lone intervals follow longest first: lanes of one warp get similar work, so a warp does not
idle behind one lane.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ...scatter_map import ScatterMap

WARP = 32
MAX_BLOCK = 256  # BEVPOOL_MAX_BLOCK in plugin/bevpool_v3.cuh
DEFAULT_K_MIN = 16
DEFAULT_BLOCK = 256


@dataclass(frozen=True)
class V3Schedule:
    slots: np.ndarray        # int32 [S, 4], S a multiple of the block size
    pidx: np.ndarray         # int32 [P, 2]
    empty_cells: np.ndarray  # int32 [E]
    points_per_slot: int     # K
    block: int               # slots per block
    warp: int                # slots per warp
    num_teams: int
    max_team: int

    @property
    def num_slots(self) -> int:
        return int(self.slots.shape[0])

    @property
    def compute_blocks(self) -> int:
        return self.num_slots // self.block

    @property
    def zero_blocks(self) -> int:
        return -(-int(self.empty_cells.size) // self.block)

    def digest(self) -> str:
        h = hashlib.sha256()
        for a in (self.slots, self.pidx, self.empty_cells):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:16]


TEAM_FLAG_SHIFT = 16


def cross_warp_flags(team_end: np.ndarray, block: int, warp: int) -> np.ndarray:
    """1 on every slot of a block in which some team runs past the end of its warp."""
    idx = np.arange(team_end.size) % block
    crosses = team_end > (idx - idx % warp + warp)
    per_block = crosses.reshape(-1, block).any(axis=1)
    return np.repeat(per_block, block).astype(np.int32)


def team_end_of(slots: np.ndarray) -> np.ndarray:
    return slots[:, 3] & ((1 << TEAM_FLAG_SHIFT) - 1)


def points_per_slot(max_len: int, k_min: int = DEFAULT_K_MIN, block: int = DEFAULT_BLOCK) -> int:
    return max(int(k_min), -(-int(max_len) // int(block)), 1)


def split_evenly(length: int, parts: int) -> np.ndarray:
    """Chunk sizes of ``length`` points over ``parts`` lanes, differing by at most one."""
    base, extra = divmod(int(length), int(parts))
    return np.array([base + 1] * extra + [base] * (parts - extra), dtype=np.int64)


def build_v3_schedule(smap: ScatterMap, k_min: int = DEFAULT_K_MIN, block: int = DEFAULT_BLOCK,
                      warp: int = WARP) -> V3Schedule:
    """``block``/``warp``: slots (groups) per block and per warp of the kernel that will run it
    (grouped kernel: warp = 32 // G, block = warps * warp; per-thread kernel: 32 and threads)."""
    if warp < 1 or block % warp or block < warp:
        raise ValueError(f"block ({block}) must be a positive multiple of warp ({warp})")
    starts = smap.interval_starts.astype(np.int64)
    lengths = smap.interval_lengths.astype(np.int64)
    cells = smap.ranks_bev[smap.interval_starts].astype(np.int64) if starts.size else np.zeros(0, np.int64)
    # every interval is cut into pieces of about k_min points (more lanes, shorter serial chains);
    # only intervals longer than block * k_min get longer pieces, so a team never leaves its block
    team_sizes = np.minimum(-(-lengths // max(int(k_min), 1)), block)
    K = int((-(-lengths // team_sizes)).max()) if lengths.size else max(int(k_min), 1)

    lone = np.flatnonzero(team_sizes == 1)
    lone = lone[np.argsort(-lengths[lone], kind="stable")]  # longest first
    teams = np.flatnonzero(team_sizes > 1)
    teams = teams[np.argsort(-team_sizes[teams], kind="stable")]

    rows: list[tuple[int, int, int, int]] = []  # (begin, count, cell, team_end_lane)
    lone_pos = 0

    def add_lone(n: int) -> None:
        nonlocal lone_pos
        take = lone[lone_pos:lone_pos + n]
        lone_pos += take.size
        for iv in take.tolist():
            lane = len(rows) % block
            rows.append((int(starts[iv]), int(lengths[iv]), int(cells[iv]), lane + 1))
        for _ in range(n - take.size):  # no lone interval left: idle lanes
            lane = len(rows) % block
            rows.append((0, 0, -1, lane + 1))

    for iv in teams.tolist():
        t = int(team_sizes[iv])
        lane = len(rows) % block
        if lane + t > block:
            add_lone(block - lane)
            lane = 0
        end = lane + t
        begin = int(starts[iv])
        for j, n in enumerate(split_evenly(int(lengths[iv]), t).tolist()):
            rows.append((begin, n, int(cells[iv]) if j == 0 else -1, end))
            begin += n
    add_lone(lone.size - lone_pos)
    pad = (-len(rows)) % block
    if pad or not rows:
        add_lone(pad if rows else block)

    slots = np.asarray(rows, dtype=np.int32).reshape(-1, 4)
    slots[:, 3] |= cross_warp_flags(slots[:, 3], block, warp) << TEAM_FLAG_SHIFT
    pidx = np.stack([smap.ranks_depth, smap.ranks_feat.astype(np.int64) * smap.channels], axis=1).astype(np.int32)
    occupied = np.zeros(smap.num_cells, bool)
    occupied[cells] = True
    empty = np.flatnonzero(~occupied).astype(np.int32)
    return V3Schedule(slots=np.ascontiguousarray(slots), pidx=np.ascontiguousarray(pidx),
                      empty_cells=empty, points_per_slot=K, block=block, warp=warp,
                      num_teams=int(teams.size), max_team=int(team_sizes.max()) if team_sizes.size else 0)


def check_schedule(smap: ScatterMap, sched: V3Schedule) -> None:
    """Invariants the kernel relies on; raises AssertionError naming the first violation."""
    s = sched.slots.astype(np.int64)
    assert s.shape[0] % sched.block == 0, "slot count not a multiple of the block"
    lane = np.arange(s.shape[0]) % sched.block
    begin, count, cell, _ = s.T
    team_end = team_end_of(s)
    assert np.array_equal(s[:, 3] >> TEAM_FLAG_SHIFT, cross_warp_flags(team_end, sched.block, sched.warp)), \
        "cross-warp flags wrong"
    assert np.all(count >= 0) and np.all(count <= sched.points_per_slot), "slot longer than K"
    assert np.all(team_end > lane) and np.all(team_end <= sched.block), "team end outside the block"
    # every point covered exactly once
    cover = np.zeros(smap.num_points + 1, np.int64)
    np.add.at(cover, begin[count > 0], 1)
    np.add.at(cover, (begin + count)[count > 0], -1)
    assert np.all(np.cumsum(cover)[:-1] == 1), "points not covered exactly once"
    # every cell written exactly once: owners + empty cells partition the grid
    owners = cell[cell >= 0]
    all_cells = np.concatenate([owners, sched.empty_cells.astype(np.int64)])
    assert all_cells.size == smap.num_cells and np.unique(all_cells).size == smap.num_cells, \
        "cells not partitioned into owners and empty cells"
    # a team = owner lane followed by member lanes up to team_end, all in one interval
    for i in np.flatnonzero(cell >= 0):
        end_row = i - lane[i] + team_end[i]
        members = slice(i + 1, end_row)
        assert np.all(cell[members] == -1), f"team of slot {i} overlaps another owner"
        total = count[i:end_row].sum()
        iv = np.searchsorted(smap.interval_starts, begin[i])
        assert smap.interval_starts[iv] == begin[i] and smap.interval_lengths[iv] == total, \
            f"team of slot {i} does not cover exactly interval {iv}"
        assert smap.ranks_bev[begin[i]] == cell[i], f"slot {i} writes the wrong cell"


def v2do_intervals(smap: ScatterMap) -> np.ndarray:
    """CUDA-BEVFusion's int3 interval records {start, end, bev cell} (V2+DO baseline)."""
    starts = smap.interval_starts
    return np.ascontiguousarray(np.stack([starts, starts + smap.interval_lengths,
                                          smap.ranks_bev[starts]], axis=1).astype(np.int32))


def emulate_v3(smap: ScatterMap, sched: V3Schedule, depth: np.ndarray, feat: np.ndarray) -> np.ndarray:
    """Float64 numpy mirror of the V3 kernel's algorithm (slot sums, segmented shuffle tree,
    cross-warp shared-memory step, owner writes, empty-cell zeros). Lets the CPU tests check the
    schedule AND the reduction rule the kernel implements, without a GPU. Unwritten cells are NaN."""
    C, B, WARP = smap.channels, sched.block, sched.warp  # noqa: N806
    d = np.asarray(depth, np.float64).reshape(-1)
    f = np.asarray(feat, np.float64).reshape(-1)
    s = sched.slots.astype(np.int64)
    begin, count, cell, _ = s.T
    team_end = team_end_of(s)
    # per-slot partial sums (what one lane accumulates)
    prod = d[sched.pidx[:, 0], None] * f[sched.pidx[:, 1].astype(np.int64)[:, None] + np.arange(C)]
    csum = np.vstack([np.zeros((1, C)), np.cumsum(prod, axis=0)])
    r = csum[begin + count] - csum[begin]
    r = r.reshape(-1, B, C)
    tid = np.arange(B)
    lane, wbase = tid % WARP, tid - tid % WARP
    te = team_end.reshape(-1, B)
    seg_end = np.minimum(te, wbase + WARP) - wbase
    off = 1
    while off < WARP:  # shuffle-down tree: lane reads lane+off of the same warp (value before this step)
        src = np.where(lane + off < WARP, tid + off, tid)
        take = (lane + off < seg_end)[..., None]
        r = r + np.where(take, r[:, src, :], 0.0)
        off *= 2
    part = r[:, tid[::WARP], :]  # first slot of every warp: [blocks, warps, C]
    out = np.full((smap.num_cells, C), np.nan)
    owners = np.flatnonzero(cell >= 0)
    for i in owners.tolist():
        b, t = divmod(i, B)
        acc = r[b, t].copy()
        w = t // WARP + 1
        while w * WARP < te[b, t]:
            acc += part[b, w]
            w += 1
        out[cell[i]] = acc
    out[sched.empty_cells] = 0.0
    return out.reshape(smap.bev_shape)
