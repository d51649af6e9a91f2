"""Checks that a network or engine is the one the plugin config describes; they raise on any gap.

* ``check_network``: run by build_engine before every build. Inputs/outputs (name, mode, dtype,
  shape), the optimisation profile of the map inputs, and the layer list (one PLUGIN_V3 layer
  ``bevpool`` fed by the config's inputs, in order, producing ``bev``).
* ``check_engine``: run by EngineRunner after deserializing. The same I/O table and profile,
  read from the ICudaEngine.
* ``check_engine_fields``: the plugin fields serialized inside the engine bytes, read without a
  GPU, recreated through our creator exactly as deserialization would, compared with the config.
  ``engine_plugin_fields`` reads TensorRT-RTX 1.7's serialized plugin record (field name, type,
  length, data), an undocumented layout: it is a test and diagnostics aid and returns None where
  the layout differs (another TensorRT), never a guess.
"""
from __future__ import annotations

import struct

import numpy as np

from .network import OUTPUT_NAME
from .plugin_config import FIELDS, PLUGIN_NAME, PluginConfig

_FIELD_ITEMSIZE = {3: 1, 5: 4, 6: 1}  # PluginFieldType INT8, INT32, CHAR (the kinds our fields use)
_FIELD_DTYPE = {3: np.int8, 5: np.int32, 6: np.int8}


class EngineCheckError(RuntimeError):
    """The network or engine differs from the plugin config; the message lists every difference."""


def _dtype_name(trt, dt) -> str:
    from .plugin import trt_dtypes

    names = {v: k for k, v in trt_dtypes(trt).items()}
    return names.get(dt, str(dt))


def expected_io(cfg: PluginConfig) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    """name -> (mode, dtype, shape); a map input's free leading dimension is -1."""
    io = {"depth": ("input", cfg.input_dtype, tuple(cfg.depth_shape)),
          "feat": ("input", cfg.input_dtype, tuple(cfg.feat_shape))}
    for name in cfg.inputs[2:]:
        lo, _, hi = cfg.profile(name)
        io[name] = ("input", "int32", tuple(-1 if a != b else b for a, b in zip(lo, hi)))
    io[OUTPUT_NAME] = ("output", cfg.output_dtype, tuple(cfg.output_shape))
    return io


def network_io(lib, network) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    trt = lib.trt
    io = {}
    for mode, count, get in (("input", network.num_inputs, network.get_input),
                             ("output", network.num_outputs, network.get_output)):
        for i in range(count):
            t = get(i)
            io[t.name] = (mode, _dtype_name(trt, t.dtype), tuple(int(v) for v in t.shape))
    return io


def engine_io(lib, engine) -> dict[str, tuple[str, str, tuple[int, ...]]]:
    trt = lib.trt
    io = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        mode = "input" if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else "output"
        io[name] = (mode, _dtype_name(trt, engine.get_tensor_dtype(name)),
                    tuple(int(v) for v in engine.get_tensor_shape(name)))
    return io


def io_differences(actual: dict, cfg: PluginConfig) -> list[str]:
    want = expected_io(cfg)
    out = [f"{n}: missing" for n in want if n not in actual]
    out += [f"{n}: not in the config" for n in actual if n not in want]
    out += [f"{n}: {actual[n]} != expected {want[n]}" for n in want if n in actual and actual[n] != want[n]]
    return out


def profile_differences(get_shape, cfg: PluginConfig) -> list[str]:
    """``get_shape(name)`` -> (min, opt, max) as TensorRT holds it."""
    out = []
    for name in cfg.inputs[2:]:
        got = tuple(tuple(int(v) for v in s) for s in get_shape(name))
        if got != cfg.profile(name):
            out.append(f"profile {name}: {got} != expected {cfg.profile(name)}")
    return out


def layer_differences(lib, network, cfg: PluginConfig, embedded: bool = False) -> list[str]:
    """One-layer network: exactly the plugin, fed by cfg.inputs, producing ``bev``. Embedded in a
    user's network: exactly one plugin layer, its map inputs the graph's map inputs."""
    trt = lib.trt
    layers = [network.get_layer(i) for i in range(network.num_layers)]
    plugins = [layer for layer in layers if layer.type == trt.LayerType.PLUGIN_V3]
    if len(plugins) != 1 or (len(layers) != 1 and not embedded):
        return [f"layers: {[(layer.name, str(layer.type)) for layer in layers]}, expected one PLUGIN_V3"]
    layer = plugins[0]
    ins = [layer.get_input(i).name for i in range(layer.num_inputs)]
    outs = [layer.get_output(i).name for i in range(layer.num_outputs)]
    out = []
    if (ins[2:] if embedded else ins) != list(cfg.inputs[2:] if embedded else cfg.inputs) \
            or len(ins) != len(cfg.inputs):
        out.append(f"plugin layer inputs {ins} != {list(cfg.inputs)}")
    if outs != [OUTPUT_NAME] and not embedded:
        out.append(f"plugin layer outputs {outs} != [{OUTPUT_NAME!r}]")
    return out


def _raise(problems: list[str], what: str) -> None:
    if problems:
        raise EngineCheckError(f"{what} differs from the plugin config: " + "; ".join(problems))


def check_network(lib, network, profile, cfg: PluginConfig, embedded: bool = False) -> None:
    io = network_io(lib, network)
    if embedded:  # a user's network: its own I/O is its business; the map inputs are ours
        want = expected_io(cfg)
        io_problems = [f"{n}: {io.get(n)} != expected {want[n]}" for n in cfg.inputs[2:] if io.get(n) != want[n]]
    else:
        io_problems = io_differences(io, cfg)
    _raise(io_problems + profile_differences(profile.get_shape, cfg) + layer_differences(lib, network, cfg, embedded),
           "network")


def check_engine(lib, engine, cfg: PluginConfig) -> None:
    problems = io_differences(engine_io(lib, engine), cfg)
    if not problems:
        problems = profile_differences(lambda n: engine.get_tensor_profile_shape(n, 0), cfg)
    _raise(problems, "engine")


# --- plugin fields inside serialized engine bytes ------------------------------------------------
def engine_plugin_fields(data: bytes, names=FIELDS) -> dict[str, np.ndarray] | None:
    """{field: array} from the plugin record after the last ``BEVPoolV3\\0``; None if not readable.

    Record per field (TensorRT-RTX 1.7): u32 len(name)+1, name, NUL, u32 PluginFieldType, u32 count, data.
    """
    start = data.rfind(PLUGIN_NAME.encode() + b"\0")
    if start < 0:
        return None
    out = {}
    for name in names:
        tag = struct.pack("<I", len(name) + 1) + name.encode() + b"\0"
        at = data.find(tag, start)
        if at < 0:
            return None
        at += len(tag)
        kind, count = struct.unpack_from("<II", data, at)
        if kind not in _FIELD_ITEMSIZE:
            return None
        at += 8
        raw = data[at:at + count * _FIELD_ITEMSIZE[kind]]
        out[name] = np.frombuffer(raw, _FIELD_DTYPE[kind]).copy()
    return out


def check_engine_fields(lib, data: bytes, cfg: PluginConfig) -> PluginConfig:
    """The config the engine's runtime phase will recreate, through our creator; raises if it is not ``cfg``."""
    from .plugin import fields_to_collection, register_plugin

    fields = engine_plugin_fields(data)
    if fields is None:
        raise EngineCheckError("no readable BEVPool plugin record in the engine bytes")
    diff = [k for k, v in cfg.to_fields().items() if not np.array_equal(_strip(fields[k]), _strip(v))]
    _raise([f"field {k} differs" for k in diff], "engine")
    trt = lib.trt
    plugin = register_plugin(trt).create_plugin("bevpool", fields_to_collection(trt, fields),
                                                trt.TensorRTPhase.RUNTIME)
    if plugin.cfg != cfg:
        raise EngineCheckError("engine plugin fields recreate another config")
    return plugin.cfg


def _strip(a: np.ndarray) -> np.ndarray:
    return a[:-1] if a.dtype == np.int8 and a.size and a[-1] == 0 else a
