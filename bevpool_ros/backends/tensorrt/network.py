"""The one-layer network: depth, feat (run-time inputs) + map constants -> BEVPool plugin -> bev.

Two ways in, same network:
* full TensorRT: ``INetworkDefinition.add_plugin_v3`` with the map arrays as constants;
* TensorRT-RTX (its Python API has no add_plugin_v3): an ONNX graph with one custom node whose
  op type is the plugin name; the ONNX parser finds our registered creator and hands it the
  node's attributes as plugin fields. The map arrays are ONNX initializers.
Networks are strongly typed: the input dtypes (float16 or float8 E4M3) fix the precision.
"""
from __future__ import annotations

import numpy as np

from .plugin import plugin_classes, register_plugin
from .plugin_config import PLUGIN_NAME, PluginConfig

INPUT_NAMES = ("depth", "feat")
OUTPUT_NAME = "bev"


class NetworkError(RuntimeError):
    """The network could not be made (parser errors, unsafe parser, missing onnx package)."""


def onnx_model_bytes(cfg: PluginConfig, constants: dict[str, np.ndarray]) -> bytes:
    """ONNX model (opset 21: float8 e4m3fn types) holding one BEVPool custom node."""
    try:
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as e:
        raise NetworkError(f"the 'onnx' package is needed to build TensorRT-RTX networks ({e})") from e
    elem = {"float16": TensorProto.FLOAT16, "float8_e4m3": TensorProto.FLOAT8E4M3FN,
            "float32": TensorProto.FLOAT}
    attrs = {}
    for name, arr in cfg.to_fields().items():
        attrs[name] = [int(v) for v in arr] if arr.dtype == np.int32 else arr.tobytes().decode()
    node = helper.make_node(PLUGIN_NAME, [*INPUT_NAMES, *cfg.inputs[2:]], [OUTPUT_NAME],
                            name="bevpool", **attrs)
    graph = helper.make_graph(
        [node], "bevpool_ros",
        [helper.make_tensor_value_info("depth", elem[cfg.input_dtype], list(cfg.depth_shape)),
         helper.make_tensor_value_info("feat", elem[cfg.input_dtype], list(cfg.feat_shape))],
        [helper.make_tensor_value_info(OUTPUT_NAME, elem[cfg.output_dtype], list(cfg.output_shape))],
        initializer=[numpy_helper.from_array(np.ascontiguousarray(constants[n], np.int32), n)
                     for n in cfg.inputs[2:]])
    model = helper.make_model(graph, producer_name="bevpool_ros",
                              opset_imports=[helper.make_opsetid("", 21)])
    return model.SerializeToString()


def create_network(lib, builder):
    trt = lib.trt
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    return builder.create_network(0 if flag is None else 1 << int(flag))


def populate_with_onnx(lib, builder, network, cfg: PluginConfig, constants: dict[str, np.ndarray]):
    """Parse the ONNX graph into ``network``; returns the parser (keep it alive with the network)."""
    if not lib.onnx_parser_safe:
        raise NetworkError("TensorRT-RTX's ONNX parser would abort this process on a plugin node "
                           "(no unversioned libtensorrt_rtx.so; see trt_import.py)")
    register_plugin(lib.trt)
    trt = lib.trt
    parser = trt.OnnxParser(network, trt.Logger(trt.Logger.WARNING))
    if not parser.parse(onnx_model_bytes(cfg, constants)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise NetworkError(f"ONNX parse failed: {errors}")
    return parser


def populate_with_plugin_v3(lib, network, cfg: PluginConfig, constants: dict[str, np.ndarray]):
    """Full TensorRT: add the inputs, the map constants and the plugin layer directly."""
    trt = lib.trt
    register_plugin(trt)
    dt = {"float16": trt.DataType.HALF, "float8_e4m3": trt.DataType.FP8}[cfg.input_dtype]
    depth = network.add_input("depth", dt, tuple(cfg.depth_shape))
    feat = network.add_input("feat", dt, tuple(cfg.feat_shape))
    tensors = [depth, feat]
    keep = []
    for name in cfg.inputs[2:]:
        arr = np.ascontiguousarray(constants[name], np.int32)
        keep.append(arr)  # TensorRT copies weights at build time; keep them alive until then
        layer = network.add_constant(arr.shape, trt.Weights(arr))
        layer.name = name
        tensors.append(layer.get_output(0))
    Plugin, _ = plugin_classes(trt)
    plugin = Plugin(cfg)
    layer = network.add_plugin_v3(tensors, [], plugin)
    layer.name = "bevpool"
    out = layer.get_output(0)
    out.name = OUTPUT_NAME
    network.mark_output(out)
    return keep, plugin


def populate(lib, builder, network, cfg: PluginConfig, constants: dict[str, np.ndarray]):
    """add_plugin_v3 where the API has it, else the ONNX route; returns objects to keep alive."""
    if lib.has_add_plugin_v3:
        return populate_with_plugin_v3(lib, network, cfg, constants)
    return populate_with_onnx(lib, builder, network, cfg, constants)


__all__ = ["NetworkError", "onnx_model_bytes", "create_network", "populate"]
