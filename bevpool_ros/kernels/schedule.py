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
* ``pidx`` int32 [E, 2]: one *entry* per point {ranks_depth, ranks_feat * C} (one LDG.64, no
  multiply); with ``depth_pairs`` two points of one interval that share a feature row and whose
  depth indices differ by ``pair_stride`` (two depth bins of one pixel) become one entry with bit
  31 of .y set: the kernel adds the two depth values and loads the row once. Slots count entries.
* ``empty_cells`` int32 [E]: cells without points; the launch's trailing blocks zero them.

K = max(k_min, ceil(max interval / block)) at most. Placement: teams first (largest first), then
lone intervals longest first, so lanes of one warp get similar work and a warp does not idle
behind one lane; a gap at a block's end that a team does not fit is filled with the longest lone
intervals left. (A spatial order, Morton tiles of cells, was measured 3-15 % slower on the H200:
docs/kernels.md.)
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from ..scatter_map import ScatterMap

WARP = 32
DEFAULT_K_MIN = 16
DEFAULT_BLOCK = 256


PAIR_FLAG = 1 << 31


class BlockGrid:
    """The V3 grid rule, in one place: compute blocks over the slots, then zero blocks over the
    empty cells. A schedule and a schedule's sizes alone (the TensorRT plugin's) share it."""

    num_slots: int
    num_empty: int
    block: int

    @property
    def compute_blocks(self) -> int:
        return self.num_slots // self.block

    @property
    def zero_blocks(self) -> int:
        return -(-self.num_empty // self.block)


@dataclass(frozen=True)
class V3Schedule(BlockGrid):
    slots: np.ndarray        # int32 [S, 4], S a multiple of the block size
    pidx: np.ndarray         # int32 [E, 2] entries
    empty_cells: np.ndarray  # int32 [E]
    points_per_slot: int     # K (entries)
    block: int               # slots per block
    warp: int                # slots per warp
    num_teams: int
    max_team: int
    entry_starts: np.ndarray   # int64 [I]: each interval's first entry
    entry_lengths: np.ndarray  # int64 [I]: each interval's entry count
    depth_pairs: bool = False
    pair_stride: int = 0

    @property
    def num_slots(self) -> int:
        return int(self.slots.shape[0])

    @property
    def num_empty(self) -> int:
        return int(self.empty_cells.size)

    def digest(self) -> str:
        h = hashlib.sha256()
        for a in (self.slots, self.pidx, self.empty_cells):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:16]


TEAM_FLAG_SHIFT = 16  # -D BEVPOOL_TEAM_FLAG_SHIFT (launch.compile_defines)


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


def depth_pair_stride(smap: ScatterMap) -> int:
    """Depth-index distance of two depth bins of one pixel (H * W of the depth tensor)."""
    return int(smap.depth_shape[-2] * smap.depth_shape[-1])


def build_entries(smap: ScatterMap, depth_pairs: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(pidx int32 [E, 2], entry_starts, entry_lengths, pair_stride) for the map's intervals."""
    C = smap.channels
    if smap.num_feat_rows * C >= PAIR_FLAG:
        raise ValueError(f"feature offsets reach 2^31 ({smap.num_feat_rows} rows x {C} channels)")
    rd = smap.ranks_depth.astype(np.int64)
    rf = smap.ranks_feat.astype(np.int64)
    stride = depth_pair_stride(smap) if depth_pairs else 0
    if not depth_pairs or not rd.size:  # no points (a rig that sees none of its grid): nothing to pair
        pidx = np.stack([rd, rf * C], axis=1).astype(np.int32)
        return (np.ascontiguousarray(pidx), smap.interval_starts.astype(np.int64),
                smap.interval_lengths.astype(np.int64), stride)
    iv = np.repeat(np.arange(smap.num_intervals), smap.interval_lengths)
    order = np.lexsort((rd, rf, iv))  # inside each interval: by feature row, then depth index
    rd, rf, iv = rd[order], rf[order], iv[order]
    can = (iv[1:] == iv[:-1]) & (rf[1:] == rf[:-1]) & (rd[1:] - rd[:-1] == stride)
    # greedy pairing along runs of pairable neighbours: positions 0, 2, 4, ... of a run pair up
    idx = np.arange(can.size)
    run_start = np.maximum.accumulate(np.where(can & ~np.concatenate([[False], can[:-1]]), idx, 0))
    take = can & ((idx - run_start) % 2 == 0)
    second = np.concatenate([[False], take])
    first = np.concatenate([take, [False]])[~second]
    keep = ~second
    off = rf[keep] * C | np.where(first, PAIR_FLAG, 0)
    pidx = np.stack([rd[keep], off.astype(np.uint32).view(np.int32).astype(np.int64)], axis=1).astype(np.int32)
    lengths = np.bincount(iv[keep], minlength=smap.num_intervals).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    return np.ascontiguousarray(pidx), starts, lengths, stride


def placement_sequence(lengths: np.ndarray, team_sizes: np.ndarray) -> np.ndarray:
    """Intervals in the order the schedule places them: teams (largest first), then lone ones
    (longest first)."""
    teams = np.flatnonzero(team_sizes > 1)
    lone = np.flatnonzero(team_sizes == 1)
    return np.concatenate([teams[np.argsort(-team_sizes[teams], kind="stable")],
                           lone[np.argsort(-lengths[lone], kind="stable")]])


def build_v3_schedule(smap: ScatterMap, k_min: int = DEFAULT_K_MIN, block: int = DEFAULT_BLOCK,
                      warp: int = WARP, *, depth_pairs: bool = False) -> V3Schedule:
    """``block``/``warp``: slots (groups) per block and per warp of the kernel that will run it
    (warp = 32 // G, block = warps * warp)."""
    if warp < 1 or block % warp or block < warp:
        raise ValueError(f"block ({block}) must be a positive multiple of warp ({warp})")
    pidx, starts, lengths, stride = build_entries(smap, depth_pairs)
    cells = smap.ranks_bev[smap.interval_starts].astype(np.int64) if starts.size else np.zeros(0, np.int64)
    # every interval is cut into pieces of about k_min entries (more lanes, shorter serial chains);
    # only intervals longer than block * k_min get longer pieces, so a team never leaves its block
    team_sizes = np.minimum(-(-lengths // max(int(k_min), 1)), block)
    K = int((-(-lengths // team_sizes)).max()) if lengths.size else max(int(k_min), 1)
    sequence = placement_sequence(lengths, team_sizes)
    lone_queue = sequence[team_sizes[sequence] == 1]

    rows: list[tuple[int, int, int, int]] = []  # (begin, count, cell, team_end_lane)
    placed = np.zeros(lengths.size, bool)
    queue_pos = 0

    def add_lone(iv: int) -> None:
        placed[iv] = True
        rows.append((int(starts[iv]), int(lengths[iv]), int(cells[iv]), len(rows) % block + 1))

    def fill(n: int) -> None:  # the longest unplaced lone intervals, else idle lanes
        nonlocal queue_pos
        while n > 0 and queue_pos < lone_queue.size:
            iv = int(lone_queue[queue_pos])
            queue_pos += 1
            if not placed[iv]:
                add_lone(iv)
                n -= 1
        for _ in range(n):
            rows.append((0, 0, -1, len(rows) % block + 1))

    for iv in sequence.tolist():
        if placed[iv]:
            continue
        t = int(team_sizes[iv])
        if t == 1:
            add_lone(iv)
            continue
        lane = len(rows) % block
        if lane + t > block:
            fill(block - lane)
            lane = 0
        placed[iv] = True
        end = lane + t
        begin = int(starts[iv])
        for j, n in enumerate(split_evenly(int(lengths[iv]), t).tolist()):
            rows.append((begin, n, int(cells[iv]) if j == 0 else -1, end))
            begin += n
    pad = (-len(rows)) % block
    if pad or not rows:
        fill(pad if rows else block)

    slots = np.asarray(rows, dtype=np.int32).reshape(-1, 4)
    slots[:, 3] |= cross_warp_flags(slots[:, 3], block, warp) << TEAM_FLAG_SHIFT
    occupied = np.zeros(smap.num_cells, bool)
    occupied[cells] = True
    empty = np.flatnonzero(~occupied).astype(np.int32)
    return V3Schedule(slots=np.ascontiguousarray(slots), pidx=pidx, empty_cells=empty, points_per_slot=K,
                      block=block, warp=warp, num_teams=int((team_sizes > 1).sum()),
                      max_team=int(team_sizes.max()) if team_sizes.size else 0,
                      entry_starts=starts, entry_lengths=lengths, depth_pairs=depth_pairs,
                      pair_stride=stride)


def entry_points(sched: V3Schedule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every point an entry stands for: (entry index, depth index, feature offset) per point."""
    d0 = sched.pidx[:, 0].astype(np.int64)
    y = sched.pidx[:, 1].astype(np.int64)
    pair = y < 0
    off = y & (PAIR_FLAG - 1)
    e = np.arange(d0.size)
    return (np.concatenate([e, e[pair]]), np.concatenate([d0, d0[pair] + sched.pair_stride]),
            np.concatenate([off, off[pair]]))


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
    # every entry covered exactly once, and the entries stand for exactly the map's points
    cover = np.zeros(sched.pidx.shape[0] + 1, np.int64)
    np.add.at(cover, begin[count > 0], 1)
    np.add.at(cover, (begin + count)[count > 0], -1)
    assert np.all(np.cumsum(cover)[:-1] == 1), "entries not covered exactly once"
    iv_of_entry = np.repeat(np.arange(smap.num_intervals), sched.entry_lengths)
    e, d, off = entry_points(sched)
    cell_of_interval = smap.ranks_bev[smap.interval_starts].astype(np.int64)
    got = np.stack([cell_of_interval[iv_of_entry[e]], d, off // smap.channels])
    want = np.stack([smap.ranks_bev, smap.ranks_depth, smap.ranks_feat]).astype(np.int64)
    assert np.array_equal(got[:, np.lexsort(got[::-1])], want[:, np.lexsort(want[::-1])]), \
        "entries do not stand for the map's points"
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
        iv = np.searchsorted(sched.entry_starts, begin[i])
        assert sched.entry_starts[iv] == begin[i] and sched.entry_lengths[iv] == total, \
            f"team of slot {i} does not cover exactly interval {iv}"
        assert cell_of_interval[iv] == cell[i], f"slot {i} writes the wrong cell"


def v2do_intervals(smap: ScatterMap) -> np.ndarray:
    """CUDA-BEVFusion's int3 interval records {start, end, bev cell} (V2+DO baseline)."""
    starts = smap.interval_starts
    return np.ascontiguousarray(np.stack([starts, starts + smap.interval_lengths,
                                          smap.ranks_bev[starts]], axis=1).astype(np.int32))
