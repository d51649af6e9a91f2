"""Tests that fail when network construction or what the engine will load is wrong (TensorRT-RTX, no GPU).

The built engine's serialized plugin fields are read back from its bytes and recreated through our
creator (what deserialization does); the network's I/O table, profile and layer list are checked
against the plugin config before every build. Each check is shown to fail on a one-field mutation.
"""
from __future__ import annotations

import dataclasses

import pytest
from tensorrt_helpers import build_for, tiny_map, trt_rtx_or_skip

import bevpool_ros.backends.tensorrt.network as N
from bevpool_ros.backends.tensorrt.builder import plugin_config_for
from bevpool_ros.backends.tensorrt.engine_check import (
    EngineCheckError,
    check_engine_fields,
    check_network,
    engine_plugin_fields,
)
from bevpool_ros.backends.tensorrt.network import add_map_profile, create_network, populate
from bevpool_ros.backends.tensorrt.targets import known_target


@pytest.fixture(scope="module")
def lib():
    return trt_rtx_or_skip()


@pytest.fixture(scope="module")
def built(lib):
    engine, _ = build_for(lib, tiny_map(channels=16), "fp8", known_target("sm_89"))
    return engine


def _mutations(cfg):
    plan = cfg.plan
    return {
        "precision": dataclasses.replace(cfg, precision="fp16"),
        "depth_shape": dataclasses.replace(cfg, depth_shape=(2, 4, 3, 6)),
        "grid_shape": dataclasses.replace(cfg, grid_shape=(1, 6, 8)),
        "channels": dataclasses.replace(cfg, channels=32),
        "input_names": dataclasses.replace(cfg, inputs=(*cfg.inputs[:2], "pidx", "slots", "empty_cells")),
        "input_shapes": dataclasses.replace(cfg, input_shapes=(*cfg.input_shapes[:3], (999, 2),
                                                               cfg.input_shapes[4])),
        "plan": dataclasses.replace(cfg, plan=dataclasses.replace(plan, block=(128, 1, 1))),
    }


def test_engine_carries_the_config_the_runtime_recreates(lib, built):
    fields = engine_plugin_fields(built.data)
    assert fields is not None and set(fields) == set(built.config.to_fields())
    assert check_engine_fields(lib, built.data, built.config) == built.config


@pytest.mark.parametrize("field", ["precision", "depth_shape", "grid_shape", "channels", "input_names",
                                   "input_shapes", "plan"])
def test_engine_field_check_fails_on_any_mutated_field(lib, built, field):
    wrong = _mutations(built.config)[field]
    with pytest.raises(EngineCheckError, match=f"field {field} differs"):
        check_engine_fields(lib, built.data, wrong)


def test_damaged_or_foreign_engine_bytes_are_not_read(lib, built):
    assert engine_plugin_fields(b"not an engine") is None
    cut = built.data[:built.data.rfind(b"plan")]  # record truncated before the last field
    assert engine_plugin_fields(cut) is None
    with pytest.raises(EngineCheckError, match="no readable"):
        check_engine_fields(lib, b"not an engine", built.config)


def _network(lib, cfg):
    trt = lib.trt
    builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
    network = create_network(lib, builder)
    keep = populate(lib, network, cfg)
    profile = add_map_profile(builder, builder.create_builder_config(), cfg)
    return builder, network, profile, keep


def test_network_matches_its_config(lib):
    cfg, _ = plugin_config_for(tiny_map(channels=16), "fp16", known_target("sm_89"))
    _, network, profile, _ = _network(lib, cfg)
    check_network(lib, network, profile, cfg)


@pytest.mark.parametrize("field,message", [("precision", "float16"), ("grid_shape", "bev"),
                                           ("input_names", "plugin layer inputs"), ("input_shapes", "profile pidx"),
                                           ("depth_shape", "depth")])
def test_network_check_fails_on_a_mutated_config(lib, field, message):
    cfg, _ = plugin_config_for(tiny_map(channels=16), "fp8", known_target("sm_89"))
    _, network, profile, _ = _network(lib, cfg)
    with pytest.raises(EngineCheckError, match=message):
        check_network(lib, network, profile, _mutations(cfg)[field])


def test_a_broken_network_builder_fails_the_build(lib, monkeypatch):
    """Swap two map inputs in the ONNX node (a plausible builder bug): build_engine refuses."""
    real = N.onnx_plugin_node

    def swapped(cfg, depth, feat, out, name="bevpool"):
        node = real(cfg, depth, feat, out, name)
        node.input[2], node.input[3] = node.input[3], node.input[2]
        return node

    monkeypatch.setattr(N, "onnx_plugin_node", swapped)
    with pytest.raises(EngineCheckError, match="plugin layer inputs"):
        build_for(lib, tiny_map(channels=16), "fp16", known_target("sm_89"))
