"""Run one deserialized engine: persistent buffers, one stream, the frame replayed as a CUDA graph.

Needs a GPU and a TensorRT runtime that accepts it (TensorRT-RTX refuses compute capability 9.0).
The stream, buffers and kernel module are the cuda backend's helpers (backends/cuda/driver.py,
runtime.py), so the plugin's kernels and the cuda backend's are the same NVRTC module.

Per frame no Python runs inside TensorRT: ``set_map`` (once per calibration) uploads the map
arrays into buffers allocated at the profile's bounds (fixed addresses), sets the input shapes,
runs the engine once eagerly (TensorRT calls the plugin's on_shape_change and first enqueue
outside any capture), then captures one frame (input copies, ``execute_async_v3``, output copy)
in a CUDA graph. ``run`` replays that graph: the plugin's Python enqueue ran only at capture.
Where the capture fails (a TensorRT that refuses capture), frames run eagerly, and ``mode`` says so.
"""
from __future__ import annotations

import logging

import numpy as np

from ..cuda.driver import CudaError, DeviceBuffer, Graph, PinnedBuffer
from ..cuda.timing import time_graph
from .network import OUTPUT_NAME
from .plugin import register_plugin
from .plugin_config import PluginConfig, check_shapes

log = logging.getLogger(__name__)
_HOST_INPUT = {"float16": np.float16, "float8_e4m3": np.uint8}  # uint8 = raw E4M3 codes


class EngineLoadError(RuntimeError):
    """TensorRT refused the serialized engine (wrong version/GPU, or corrupt); rebuild it."""


class EngineRunner:
    def __init__(self, lib, engine_bytes: bytes, cfg: PluginConfig, rt):
        from .engine_check import EngineCheckError, check_engine

        trt = lib.trt
        register_plugin(trt)  # deserialization looks the creator up in the registry
        self.cfg, self.rt = cfg, rt
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
        in_dt = _HOST_INPUT[cfg.input_dtype]
        self.h_depth = PinnedBuffer(cfg.depth_shape, in_dt)
        self.h_feat = PinnedBuffer(cfg.feat_shape, in_dt)
        self.h_out = PinnedBuffer(cfg.output_shape, np.dtype(cfg.output_dtype))
        self.d = {name: DeviceBuffer(h.nbytes) for name, h in
                  (("depth", self.h_depth), ("feat", self.h_feat), (OUTPUT_NAME, self.h_out))}
        for name in cfg.inputs[2:]:  # at the profile's max: a new calibration never moves a buffer
            self.d[name] = DeviceBuffer(int(np.prod(cfg.profile(name)[2])) * 4)
        for name, buf in self.d.items():
            if not self.context.set_tensor_address(name, buf.ptr):
                raise EngineLoadError(f"engine has no I/O tensor {name!r}")
        self.stream = rt.stream
        self.graph = None
        self.mode = "unbound"  # graph | eager once a map is set
        self.map_shapes: dict[str, tuple[int, ...]] = {}

    # --- per calibration ------------------------------------------------------------------------
    def set_map(self, arrays: dict[str, np.ndarray]) -> None:
        """A calibration's map inputs (plugin_config.map_inputs): upload, set shapes, recapture."""
        cfg = self.cfg
        arrays = {n: np.ascontiguousarray(arrays[n], np.int32) for n in cfg.inputs[2:]}
        check_shapes(cfg, [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in arrays.values())])
        self._drop_graph()
        for name, a in arrays.items():
            self.stream.h2d(self.d[name], a.ctypes.data, a.nbytes)
            if not self.context.set_input_shape(name, a.shape):
                raise RuntimeError(f"TensorRT refused shape {a.shape} for {name}")
        self.stream.synchronize()  # the arrays are the caller's: finish reading them now
        self.map_shapes = {n: a.shape for n, a in arrays.items()}
        self.execute()  # eager: on_shape_change and TensorRT's lazy setup happen outside a capture
        self.stream.synchronize()
        self.graph, self.mode = self._capture(), "graph"
        if self.graph is None:
            self.mode = "eager"

    def _capture(self):
        capturable = getattr(self.context, "is_stream_capturable", None)
        if capturable is not None and not capturable(int(self.stream.handle)):
            log.warning("TensorRT says its stream is not capturable: frames run eagerly (Python per frame)")
            return None
        try:
            return Graph(self.stream, self._frame)
        except (CudaError, RuntimeError) as e:
            log.warning("CUDA graph capture of the engine failed (%s): frames run eagerly", e)
            return None

    # --- per frame --------------------------------------------------------------------------
    def execute(self, i: int = 0, stream=None) -> None:
        """Device work of one frame (no copies): the enqueue the timing graph captures."""
        handle = int((stream or self.stream).handle)
        if not self.context.execute_async_v3(handle):
            raise RuntimeError("TensorRT execute_async_v3 failed")

    def _frame(self, stream) -> None:
        stream.h2d(self.d["depth"], self.h_depth.ptr, self.h_depth.nbytes)
        stream.h2d(self.d["feat"], self.h_feat.ptr, self.h_feat.nbytes)
        self.execute(stream=stream)
        stream.d2h(self.h_out.ptr, self.d[OUTPUT_NAME], self.h_out.nbytes)

    def run(self) -> np.ndarray:
        """Pinned inputs (already staged) -> device -> engine -> pinned output; returns a copy."""
        if self.mode == "unbound":
            raise RuntimeError("tensorrt runner: no map set (set_map first)")
        if self.graph is not None:
            self.graph.replay()
        else:
            self._frame(self.stream)
        self.stream.synchronize()
        return self.h_out.array.copy()

    def time_us(self, reps: int = 50) -> float:
        return time_graph(self.stream, self.execute, reps=reps)["median_us"]

    def _drop_graph(self) -> None:
        if self.graph is not None:
            self.graph.destroy()
        self.graph = None

    def close(self) -> None:
        self._drop_graph()
        for b in (*self.d.values(), self.h_depth, self.h_feat, self.h_out):
            b.free()
        self.d = {}
        self.context = self.engine = self.runtime = None
