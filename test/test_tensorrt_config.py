"""Plugin configuration (no TensorRT needed): it is the launch description, serialized."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tensorrt_helpers import tiny_map

from bevpool_ros.backends.tensorrt.builder import plugin_config_for
from bevpool_ros.backends.tensorrt.plugin_config import (
    FIELDS,
    PluginConfig,
    PluginConfigError,
    bind_plan,
    config_for_plan,
    config_for_v3,
    map_bounds,
    map_inputs,
)
from bevpool_ros.backends.tensorrt.targets import (
    Target,
    TargetError,
    arch_cc,
    check_buildable,
    check_runnable,
    fp8_supported,
    known_target,
)
from bevpool_ros.kernels import table as L
from bevpool_ros.kernels.schedule import build_v3_schedule
from bevpool_ros.regime import MiB


@pytest.mark.parametrize("precision,regime", [("fp16", "DRAM-bound"), ("fp16", "L2-resident"),
                                              ("fp8", "L2-resident")])
def test_plan_is_the_launch_description(precision, regime):
    smap = tiny_map(channels=80)
    cfg, sched = config_for_v3(smap, precision, regime)
    info = L.choose_v3_kernel(80, precision, regime)
    geom = L.v3_geometry(80, info)
    assert (sched.block, sched.warp) == (geom.groups_per_block, geom.groups_per_warp)
    arrays = map_inputs(cfg, smap, sched)
    shapes = [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in arrays.values())]
    # bound to this calibration, the template is the launch description's plan: no second copy
    assert bind_plan(cfg, shapes) == L.plan_v3(smap, sched, info, geom)
    assert cfg.plan.grid[0] == 0  # the engine's template holds no calibration
    assert cfg.inputs == ("depth", "feat", "slots", "pidx", "empty_cells")
    assert cfg.output_shape == (*smap.grid_shape, 80)
    assert cfg.output_dtype == ("float32" if precision == "fp16" else "float16")


@pytest.mark.parametrize("channels", [1, 3, 6, 17, 30, 100])
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_channel_counts_without_a_4_wide_tile(channels, precision):
    """The plugin shares the cuda backend's kernel choice: odd C gets the vec-1/vec-2 rows."""
    smap = tiny_map(channels=channels)
    cfg, sched = config_for_v3(smap, precision, "L2-resident")
    info = L.choose_v3_kernel(channels, precision, "L2-resident")
    assert cfg.plan.kernel == info.name and channels % info.vec == 0
    assert PluginConfig.from_fields(cfg.to_fields()) == cfg.validate()
    arrays = map_inputs(cfg, smap, sched)
    bound = bind_plan(cfg, [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in arrays.values())])
    assert bound == L.plan_v3(smap, sched, info, L.v3_geometry(channels, info))


def test_fields_round_trip_exactly():
    smap = tiny_map()
    cfg, _ = config_for_v3(smap, "fp8", "L2-resident", out_scale=0.25)
    fields = cfg.to_fields()
    assert set(fields) == set(FIELDS)
    assert PluginConfig.from_fields(fields) == cfg
    # TensorRT hands CHAR fields back NUL-terminated: still parses
    padded = {k: (np.concatenate([v, np.zeros(1, np.int8)]) if v.dtype == np.int8 else v) for k, v in fields.items()}
    assert PluginConfig.from_fields(padded) == cfg


def test_malformed_fields_are_rejected():
    cfg, _ = config_for_v3(tiny_map(), "fp16", "L2-resident")
    fields = cfg.to_fields()
    with pytest.raises(PluginConfigError, match="missing"):
        PluginConfig.from_fields({k: v for k, v in fields.items() if k != "plan"})
    bad = dict(fields, plan=np.frombuffer(b"{not json", np.int8))
    with pytest.raises(PluginConfigError, match="malformed"):
        PluginConfig.from_fields(bad)
    bad = dict(fields, precision=np.frombuffer(b"fp4", np.int8))
    with pytest.raises(PluginConfigError, match="precision"):
        PluginConfig.from_fields(bad)
    bad = dict(fields, depth_shape=np.asarray([9, 9, 9, 9], np.int32))
    with pytest.raises(PluginConfigError, match="shapes"):
        PluginConfig.from_fields(bad)
    plan = json.loads(fields["plan"].tobytes())
    plan["from_the_future"] = 1  # engine written by a newer launch description: refused, not mis-launched
    bad = dict(fields, plan=np.frombuffer(json.dumps(plan).encode(), np.int8))
    with pytest.raises(PluginConfigError, match="unknown LaunchPlan fields"):
        PluginConfig.from_fields(bad)


def test_v2_plans_fit_the_same_plugin():
    smap = tiny_map(channels=80)
    sched = build_v3_schedule(smap)
    cfg = config_for_plan(smap, sched, L.plan_v2(smap), "fp16")
    assert cfg.inputs[2:] == ("ranks_depth", "ranks_feat", "ranks_bev", "interval_starts", "interval_lengths")
    assert cfg.plan.zero_output_first
    arrays = map_inputs(cfg, smap, sched)
    assert all(a.dtype == np.int32 for a in arrays.values())
    assert not cfg.dynamic and cfg.profile("ranks_bev")[0] == cfg.profile("ranks_bev")[2]  # fixed lengths
    shapes = [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in arrays.values())]
    assert bind_plan(cfg, shapes) == cfg.plan
    with pytest.raises(PluginConfigError, match="outside"):
        bind_plan(cfg, shapes[:-1] + [(shapes[-1][0] + 1,)])


def test_empty_cells_carry_one_pad_entry():
    # every cell occupied -> no empty cells; TensorRT rejects zero-volume inputs
    smap = tiny_map(points=4000, grid=(1, 2, 3))
    cfg, sched = config_for_v3(smap, "fp16", "L2-resident")
    assert sched.empty_cells.size == 0
    arrays = map_inputs(cfg, smap, sched)
    assert arrays["empty_cells"].tolist() == [-1]
    plan = bind_plan(cfg, [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in arrays.values())])
    n_empty = [v for k, v in plan.args if k == "i32"][0]
    assert n_empty == 0  # the kernel reads no entry of the padding


def test_two_calibrations_one_config_different_arrays():
    """The engine's config is calibration-free: a recalibrated rig gets the same config, other arrays."""
    a, b = tiny_map(channels=16, seed=1, points=100), tiny_map(channels=16, seed=2, points=90)
    cfg_a, sched_a = config_for_v3(a, "fp16", "L2-resident")
    cfg_b, sched_b = config_for_v3(b, "fp16", "L2-resident")
    assert cfg_a == cfg_b and cfg_a.to_fields().keys() == cfg_b.to_fields().keys()
    arr_a, arr_b = map_inputs(cfg_a, a, sched_a), map_inputs(cfg_b, b, sched_b)
    assert arr_a["pidx"].shape != arr_b["pidx"].shape
    info = L.V3_KERNELS[cfg_a.plan.kernel]
    geom = L.v3_geometry(16, info)
    for smap, sched, arr in ((a, sched_a, arr_a), (b, sched_b, arr_b)):  # the launch follows each calibration
        bound = bind_plan(cfg_a, [cfg_a.depth_shape, cfg_a.feat_shape, *(x.shape for x in arr.values())])
        assert bound == L.plan_v3(smap, sched, info, geom)


def test_map_bounds_hold_for_extreme_maps():
    """The profile's max holds for maps with every depth entry in one cell or one point per cell."""
    depth_shape, grid = (2, 4, 3, 5), (1, 6, 7)
    for points, cells in ((120, 1), (120, 42), (1, 1)):
        smap = tiny_map(channels=16, points=points, grid=grid, depth_shape=depth_shape)
        if cells == 1:
            smap = tiny_map(channels=16, points=points, grid=(1, 1, 1), depth_shape=depth_shape)
        for k_min in (1, 16):
            cfg, sched = config_for_v3(smap, "fp16", "L2-resident", k_min=k_min)
            arrays = map_inputs(cfg, smap, sched)
            bounds = map_bounds(smap.depth_shape, smap.grid_shape, sched.block, smap.num_points)
            for name, a in arrays.items():
                assert a.shape[0] <= bounds[name][0], (name, points, cells, k_min)


def test_kernel_follows_target_l2():
    smap = tiny_map(channels=80)
    big, _ = plugin_config_for(smap, "fp16", Target("sm_120", 128 * MiB))
    tiny, _ = plugin_config_for(smap, "fp16", Target("sm_86", 1024))
    assert big.plan.kernel == "bevpool_v3_fp16_l2"
    assert tiny.plan.kernel == "bevpool_v3_fp16_dram"


class _Lib:
    def __init__(self, rtx):
        self.is_rtx = rtx


def test_targets():
    assert arch_cc("sm_120") == 120 and fp8_supported("sm_89") and not fp8_supported("sm_86")
    assert known_target("sm_86").l2_bytes == 6 * MiB
    with pytest.raises(TargetError):
        arch_cc("gfx90a")
    with pytest.raises(TargetError, match="fp8"):
        check_buildable(_Lib(True), "sm_86", "fp8")
    with pytest.raises(TargetError, match="cannot build"):
        check_buildable(_Lib(True), "sm_110", "fp16")
    check_buildable(_Lib(False), "sm_110", "fp16")  # full TensorRT on DRIVE Thor
    with pytest.raises(TargetError, match="cannot run"):
        check_runnable(_Lib(True), "sm_90")  # TensorRT-RTX refuses the H200
    check_runnable(_Lib(False), "sm_90")


@pytest.mark.parametrize("flavour,version,precision,needed", [
    ("full", "10.3.0", "fp8", True), ("full", "10.11.0.33", "fp8", True), ("full", "10.12.0", "fp8", False),
    ("full", "11.4.0", "fp8", False), ("full", "10.3.0", "fp16", False), ("rtx", "1.7.1.116", "fp8", False)])
def test_fp8_builder_flag_only_where_the_version_needs_it(flavour, version, precision, needed):
    from types import SimpleNamespace

    from bevpool_ros.backends.tensorrt.builder import fp8_flag_needed

    assert fp8_flag_needed(SimpleNamespace(is_rtx=flavour == "rtx", version=version), precision) is needed
