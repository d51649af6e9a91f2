"""One deserialized engine as the pooling step of the shared GPU frame (backends/gpu/frame.py).

Needs a GPU and a TensorRT runtime that accepts it (TensorRT-RTX refuses compute capability 9.0).
The map inputs live in buffers allocated at the profile's bounds, so a calibration never moves
them. Per calibration ``set_map`` uploads the arrays, sets the input shapes and runs the engine
once eagerly on scratch I/O (TensorRT calls the plugin's on_shape_change and its first enqueue
outside any capture). Per frame nothing here runs: the frame graph captured ``enqueue``
(tensor addresses + ``execute_async_v3``) once, so the plugin's Python enqueue ran only then.
"""
from __future__ import annotations

import logging

import numpy as np

from ...device.driver import DeviceBuffer
from ...device.timing import time_graph
from .network import OUTPUT_NAME
from .plugin import register_plugin
from .plugin_config import PluginConfig, check_shapes

log = logging.getLogger(__name__)
_ITEMSIZE = {"float16": 2, "float8_e4m3": 1, "float32": 4}


class EngineLoadError(RuntimeError):
    """TensorRT refused the serialized engine (wrong version/GPU, or corrupt); rebuild it."""


class EngineRunner:
    def __init__(self, lib, engine_bytes: bytes, cfg: PluginConfig, rt):
        from .engine_check import EngineCheckError, check_engine

        trt = lib.trt
        register_plugin(trt)  # deserialization looks the creator up in the registry
        self.cfg, self.rt, self.stream = cfg, rt, rt.stream
        self._logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self._logger)
        self.engine = self.runtime.deserialize_cuda_engine(engine_bytes)
        if self.engine is None:
            raise EngineLoadError(f"{lib.tag} could not deserialize the engine ({len(engine_bytes)} bytes)")
        try:
            check_engine(lib, self.engine, cfg)  # I/O names, modes, dtypes, shapes, profile
        except EngineCheckError as e:
            raise EngineLoadError(str(e)) from e
        self.context = self.engine.create_execution_context()
        if self.context is None:
            raise EngineLoadError("could not create a TensorRT execution context")
        # scratch I/O for the eager run after a shape change and for kernel timing
        self.scratch = {"depth": DeviceBuffer(int(np.prod(cfg.depth_shape)) * _ITEMSIZE[cfg.input_dtype]),
                        "feat": DeviceBuffer(int(np.prod(cfg.feat_shape)) * _ITEMSIZE[cfg.input_dtype]),
                        "out": DeviceBuffer(int(np.prod(cfg.output_shape)) * _ITEMSIZE[cfg.output_dtype])}
        for b in self.scratch.values():
            self.stream.memset8(b, 0, b.nbytes)
        # at the profile's max: a new calibration never moves a buffer
        self.maps = {n: DeviceBuffer(int(np.prod(cfg.profile(n)[2])) * 4) for n in cfg.inputs[2:]}
        for name, buf in self.maps.items():
            if not self.context.set_tensor_address(name, buf.ptr):
                raise EngineLoadError(f"engine has no input {name!r}")

    def set_map(self, arrays: dict[str, np.ndarray]) -> None:
        """A calibration's map inputs (plugin_config.map_inputs): upload, set shapes, one eager run."""
        cfg = self.cfg
        arrays = {n: np.ascontiguousarray(arrays[n], np.int32) for n in cfg.inputs[2:]}
        check_shapes(cfg, [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in arrays.values())])
        for name, a in arrays.items():
            self.stream.h2d(self.maps[name], a.ctypes.data, a.nbytes)
            if not self.context.set_input_shape(name, a.shape):
                raise RuntimeError(f"TensorRT refused shape {a.shape} for {name}")
        self.stream.synchronize()  # the arrays are the caller's: finish reading them now
        self.enqueue(self.stream, self.scratch)  # on_shape_change + TensorRT's lazy setup, outside a capture
        self.stream.synchronize()
        capturable = getattr(self.context, "is_stream_capturable", None)
        if capturable is not None and not capturable(int(self.stream.handle)):
            raise RuntimeError("TensorRT says enqueue on this stream cannot be captured in a CUDA graph")

    def enqueue(self, stream, bindings: dict) -> None:
        """The pooling step: bind depth/feat/out, execute. Recorded into the frame graph."""
        ctx = self.context
        for name, key in (("depth", "depth"), ("feat", "feat"), (OUTPUT_NAME, "out")):
            if not ctx.set_tensor_address(name, bindings[key].ptr):
                raise RuntimeError(f"engine has no I/O tensor {name!r}")
        if not ctx.execute_async_v3(int(stream.handle)):
            raise RuntimeError("TensorRT execute_async_v3 failed")

    def time_us(self, reps: int = 100) -> float:
        """Graph-replay median of the engine alone on the scratch I/O."""
        return time_graph(self.stream, lambda i, s: self.enqueue(s, self.scratch), reps=reps)["median_us"]

    def close(self) -> None:
        for b in (*self.scratch.values(), *self.maps.values()):
            b.free()
        self.scratch, self.maps = {}, {}
        self.context = self.engine = self.runtime = None
