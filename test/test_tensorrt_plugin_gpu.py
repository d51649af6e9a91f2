"""The plugin's runtime half on a real GPU, with no TensorRT installed (the lent H200 has none).

backends/tensorrt/standin.py supplies the base classes and plays TensorRT's part: the runtime
plugin is recreated from its serialized fields, attach_to_context loads the NVRTC module,
on_shape_change binds the launch to each calibration's map lengths, enqueue launches with raw
device pointers, eagerly and replayed from a CUDA graph. Two calibrations of the nuScenes rig go
through ONE plugin config (what one engine would hold), each against the FP64 reference.
"""
from __future__ import annotations

import numpy as np
import pytest
from tensorrt_helpers import recalibrated

from bevpool_ros.backends.tensorrt import standin
from bevpool_ros.backends.tensorrt.builder import plugin_config_for
from bevpool_ros.backends.tensorrt.plugin_config import map_inputs
from bevpool_ros.backends.tensorrt.targets import Target
from bevpool_ros.kernels import fp8
from bevpool_ros.kernels.precision import fp8_within_tolerance
from bevpool_ros.reference import pool_reference
from bevpool_ros.scatter_map import build_scatter_map


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_gpu_plugin_two_calibrations_one_config(precision, nuscenes_rig):
    from bevpool_ros.device.runtime import get_runtime
    from bevpool_ros.errors import BackendUnavailable

    try:
        rt = get_runtime(0)
    except BackendUnavailable as e:
        pytest.skip(str(e))
    if precision == "fp8" and rt.device.major * 10 + rt.device.minor < 89:
        pytest.skip("no FP8 on this GPU")
    target = Target(rt.device.arch, rt.device.l2_bytes, rt.device.name)
    maps = [build_scatter_map(nuscenes_rig), build_scatter_map(recalibrated(nuscenes_rig))]
    assert maps[0].num_points != maps[1].num_points
    cfg, _ = plugin_config_for(maps[0], precision, target)
    ctx = standin.ExecutionContext(rt, cfg)
    try:
        rng = np.random.default_rng(5)
        for smap in maps:
            cfg_i, sched = plugin_config_for(smap, precision, target)
            assert cfg_i == cfg  # same engine for the new calibration
            ctx.set_map(map_inputs(cfg, smap, sched))
            depth = rng.random(smap.depth_shape).astype(np.float32)
            feat = rng.uniform(-1, 1, smap.feat_shape).astype(np.float32)
            if precision == "fp16":
                d_in, f_in = depth.astype(np.float16), feat.astype(np.float16)
            else:
                d_in, f_in = fp8.quantize(depth, 1.0), fp8.quantize(feat, 1.0)
            ctx.upload(d_in, f_in)
            eager, replayed = ctx.result(replay=False), ctx.result(replay=True)
            np.testing.assert_array_equal(eager, replayed)
            if precision == "fp16":  # FP64 reference of the FP16-rounded inputs: accumulation error only
                np.testing.assert_allclose(eager, pool_reference(d_in, f_in, smap), atol=1e-2, rtol=1e-3)
            else:
                ref = pool_reference(depth, feat, smap)
                assert fp8_within_tolerance(eager, ref, pool_reference(np.abs(depth), np.abs(feat), smap))[0]
    finally:
        ctx.close()


def test_standin_runs_the_plugin_code_without_tensorrt(monkeypatch, nuscenes_rig):
    """CPU half of the above: the stand-in builds the real plugin classes, fields survive the
    creator round trip, on_shape_change re-binds per calibration; the launch is intercepted."""
    from tensorrt_helpers import bind_to_map

    import bevpool_ros.device.driver as drv
    from bevpool_ros.backends.tensorrt.plugin import fields_to_collection, plugin_classes, register_plugin
    from bevpool_ros.backends.tensorrt.targets import known_target

    Plugin, _ = plugin_classes(standin)
    monkeypatch.setattr(Plugin, "kernel_loader", staticmethod(lambda: "MODULE"))
    launches = []
    monkeypatch.setattr(drv, "launch", lambda module, plan, bufs, stream: launches.append(plan))
    maps = [build_scatter_map(nuscenes_rig), build_scatter_map(recalibrated(nuscenes_rig))]
    target = known_target("sm_89")
    cfg, _ = plugin_config_for(maps[0], "fp16", target)
    creator = register_plugin(standin)
    built = creator.create_plugin("bevpool", fields_to_collection(standin, cfg.to_fields()),
                                  standin.TensorRTPhase.BUILD)
    p = creator.create_plugin("bevpool", built.get_fields_to_serialize(), standin.TensorRTPhase.RUNTIME)
    p = p.attach_to_context(None)
    assert p.cfg == cfg
    for smap in maps:
        _, sched = plugin_config_for(smap, "fp16", target)
        bind_to_map(p, smap, sched)
        p.enqueue(None, None, list(range(1, 6)), [9], 0, 7)
    grids = [plan.grid for plan in launches]
    assert grids[0] != grids[1] and all(g[0] > 0 for g in grids)  # one config, two bound launches
