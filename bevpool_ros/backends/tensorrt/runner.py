"""Run one deserialized engine: persistent device/pinned buffers, one stream, execute_async_v3.

Needs a GPU and a TensorRT runtime that accepts it (TensorRT-RTX refuses compute capability 9.0).
The stream, buffers and kernel module are the cuda backend's helpers (backends/cuda/driver.py,
runtime.py), so the plugin's kernels and the cuda backend's are the same NVRTC module.
"""
from __future__ import annotations

import logging

import numpy as np

from ..cuda.driver import DeviceBuffer, PinnedBuffer
from ..cuda.timing import time_graph
from .network import OUTPUT_NAME
from .plugin import register_plugin
from .plugin_config import PluginConfig

log = logging.getLogger(__name__)
_HOST_INPUT = {"float16": np.float16, "float8_e4m3": np.uint8}  # uint8 = raw E4M3 codes


class EngineLoadError(RuntimeError):
    """TensorRT refused the serialized engine (wrong version/GPU, or corrupt); rebuild it."""


class EngineRunner:
    def __init__(self, lib, engine_bytes: bytes, cfg: PluginConfig, rt):
        trt = lib.trt
        register_plugin(trt)  # deserialization looks the creator up in the registry
        self.cfg, self.rt = cfg, rt
        self._logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self._logger)
        self.engine = self.runtime.deserialize_cuda_engine(engine_bytes)
        if self.engine is None:
            raise EngineLoadError(f"{lib.tag} could not deserialize the engine ({len(engine_bytes)} bytes)")
        self.context = self.engine.create_execution_context()
        if self.context is None:
            raise EngineLoadError("could not create a TensorRT execution context")
        in_dt = _HOST_INPUT[cfg.input_dtype]
        out_dt = np.dtype(cfg.output_dtype)
        self.h_depth = PinnedBuffer(cfg.depth_shape, in_dt)
        self.h_feat = PinnedBuffer(cfg.feat_shape, in_dt)
        self.h_out = PinnedBuffer(cfg.output_shape, out_dt)
        self.d = {name: DeviceBuffer(h.nbytes) for name, h in
                  (("depth", self.h_depth), ("feat", self.h_feat), (OUTPUT_NAME, self.h_out))}
        for name, buf in self.d.items():
            if not self.context.set_tensor_address(name, buf.ptr):
                raise EngineLoadError(f"engine has no I/O tensor {name!r}")
        self.stream = rt.stream
        self.execute()  # first run: TensorRT's lazy setup happens outside any graph capture
        self.stream.synchronize()

    def execute(self, i: int = 0, stream=None) -> None:
        """Device work of one frame (no copies): the enqueue the timing graph captures."""
        handle = int((stream or self.stream).handle)
        if not self.context.execute_async_v3(handle):
            raise RuntimeError("TensorRT execute_async_v3 failed")

    def run(self) -> np.ndarray:
        """Pinned inputs (already staged) -> device -> engine -> pinned output; returns a copy."""
        st = self.stream
        st.h2d(self.d["depth"], self.h_depth.ptr, self.h_depth.nbytes)
        st.h2d(self.d["feat"], self.h_feat.ptr, self.h_feat.nbytes)
        self.execute()
        st.d2h(self.h_out.ptr, self.d[OUTPUT_NAME], self.h_out.nbytes)
        st.synchronize()
        return self.h_out.array.copy()

    def time_us(self, reps: int = 50) -> float:
        return time_graph(self.stream, self.execute, reps=reps)["median_us"]

    def close(self) -> None:
        for b in (*self.d.values(), self.h_depth, self.h_feat, self.h_out):
            b.free()
        self.d = {}
        self.context = self.engine = self.runtime = None
