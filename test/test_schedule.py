"""V3 schedule and launch geometry (CPU): teams, owners, empty cells, depth-pair entries, the kernel's reduction rule
(its float64 twin) against the FP64 reference,
kernel choice and grids, the generated kernel table, FP8 helpers."""
from __future__ import annotations

import numpy as np
import pytest

from bevpool_ros.device.timing import rotation_sets
from bevpool_ros.kernels import fp8
from bevpool_ros.kernels import table as L
from bevpool_ros.kernels.precision import decide, fp8_within_tolerance
from bevpool_ros.kernels.schedule import (
    build_v3_schedule,
    check_schedule,
    points_per_slot,
    split_evenly,
    team_end_of,
    v2do_intervals,
)
from bevpool_ros.kernels.twin import v3_kernel_twin
from bevpool_ros.reference import pool_reference
from bevpool_ros.scatter_map import scatter_map_from_ranks


def skewed_map(rng, cells=(1, 12, 20), points=3000, channels=16, hot=900):
    """Random map with one very long interval (hot cell) and many short ones."""
    n_cells = int(np.prod(cells))
    bev = np.concatenate([rng.integers(0, n_cells, points - hot), np.full(hot, 7)])
    order = np.argsort(bev, kind="stable")
    depth_n = points * 2
    rd = rng.integers(0, depth_n, points)[order]
    rf = rng.integers(0, 50, points)[order]
    return scatter_map_from_ranks(rd, rf, bev[order], depth_shape=(1, 1, 1, depth_n), grid_shape=cells,
                                  channels=channels)


def inputs(smap, rng):
    return rng.random(smap.depth_shape), rng.uniform(-1, 1, smap.feat_shape)


@pytest.mark.parametrize("k_min,block,warp", [(8, 256, 32), (4, 128, 32), (16, 64, 32), (1, 32, 32),
                                              (8, 48, 3), (4, 96, 6), (2, 16, 2), (8, 8, 1)])
def test_schedule_invariants_and_emulation_skewed(k_min, block, warp):
    rng = np.random.default_rng(k_min * 1000 + block + warp)
    smap = skewed_map(rng)
    sched = build_v3_schedule(smap, k_min=k_min, block=block, warp=warp)
    check_schedule(smap, sched)
    assert sched.points_per_slot == points_per_slot(900 + 0, k_min, block) or sched.points_per_slot >= k_min
    assert sched.max_team * sched.points_per_slot >= int(smap.interval_lengths.max())
    assert sched.max_team <= block
    d, f = inputs(smap, rng)
    np.testing.assert_allclose(v3_kernel_twin(smap, sched, d, f), pool_reference(d, f, smap), atol=1e-9)


@pytest.mark.parametrize("block,warp", [(256, 32), (48, 3)])
def test_canonical_schedule(canonical_map, block, warp):
    sched = build_v3_schedule(canonical_map, block=block, warp=warp)
    check_schedule(canonical_map, sched)
    # the longest interval (464 points) no longer has one serial owner
    assert sched.points_per_slot <= 16
    assert int(sched.slots[:, 1].max()) <= sched.points_per_slot
    assert sched.num_teams > 0
    assert sched.empty_cells.size + canonical_map.num_intervals == canonical_map.num_cells
    rng = np.random.default_rng(3)
    d, f = inputs(canonical_map, rng)
    np.testing.assert_allclose(v3_kernel_twin(canonical_map, sched, d, f),
                               pool_reference(d, f, canonical_map), atol=1e-9)


def test_teams_never_cross_a_block():
    rng = np.random.default_rng(5)
    smap = skewed_map(rng, hot=2000, points=4000)
    sched = build_v3_schedule(smap, k_min=2, block=64)
    lane = np.arange(sched.num_slots) % 64
    te = team_end_of(sched.slots)
    assert np.all(te > lane) and np.all(te <= 64)
    assert sched.points_per_slot == -(-2000 // 64)  # K grows so the team fits one block
    # a short interval is still cut at k_min
    lengths = sched.slots[:, 1]
    assert np.median(lengths[lengths > 0]) <= 2


def test_points_per_slot_rule():
    assert points_per_slot(464, 8, 256) == 8
    assert points_per_slot(2937, 8, 256) == 12
    assert points_per_slot(5, 8, 256) == 8
    with pytest.raises(ValueError):
        build_v3_schedule(skewed_map(np.random.default_rng(0)), block=100, warp=32)


@pytest.mark.parametrize("length,parts", [(464, 58), (10, 3), (7, 7), (100, 1)])
def test_split_evenly(length, parts):
    s = split_evenly(length, parts)
    assert s.sum() == length and s.size == parts and s.max() - s.min() <= 1


@pytest.mark.parametrize("depth_pairs", [False, True])
def test_empty_map_schedule(depth_pairs):
    # depth pairs too: autotuning tries the _dp kernels on a rig that sees nothing (H200 run, round 3)
    smap = scatter_map_from_ranks([], [], [], depth_shape=(1, 1, 2, 2), grid_shape=(1, 2, 2), channels=8)
    sched = build_v3_schedule(smap, depth_pairs=depth_pairs)
    check_schedule(smap, sched)
    assert sched.empty_cells.size == 4 and sched.num_slots == sched.block and sched.pidx.shape == (0, 2)
    np.testing.assert_array_equal(v3_kernel_twin(smap, sched, np.zeros(4), np.zeros((4, 8))), np.zeros((1, 2, 2, 8)))


def test_v2do_intervals(canonical_map):
    iv = v2do_intervals(canonical_map)
    assert iv.shape == (canonical_map.num_intervals, 3)
    assert np.all(iv[:, 1] - iv[:, 0] == canonical_map.interval_lengths)


# ---- launch geometry ------------------------------------------------------------------------
@pytest.mark.parametrize("c,prec,regime,name", [
    (80, "fp16", "DRAM-bound", "bevpool_v3_fp16_dram"),
    (80, "fp16", "L2-resident", "bevpool_v3_fp16_l2"),
    (88, "fp16", "DRAM-bound", "bevpool_v3_fp16_l2"),      # 88 % 16 != 0: 8 channels per lane
    (36, "fp16", "L2-resident", "bevpool_v3_fp16_v4"),
    (80, "fp8", "L2-resident", "bevpool_v3_fp8_c80"),
    (128, "fp8", "L2-resident", "bevpool_v3_fp8_c128"),
    (256, "fp8", "DRAM-bound", "bevpool_v3_fp8_c256"),
    (96, "fp8", "L2-resident", "bevpool_v3_fp8_v8"),
    (12, "fp8", "L2-resident", "bevpool_v3_fp8_v4"),
    # channel counts no 4-wide tile fits: 2 channels (one 32-bit / 16-bit load) or 1 per lane
    (30, "fp16", "L2-resident", "bevpool_v3_fp16_v2"), (30, "fp8", "DRAM-bound", "bevpool_v3_fp8_v2"),
    (17, "fp16", "DRAM-bound", "bevpool_v3_fp16_v1"), (3, "fp8", "L2-resident", "bevpool_v3_fp8_v1"),
    (1, "fp16", "L2-resident", "bevpool_v3_fp16_v1"), (1, "fp8", "L2-resident", "bevpool_v3_fp8_v1"),
])
def test_kernel_choice(c, prec, regime, name):
    info = L.choose_v3_kernel(c, prec, regime)
    assert info.name == name and c % info.vec == 0


def test_kernel_choice_half2_acc_and_unsupported():
    assert L.choose_v3_kernel(80, "fp16", "DRAM-bound", acc="half2").name == "bevpool_v3_fp16_dram_h2acc"
    for c in range(1, 513):  # every channel count has a kernel in both precisions
        for prec in ("fp16", "fp8"):
            info = L.choose_v3_kernel(c, prec, "L2-resident")
            g = L.v3_geometry(c, info)
            assert g.G * info.vec * g.chunks == c, (c, prec, info.name)
    with pytest.raises(ValueError):
        L.choose_v3_kernel(80, "fp32", "L2-resident")


@pytest.mark.parametrize("c,name,G,chunks", [
    (80, "bevpool_v3_fp16_l2", 10, 1), (80, "bevpool_v3_fp16_dram", 5, 1), (128, "bevpool_v3_fp16_l2", 16, 1),
    (256, "bevpool_v3_fp16_l2", 32, 1), (512, "bevpool_v3_fp16_l2", 32, 2), (80, "bevpool_v3_fp8_c80", 5, 1),
    (256, "bevpool_v3_fp8_c256", 8, 1), (1024, "bevpool_v3_fp8_v8", 32, 4), (12, "bevpool_v3_fp16_v4", 3, 1),
    (30, "bevpool_v3_fp16_v2", 15, 1), (6, "bevpool_v3_fp8_v2", 3, 1), (3, "bevpool_v3_fp16_v1", 3, 1),
    (17, "bevpool_v3_fp8_v1", 1, 17), (1, "bevpool_v3_fp16_v1", 1, 1),
])
def test_v3_geometry(c, name, G, chunks):
    info = L.V3_KERNELS[name]
    g = L.v3_geometry(c, info, 512)
    assert (g.G, g.chunks) == (G, chunks)
    assert g.G * info.vec * g.chunks == c  # every channel covered exactly once
    assert g.groups_per_warp == 32 // G and g.groups_per_block == (g.threads // 32) * g.groups_per_warp
    assert g.shared_bytes == (g.threads // 32) * G * info.vec * 4 <= L.SMEM_LIMIT
    if info.vec > 1:  # a C the tile does not divide is refused (vec 1 divides every C)
        with pytest.raises(L.UnsupportedShape):
            L.v3_geometry(c + (2 if info.vec > 2 else 1), info)


def test_v3_plan_covers_slots_and_empty_cells(canonical_map):
    info = L.choose_v3_kernel(80, "fp16", "L2-resident")
    geom = L.v3_geometry(80, info, 512)
    sched = build_v3_schedule(canonical_map, block=geom.groups_per_block, warp=geom.groups_per_warp)
    check_schedule(canonical_map, sched)
    plan = L.plan_v3(canonical_map, sched, info, geom)
    gx, gy, _ = plan.grid
    assert plan.block == (512, 1, 1) and gy == 1 and plan.shared_bytes == geom.shared_bytes
    assert sched.compute_blocks * geom.groups_per_block == sched.num_slots
    assert (gx - sched.compute_blocks) * geom.groups_per_block >= sched.empty_cells.size
    assert not plan.zero_output_first and plan.out_dtype == "float32"
    assert ("i32", 10) in plan.args  # G passed to the generic kernel
    with pytest.raises(ValueError):
        L.plan_v3(canonical_map, build_v3_schedule(canonical_map), info, geom)


def paired_map(rng, channels=16, points=4000):
    """A rig-like map: depth index = bin * H*W + pixel, feature row = pixel, and the cell depends
    on the pixel and bin // 2, so neighbouring bins of one pixel often share a cell."""
    D, H, W = 8, 4, 5
    pix = rng.integers(0, H * W, points)
    b = rng.integers(0, D, points)
    cell = (pix * 7 + (b // 2) * 3) % 90
    key = np.unique(np.stack([cell, b * H * W + pix]), axis=1)  # one point per (cell, depth)
    cell, rd = key
    order = np.argsort(cell, kind="stable")
    return scatter_map_from_ranks(rd[order], (rd % (H * W))[order], cell[order], depth_shape=(1, D, H, W),
                                  grid_shape=(1, 9, 10), channels=channels)


@pytest.mark.parametrize("k_min,block,warp", [(2, 48, 3), (4, 256, 32), (1, 16, 2), (64, 24, 3)])
def test_depth_pairs_match_the_reference(k_min, block, warp):
    rng = np.random.default_rng(k_min + block)
    smap = paired_map(rng)
    d, f = inputs(smap, rng)
    ref = pool_reference(d, f, smap)
    plain = build_v3_schedule(smap, k_min=k_min, block=block, warp=warp)
    paired = build_v3_schedule(smap, k_min=k_min, block=block, warp=warp, depth_pairs=True)
    for sched in (plain, paired):
        check_schedule(smap, sched)
        np.testing.assert_allclose(v3_kernel_twin(smap, sched, d, f), ref, atol=1e-9)
    n_pairs = int((paired.pidx[:, 1] < 0).sum())
    assert n_pairs > 0 and paired.pidx.shape[0] == smap.num_points - n_pairs
    assert plain.pidx.shape[0] == smap.num_points and paired.pair_stride == 20
    # a pair entry stands for two bins of one pixel: its row offset is the pixel's
    first = paired.pidx[paired.pidx[:, 1] < 0]
    assert np.array_equal((first[:, 1] & 0x7FFFFFFF) // 16, first[:, 0] % 20)


def test_pair_schedule_needs_a_pair_kernel():
    smap = paired_map(np.random.default_rng(2))
    info = L.V3_KERNELS["bevpool_v3_fp16_l2_pf"]
    geom = L.v3_geometry(16, info)
    sched = build_v3_schedule(smap, block=geom.groups_per_block, warp=geom.groups_per_warp, depth_pairs=True)
    with pytest.raises(ValueError, match="depth pairs"):
        L.plan_v3(smap, sched, info, geom)
    pair_kernel = L.V3_KERNELS["bevpool_v3_fp16_l2_pf_dp"]
    plan = L.plan_v3(smap, sched, pair_kernel, L.v3_geometry(16, pair_kernel))
    assert ("i32", 20) in plan.args  # the pair stride


def test_entry_points_are_generated_from_the_table():
    src = L.entry_points_source()
    lines = [ln for ln in src.splitlines() if ln.startswith("BEVPOOL_V3_ENTRY(")]
    assert len(lines) == len(L.V3_KERNELS)
    for info in L.V3_KERNELS.values():
        assert f"BEVPOOL_V3_ENTRY({info.name}, " in src
        assert info.name.startswith(f"bevpool_v3_{info.precision}_")
        assert ("_pf" in info.name) == info.prefetch and ("_dp" in info.name) == info.depth_pairs
    assert L.compile_defines() == ("-DBEVPOOL_TEAM_FLAG_SHIFT=16",)


def test_v2_and_v2do_launches(canonical_map):
    p2 = L.plan_v2(canonical_map)
    assert p2.grid[0] * 256 >= canonical_map.num_intervals * 80 and p2.zero_output_first
    pdo = L.plan_v2do(canonical_map)
    assert pdo.kernel == "bevpool_v2do_pack10_fp16" and pdo.block == (8, 128, 1)
    assert pdo.grid[1] * 128 >= canonical_map.num_intervals
    assert L.v2do_pack(128) == 8
    with pytest.raises(L.UnsupportedShape):
        L.v2do_pack(36)
    assert L.v2do_decodes(canonical_map)
    with pytest.raises(L.UnsupportedShape):  # random ranks_feat: upstream's decode does not hold
        L.plan_v2do(skewed_map(np.random.default_rng(1), channels=80))


def test_rotation_sets():
    assert rotation_sets(200 << 20, 60 << 20) == 1
    r = rotation_sets(6 << 20, 60 << 20)
    assert r * (6 << 20) >= 2 * (60 << 20)


# ---- FP8 helpers -----------------------------------------------------------------------------
def test_fp8_roundtrip_and_rounding():
    codes = np.arange(256, dtype=np.uint8)
    finite = (codes & 0x7F) != 0x7F
    vals = fp8.decode(codes[finite])
    back = fp8.encode(vals)
    # +0 and -0 both encode to +0
    assert np.array_equal(fp8.decode(back), vals)
    assert fp8.DECODE[0x7E] == 448.0 and fp8.encode(np.array([1e6]))[0] == 0x7E
    x = np.random.default_rng(0).uniform(-400, 400, 10000)
    rel = np.abs(fp8.decode(fp8.encode(x)) - x) / np.maximum(np.abs(x), 2.0 ** -6)
    assert rel.max() <= 2.0 ** -4 + 1e-12
    with pytest.raises(ValueError):
        fp8.encode(np.array([np.nan]))
    assert fp8.has_nan_codes(np.array([0x7F], np.uint8)) and not fp8.has_nan_codes(codes[finite])


def test_fp8_scaling_rule():
    x = np.array([0.3, -0.01])
    s = fp8.pow2_scale(x)
    assert 8.0 < 0.3 * s <= 16.0 and np.log2(s).is_integer()
    assert fp8.pow2_scale(np.zeros(3)) == 1.0


def test_auto_decision_and_tolerance():
    assert decide(10.0, 8.0, True) == "fp8"
    assert decide(10.0, 8.0, False) == "fp16"
    assert decide(10.0, 12.0, True) == "fp16"
    ref = np.ones(4)
    ok, err = fp8_within_tolerance(np.full(4, 1.1, np.float16), ref, ref)
    assert ok and abs(err - 0.1) < 1e-3
    assert not fp8_within_tolerance(np.full(4, 2.0), ref, ref)[0]
