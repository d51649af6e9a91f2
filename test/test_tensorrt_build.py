"""TensorRT-RTX: AOT engine builds with the BEVPool IPluginV3, on a machine with no GPU.

Skipped where TensorRT-RTX is not installed. What this proves: the plugin registers, the ONNX
custom node reaches our creator, the builder calls our build-phase methods with the expected
shapes/dtypes and produces a serialized engine for each target; FP8 is refused below SM89.
What it cannot prove here: that the engine runs (no GPU; TensorRT-RTX also refuses the H200).
"""
from __future__ import annotations

import pytest
from tensorrt_helpers import bind_to_map, build_for, tiny_map, trt_rtx_or_skip

from bevpool_ros.backends.tensorrt.builder import EngineBuildError, plugin_config_for
from bevpool_ros.backends.tensorrt.network import create_network, onnx_model_bytes, populate
from bevpool_ros.backends.tensorrt.plugin import fields_to_collection, plugin_classes, register_plugin
from bevpool_ros.backends.tensorrt.plugin_config import PLUGIN_NAME
from bevpool_ros.backends.tensorrt.targets import Target, TargetError, known_target
from bevpool_ros.regime import MiB

BUILDS = [("sm_86", "fp16"), ("sm_89", "fp16"), ("sm_89", "fp8"), ("sm_120", "fp16"), ("sm_120", "fp8")]


@pytest.fixture(scope="module")
def lib():
    return trt_rtx_or_skip()


@pytest.mark.parametrize("arch,precision", BUILDS)
def test_aot_build_without_gpu(lib, arch, precision):
    smap = tiny_map(channels=80)
    built, _ = build_for(lib, smap, precision, known_target(arch))
    assert len(built.data) > 1000
    assert built.config.plan.kernel.startswith(f"bevpool_v3_{precision}")
    assert built.target.arch == arch


def test_fp8_below_sm89_is_refused_before_tensorrt(lib):
    with pytest.raises(TargetError, match="fp8 needs compute capability"):
        build_for(lib, tiny_map(), "fp8", known_target("sm_86"))


def test_tensorrt_itself_refuses_fp8_for_sm86(lib, monkeypatch):
    # bypass our pre-check: TensorRT-RTX's own error must surface as EngineBuildError, not a crash
    import bevpool_ros.backends.tensorrt.builder as B

    monkeypatch.setattr(B, "check_buildable", lambda *a: None)
    with pytest.raises(EngineBuildError, match="fp8_e4m3"):
        build_for(lib, tiny_map(), "fp8", Target("sm_86", 6 * MiB))


def test_rig_derived_map_builds(lib, canonical_map):
    built, sched = build_for(lib, canonical_map, "fp16", known_target("sm_86"))
    # the map (slots, pidx, empty cells) is an engine input, not inside the engine
    assert len(built.data) < sched.pidx.nbytes
    assert built.config.plan.kernel == "bevpool_v3_fp16_dram"  # 6 MiB L2 on the A6000 -> DRAM path


def test_build_phase_sees_expected_tensors(lib, monkeypatch):
    Plugin, _ = plugin_classes(lib.trt)
    seen = {}
    orig = Plugin.configure_plugin

    def spy(self, inp, out):
        seen["in"] = [(tuple(d.desc.dims), d.desc.type) for d in inp]
        seen["out"] = [(tuple(d.desc.dims), d.desc.type) for d in out]
        return orig(self, inp, out)

    monkeypatch.setattr(Plugin, "configure_plugin", spy)
    smap = tiny_map(channels=16)
    built, _ = build_for(lib, smap, "fp8", known_target("sm_120"))
    DT = lib.trt.DataType
    cfg = built.config
    shapes = [cfg.depth_shape, cfg.feat_shape, (-1, 4), (-1, 2), (-1,)]  # map lengths: the profile's
    assert seen["in"] == [(tuple(s), t) for s, t in zip(shapes, [DT.FP8, DT.FP8] + [DT.INT32] * 3)]
    assert seen["out"] == [((*smap.grid_shape, 16), DT.HALF)]


def test_supports_format_combination(lib):
    trt = lib.trt
    smap = tiny_map()
    cfg, _ = plugin_config_for(smap, "fp16", known_target("sm_89"))
    Plugin, _ = plugin_classes(trt)
    p = Plugin(cfg)

    def descs(types):
        out = []
        for t in types:
            d = trt.DynamicPluginTensorDesc()
            d.desc.type = t
            d.desc.format = trt.TensorFormat.LINEAR
            out.append(d)
        return out

    DT = trt.DataType
    good = descs([DT.HALF, DT.HALF, DT.INT32, DT.INT32, DT.INT32, DT.FLOAT])
    assert all(p.supports_format_combination(i, good, 5) for i in range(6))
    bad = descs([DT.FLOAT, DT.HALF, DT.HALF, DT.INT32, DT.INT32, DT.HALF])
    assert [p.supports_format_combination(i, bad, 5) for i in range(6)] == [False, True, False, True, True, False]


def test_creator_round_trip_through_registry(lib):
    trt = lib.trt
    creator = register_plugin(trt)
    assert register_plugin(trt) is creator  # once per process
    assert trt.get_plugin_registry().get_creator(PLUGIN_NAME, "1", "") is not None
    smap = tiny_map()
    cfg, _ = plugin_config_for(smap, "fp8", known_target("sm_120"), out_scale=0.5)
    p = creator.create_plugin("bevpool", fields_to_collection(trt, cfg.to_fields()), trt.TensorRTPhase.BUILD)
    assert p.cfg == cfg
    # what the engine stores is what the runtime phase recreates the plugin from
    q = creator.create_plugin("bevpool", p.get_fields_to_serialize(), trt.TensorRTPhase.RUNTIME)
    assert q.cfg == cfg and q.clone().cfg == cfg


def test_enqueue_binds_tensorrt_pointers_to_the_plan(lib, monkeypatch):
    """enqueue without a GPU: the launch is intercepted; checks binding, stream, and no allocation."""
    import bevpool_ros.device.driver as drv
    from bevpool_ros.kernels import table as L

    smap = tiny_map()
    cfg, sched = plugin_config_for(smap, "fp16", known_target("sm_89"))
    Plugin, _ = plugin_classes(lib.trt)
    calls = []
    monkeypatch.setattr(Plugin, "kernel_loader", staticmethod(lambda: "MODULE"))
    monkeypatch.setattr(drv, "launch", lambda module, plan, bufs, stream: calls.append(
        (module, plan, {k: v.ptr for k, v in bufs.items()}, stream.handle)))
    monkeypatch.setattr(drv, "DeviceBuffer", None)  # any allocation attempt would fail loudly
    p = Plugin(cfg).attach_to_context(None)
    ptrs = [0x1000 * (i + 1) for i in range(5)]
    with pytest.raises(RuntimeError, match="on_shape_change"):  # no launch before the map is bound
        p.enqueue(None, None, ptrs, [0xBEEF00], 0, 0x77)
    bind_to_map(p, smap, sched)
    assert p.enqueue(None, None, ptrs, [0xBEEF00], 0, 0x77) is None
    module, plan, bufs, stream = calls[0]
    info = L.V3_KERNELS[cfg.plan.kernel]
    assert module == "MODULE" and plan == L.plan_v3(smap, sched, info, L.v3_geometry(16, info)) and stream == 0x77
    assert bufs == dict(zip(cfg.inputs, ptrs), out=0xBEEF00)


def test_onnx_model_carries_the_plugin_node(lib):
    import onnx

    smap = tiny_map()
    cfg, sched = plugin_config_for(smap, "fp8", known_target("sm_89"))
    model = onnx.load_from_string(onnx_model_bytes(cfg))
    (node,) = model.graph.node
    assert node.op_type == PLUGIN_NAME
    assert list(node.input) == ["depth", "feat", "slots", "pidx", "empty_cells"]
    assert {a.name for a in node.attribute} == set(cfg.to_fields())
    assert [i.name for i in model.graph.input] == ["depth", "feat", "slots", "pidx", "empty_cells"]
    assert not model.graph.initializer  # no calibration inside the model
    assert model.graph.input[2].type.tensor_type.shape.dim[0].dim_param == "slots_rows"
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT8E4M3FN
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16


def test_engine_does_not_deserialize_without_gpu(lib):
    """Documents the limit of this machine: the runtime needs a CUDA driver."""
    trt = lib.trt
    built, _ = build_for(lib, tiny_map(), "fp16", known_target("sm_89"))
    register_plugin(trt)
    rt = trt.Runtime(trt.Logger(trt.Logger.INTERNAL_ERROR))
    from bevpool_ros.device.driver import live_l2_bytes

    if live_l2_bytes() is not None:
        pytest.skip("a GPU is present")
    assert rt.deserialize_cuda_engine(built.data) is None


def test_network_has_one_plugin_layer(lib):
    trt = lib.trt
    smap = tiny_map()
    cfg, sched = plugin_config_for(smap, "fp16", known_target("sm_89"))
    builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
    net = create_network(lib, builder)
    keep = populate(lib, net, cfg)
    assert keep is not None
    names = [net.get_input(i).name for i in range(net.num_inputs)]
    assert names == ["depth", "feat", "slots", "pidx", "empty_cells"]
    assert net.get_output(0).name == "bev" and tuple(net.get_output(0).shape) == (*smap.grid_shape, 16)
    assert [net.get_layer(i).type for i in range(net.num_layers)] == [trt.LayerType.PLUGIN_V3]
