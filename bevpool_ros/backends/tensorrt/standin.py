"""A stand-in for the parts of the TensorRT Python API the plugin's classes are built on.

plugin.plugin_classes(trt) needs only base classes, the DataType/TensorFormat/PluginField names
and a registry; with this module as ``trt`` the real plugin code (attach_to_context,
on_shape_change, enqueue, field serialization, the creator) runs where no TensorRT can be
installed, e.g. the lent H200 (bench/trt_plugin_host_cost.py, the gpu tests). ``ExecutionContext``
plays TensorRT's part for one engine: the plugin recreated from its serialized fields, buffers
bound at the profile's max, on_shape_change per calibration, enqueue with raw device pointers.
Nothing of TensorRT's own code runs.
"""
from __future__ import annotations

import enum
import sys
from dataclasses import dataclass

__version__ = "standin"


class DataType(enum.Enum):
    FLOAT = 0
    HALF = 1
    INT32 = 3
    FP8 = 6


class TensorFormat(enum.Enum):
    LINEAR = 0


class PluginFieldType(enum.Enum):
    INT8 = 3
    INT32 = 5
    CHAR = 6


class TensorRTPhase(enum.Enum):
    BUILD = 0
    RUNTIME = 1


@dataclass
class PluginField:
    name: str
    data: object = None
    type: PluginFieldType = PluginFieldType.CHAR


class PluginFieldCollection(list):
    pass


class DimsExprs(list):
    def __init__(self, n: int):
        super().__init__([None] * n)


class _Base:
    def __init__(self, *args, **kwargs):
        pass


class IPluginV3(_Base):
    pass


class IPluginV3OneCore(_Base):
    pass


class IPluginV3OneBuild(_Base):
    pass


class IPluginV3OneRuntime(_Base):
    pass


class IPluginCreatorV3One(_Base):
    pass


class _Registry:
    def __init__(self):
        self.creators: dict[tuple, object] = {}

    def register_creator(self, creator, namespace: str) -> bool:
        key = (creator.name, creator.plugin_version, namespace)
        if key in self.creators:
            return False
        self.creators[key] = creator
        return True

    def get_creator(self, name: str, version: str, namespace: str = ""):
        return self.creators.get((name, version, namespace))


_REGISTRY = _Registry()


def get_plugin_registry() -> _Registry:
    return _REGISTRY


@dataclass
class TensorDesc:
    """What TensorRT hands on_shape_change per tensor (only .dims is read)."""
    dims: tuple


class ExecutionContext:
    """TensorRT's side of one execution context of the one-layer BEVPool engine (GPU needed)."""

    def __init__(self, rt, cfg):
        import numpy as np

        from ...device.driver import DeviceBuffer
        from .plugin import fields_to_collection, register_plugin

        this = sys.modules[__name__]  # this module is the ``trt`` the plugin classes are built on
        creator = register_plugin(this)
        built = creator.create_plugin("bevpool", fields_to_collection(this, cfg.to_fields()), TensorRTPhase.BUILD)
        # what an engine stores is what its runtime phase recreates the plugin from
        stored = built.get_fields_to_serialize()
        self.plugin = creator.create_plugin("bevpool", stored, TensorRTPhase.RUNTIME).attach_to_context(None)
        if self.plugin.cfg != cfg:
            raise RuntimeError("plugin fields did not survive serialization")
        self.cfg, self.stream = cfg, rt.stream
        in_size = 2 if cfg.precision == "fp16" else 1
        self.d = {"depth": DeviceBuffer(int(np.prod(cfg.depth_shape)) * in_size),
                  "feat": DeviceBuffer(int(np.prod(cfg.feat_shape)) * in_size)}
        for name in cfg.inputs[2:]:
            self.d[name] = DeviceBuffer(int(np.prod(cfg.profile(name)[2])) * 4)
        self.out = DeviceBuffer(int(np.prod(cfg.output_shape)) * np.dtype(cfg.output_dtype).itemsize)
        self.host_out = np.empty(cfg.output_shape, np.dtype(cfg.output_dtype))
        self.ptrs = [self.d[n].ptr for n in cfg.inputs]
        self.graph = None

    def set_map(self, arrays: dict) -> None:
        """A calibration: arrays into the bound buffers, on_shape_change, then capture one enqueue."""
        from ...device.driver import Graph

        for name, a in arrays.items():
            self.stream.h2d(self.d[name], a.ctypes.data, a.nbytes)
        self.stream.synchronize()
        shapes = [self.cfg.depth_shape, self.cfg.feat_shape, *(arrays[n].shape for n in self.cfg.inputs[2:])]
        self.plugin.on_shape_change([TensorDesc(tuple(s)) for s in shapes],
                                    [TensorDesc(tuple(self.cfg.output_shape))])
        if self.graph is not None:
            self.graph.destroy()
        self.graph = Graph(self.stream, self.enqueue)

    def enqueue(self, stream) -> None:
        self.plugin.enqueue(None, None, self.ptrs, [self.out.ptr], 0, int(stream.handle))

    def upload(self, depth, feat) -> None:
        """Device-dtype inputs (float16, or uint8 E4M3 codes)."""
        self.stream.h2d(self.d["depth"], depth.ctypes.data, depth.nbytes)
        self.stream.h2d(self.d["feat"], feat.ctypes.data, feat.nbytes)

    def result(self, replay: bool):
        """Output of one enqueue (eager) or one graph replay, over a NaN-poisoned buffer."""
        self.stream.memset8(self.out, 0xFF, self.out.nbytes)
        if replay:
            self.graph.replay()
        else:
            self.enqueue(self.stream)
        self.stream.d2h(self.host_out.ctypes.data, self.out, self.out.nbytes)
        self.stream.synchronize()
        return self.host_out.copy()

    def close(self) -> None:
        if self.graph is not None:
            self.graph.destroy()
        for b in (*self.d.values(), self.out):
            b.free()
