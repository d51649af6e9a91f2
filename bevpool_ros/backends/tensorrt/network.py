"""The one-layer network: depth, feat and the map arrays (all inputs) -> BEVPool plugin -> bev.

Two ways in, same network:
* full TensorRT: ``INetworkDefinition.add_plugin_v3``;
* TensorRT-RTX (its Python API has no add_plugin_v3): an ONNX graph with one custom node whose
  op type is the plugin name; the ONNX parser finds our registered creator and hands it the
  node's attributes as plugin fields.
The map arrays are inputs with a leading dimension bounded by an optimisation profile
(PluginConfig.profile), so one engine serves every calibration of a rig. Networks are strongly
typed: the input dtypes (float16 or float8 E4M3) fix the precision.
"""
from __future__ import annotations

import numpy as np

from .plugin import plugin_classes, register_plugin
from .plugin_config import PLUGIN_NAME, PluginConfig

INPUT_NAMES = ("depth", "feat")
OUTPUT_NAME = "bev"


class NetworkError(RuntimeError):
    """The network could not be made (parser errors, unsafe parser, missing onnx package)."""


def onnx_module():
    """The onnx package, or NetworkError saying it is needed."""
    try:
        import onnx
    except ImportError as e:
        raise NetworkError(f"the 'onnx' package is needed to build TensorRT-RTX networks ({e})") from e
    return onnx


def onnx_elem_types() -> dict[str, int]:
    T = onnx_module().TensorProto
    return {"float16": T.FLOAT16, "float8_e4m3": T.FLOAT8E4M3FN, "float32": T.FLOAT, "int32": T.INT32}


def onnx_plugin_node(cfg: PluginConfig, depth: str, feat: str, out: str, name: str = "bevpool"):
    """The BEVPool custom node: its attributes are the plugin fields (docs/tensorrt.md)."""
    attrs = {k: [int(v) for v in a] if a.dtype == np.int32 else a.tobytes().decode()
             for k, a in cfg.to_fields().items()}
    return onnx_module().helper.make_node(PLUGIN_NAME, [depth, feat, *cfg.inputs[2:]], [out], name=name, **attrs)


def onnx_map_inputs(cfg: PluginConfig) -> list:
    """Graph inputs for the map arrays: leading dimension symbolic (``<name>_rows``)."""
    helper, elem = onnx_module().helper, onnx_elem_types()
    out = []
    for name in cfg.inputs[2:]:
        _, _, hi = cfg.profile(name)
        lead = f"{name}_rows" if cfg.dynamic else hi[0]
        out.append(helper.make_tensor_value_info(name, elem["int32"], [lead, *hi[1:]]))
    return out


def onnx_model_bytes(cfg: PluginConfig) -> bytes:
    """ONNX model (opset 21: float8 e4m3fn types) holding one BEVPool custom node."""
    helper, elem = onnx_module().helper, onnx_elem_types()
    graph = helper.make_graph(
        [onnx_plugin_node(cfg, *INPUT_NAMES, OUTPUT_NAME)], "bevpool_ros",
        [helper.make_tensor_value_info("depth", elem[cfg.input_dtype], list(cfg.depth_shape)),
         helper.make_tensor_value_info("feat", elem[cfg.input_dtype], list(cfg.feat_shape)),
         *onnx_map_inputs(cfg)],
        [helper.make_tensor_value_info(OUTPUT_NAME, elem[cfg.output_dtype], list(cfg.output_shape))])
    model = helper.make_model(graph, producer_name="bevpool_ros",
                              opset_imports=[helper.make_opsetid("", 21)])
    return model.SerializeToString()


def create_network(lib, builder, strongly_typed: bool = True):
    trt = lib.trt
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    return builder.create_network(1 << int(flag) if flag is not None and strongly_typed else 0)


def parse_onnx(lib, network, model_bytes: bytes):
    """Parse an ONNX model holding BEVPool nodes into ``network``; returns the parser (keep it alive)."""
    if not lib.onnx_parser_safe:
        raise NetworkError("TensorRT-RTX's ONNX parser would abort this process on a plugin node "
                           "(no unversioned libtensorrt_rtx.so; see trt_import.py)")
    trt = lib.trt
    register_plugin(trt)
    parser = trt.OnnxParser(network, trt.Logger(trt.Logger.WARNING))
    if not parser.parse(model_bytes):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise NetworkError(f"ONNX parse failed: {errors}")
    return parser


def populate_with_plugin_v3(lib, network, cfg: PluginConfig):
    """Full TensorRT: add the inputs and the plugin layer directly."""
    trt = lib.trt
    register_plugin(trt)
    dt = {"float16": trt.DataType.HALF, "float8_e4m3": trt.DataType.FP8}[cfg.input_dtype]
    tensors = [network.add_input("depth", dt, tuple(cfg.depth_shape)),
               network.add_input("feat", dt, tuple(cfg.feat_shape))]
    for name in cfg.inputs[2:]:
        lo, _, hi = cfg.profile(name)
        dims = tuple(-1 if a != b else b for a, b in zip(lo, hi))
        tensors.append(network.add_input(name, trt.DataType.INT32, dims))
    Plugin, _ = plugin_classes(trt)
    plugin = Plugin(cfg)
    layer = network.add_plugin_v3(tensors, [], plugin)
    layer.name = "bevpool"
    out = layer.get_output(0)
    out.name = OUTPUT_NAME
    network.mark_output(out)
    return plugin


def populate(lib, network, cfg: PluginConfig):
    """add_plugin_v3 where the API has it, else the ONNX route; returns objects to keep alive."""
    if lib.has_add_plugin_v3:
        return populate_with_plugin_v3(lib, network, cfg)
    return parse_onnx(lib, network, onnx_model_bytes(cfg))


def add_map_profile(builder, config, cfg: PluginConfig, names=None) -> None:
    """One optimisation profile bounding the map inputs (``names``: the network's input names
    for cfg.inputs[2:], when an embedding network renamed them)."""
    profile = builder.create_optimization_profile()
    for name, net_name in zip(cfg.inputs[2:], names or cfg.inputs[2:]):
        profile.set_shape(net_name, *cfg.profile(name))
    config.add_optimization_profile(profile)
    return profile


__all__ = ["NetworkError", "onnx_model_bytes", "onnx_plugin_node", "create_network", "populate", "add_map_profile"]
