"""The BEVPool IPluginV3 (core + build + runtime capabilities) and its IPluginCreatorV3One.

Written once against the TensorRT Python plugin API; the classes are made per imported module
(``tensorrt`` or TensorRT-RTX) because their base classes live in that module.

* build phase: output [Z, Y, X, C]; formats: LINEAR only; depth/feat float16 (fp16) or FP8 E4M3
  (fp8); map arrays INT32 of any length within the profile; output float32 (fp16) or float16
  (fp8), as regime.OUTPUT_DTYPE says.
* runtime: ``attach_to_context`` loads the NVRTC-built kernel module (the cuda backend's,
  compiled and disk-cached by device/nvrtc_build.py); ``on_shape_change`` (once per
  calibration) binds the launch to the map inputs' lengths (plugin_config.bind_plan);
  ``enqueue`` binds TensorRT's device pointers to that plan's symbolic buffers and launches on
  TensorRT's stream through device/driver.launch. No allocation, no synchronisation, no
  host reads in enqueue, so the enqueue can be captured in a CUDA graph and replayed without Python.
"""
from __future__ import annotations

import logging
from functools import lru_cache

import numpy as np

from .plugin_config import (
    FIELDS,
    OUTPUT,
    PLUGIN_NAME,
    PLUGIN_NAMESPACE,
    PLUGIN_VERSION,
    PluginConfig,
    PluginConfigError,
    bind_plan,
    check_shapes,
)

log = logging.getLogger(__name__)

_OUT_ITEMSIZE = {"float32": 4, "float16": 2}
_registered: dict[int, object] = {}  # id(trt module) -> creator (kept alive: TensorRT holds a raw pointer)


class PluginRuntimeError(RuntimeError):
    """The plugin cannot run here (no kernel module, no GPU)."""


class _DevPtr:
    """A raw device pointer in the shape driver.launch expects (an object with ``.ptr``)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int):
        self.ptr = int(ptr)


class _StreamRef:
    __slots__ = ("handle",)

    def __init__(self, handle: int):
        self.handle = int(handle)


def default_kernel_module():
    """The NVRTC module of the cuda backend for the current CUDA context's device."""
    from cuda.bindings import driver as cu

    from ...device.runtime import get_runtime

    err, dev = cu.cuCtxGetDevice()
    ordinal = int(dev) if err == cu.CUresult.CUDA_SUCCESS else 0
    return get_runtime(ordinal).module


def trt_dtypes(trt) -> dict[str, object]:
    return {"float32": trt.DataType.FLOAT, "float16": trt.DataType.HALF,
            "float8_e4m3": trt.DataType.FP8, "int32": trt.DataType.INT32}


@lru_cache(maxsize=None)
def plugin_classes(trt):
    """(BEVPoolPlugin, BEVPoolPluginCreator) built on ``trt``'s base classes."""
    DT = trt_dtypes(trt)

    class BEVPoolPlugin(trt.IPluginV3, trt.IPluginV3OneCore, trt.IPluginV3OneBuild, trt.IPluginV3OneRuntime):
        kernel_loader = staticmethod(default_kernel_module)  # tests/embedders may replace it

        def __init__(self, cfg: PluginConfig):
            trt.IPluginV3.__init__(self)
            trt.IPluginV3OneCore.__init__(self)
            trt.IPluginV3OneBuild.__init__(self)
            trt.IPluginV3OneRuntime.__init__(self)
            # every attribute of a Python plugin must be set explicitly
            self.plugin_name = PLUGIN_NAME
            self.plugin_version = PLUGIN_VERSION
            self.plugin_namespace = PLUGIN_NAMESPACE
            self.num_outputs = 1
            self.cfg = cfg
            self.module = None
            self.plan = None if cfg.dynamic else cfg.plan  # bound to the map lengths in on_shape_change
            self._types = [DT[cfg.input_dtype]] * 2 + [DT["int32"]] * (len(cfg.inputs) - 2)
            self._out_type = DT[cfg.output_dtype]
            self._out_nbytes = int(np.prod(cfg.output_shape)) * _OUT_ITEMSIZE[cfg.output_dtype]

        # --- core ---------------------------------------------------------------------------
        def get_capability_interface(self, capability_type):
            return self  # one object implements core, build and runtime

        def clone(self):
            twin = BEVPoolPlugin(self.cfg)
            twin.module, twin.plan = self.module, self.plan
            for name in ("_launch", "_cu", "_check"):
                if hasattr(self, name):
                    setattr(twin, name, getattr(self, name))
            return twin

        # --- build --------------------------------------------------------------------------
        def get_output_data_types(self, input_types):
            return [self._out_type]

        def get_output_shapes(self, inputs, shape_inputs, expr_builder):
            out = trt.DimsExprs(4)
            for i, v in enumerate(self.cfg.output_shape):
                out[i] = expr_builder.constant(int(v))
            return [out]

        def supports_format_combination(self, pos, in_out, num_inputs):
            desc = in_out[pos].desc
            if desc.format != trt.TensorFormat.LINEAR:
                return False
            want = self._types[pos] if pos < num_inputs else self._out_type
            return desc.type == want

        def configure_plugin(self, inp, out):
            self._check_shapes([d.desc.dims for d in inp], [d.desc.dims for d in out], build=True)

        def get_workspace_size(self, inp, out):
            return 0

        def get_valid_tactics(self):
            return []  # the kernel is chosen by the launch description, not by tactics

        def set_tactic(self, tactic):
            pass

        # --- runtime ------------------------------------------------------------------------
        def on_shape_change(self, inp, out):
            # a new calibration (map lengths): the launch is re-bound here, never in enqueue
            self._check_shapes([d.dims for d in inp], [d.dims for d in out])
            self.plan = bind_plan(self.cfg, [d.dims for d in inp])

        def attach_to_context(self, context):
            # everything slow happens here, once per execution context, never in enqueue
            from ...device import driver

            twin = self.clone()
            if twin.module is None:
                twin.module = BEVPoolPlugin.kernel_loader()  # NVRTC compile or disk-cache hit
                if hasattr(twin.module, "function"):
                    twin.module.function(self.cfg.plan.kernel)  # cuModuleGetFunction now, not per frame
            twin._launch, twin._cu, twin._check = driver.launch, driver.api, driver.check
            return twin

        def enqueue(self, input_desc, output_desc, inputs, outputs, workspace, stream):
            if self.module is None or self.plan is None:
                raise PluginRuntimeError("BEVPool plugin: attach_to_context / on_shape_change not run")
            buffers = {name: _DevPtr(ptr) for name, ptr in zip(self.cfg.inputs, inputs)}
            buffers[OUTPUT] = _DevPtr(outputs[0])
            if self.cfg.plan.zero_output_first:  # V2-style plans: a memset is a stream op, graph-safe
                self._check(self.api().cuMemsetD8Async(int(outputs[0]), 0, self._out_nbytes, int(stream)),
                            "cuMemsetD8Async")
            # errors raise (CudaError): the Python enqueue API reports failure by exception, not a code
            self._launch(self.module, self.plan, buffers, _StreamRef(stream))

        def get_fields_to_serialize(self):
            # kept on self: TensorRT reads the field buffers after this call returns
            self._serialized = fields_to_collection(trt, self.cfg.to_fields())
            return self._serialized

        # --- helpers ------------------------------------------------------------------------
        def _check_shapes(self, in_dims, out_dims, build=False):
            check_shapes(self.cfg, in_dims, allow_unknown=build)
            if out_dims and tuple(int(v) for v in out_dims[0]) != tuple(self.cfg.output_shape):
                raise PluginConfigError(f"BEVPool plugin output {tuple(out_dims[0])} != {self.cfg.output_shape}")

    class BEVPoolPluginCreator(trt.IPluginCreatorV3One):
        def __init__(self):
            trt.IPluginCreatorV3One.__init__(self)
            self.name = PLUGIN_NAME
            self.plugin_namespace = PLUGIN_NAMESPACE
            self.plugin_version = PLUGIN_VERSION
            kinds = {"depth_shape": "i32", "grid_shape": "i32", "channels": "i32"}
            self.field_names = trt.PluginFieldCollection([
                trt.PluginField(f, np.array([]), trt.PluginFieldType.INT32 if kinds.get(f) == "i32"
                                else trt.PluginFieldType.CHAR) for f in FIELDS])

        def create_plugin(self, name, field_collection, phase):
            fields = {f.name: f.data for f in field_collection}
            try:
                cfg = PluginConfig.from_fields(fields)
            except PluginConfigError as e:
                log.error("BEVPool plugin %s: %s", name, e)
                raise
            return BEVPoolPlugin(cfg)

    return BEVPoolPlugin, BEVPoolPluginCreator


def fields_to_collection(trt, fields: dict[str, np.ndarray]):
    out = []
    for name, arr in fields.items():
        kind = trt.PluginFieldType.INT32 if arr.dtype == np.int32 else trt.PluginFieldType.CHAR
        out.append(trt.PluginField(name, np.ascontiguousarray(arr), kind))
    return trt.PluginFieldCollection(out)


def register_plugin(trt):
    """Register the creator with ``trt``'s plugin registry once per process; returns it."""
    key = id(trt)
    if key not in _registered:
        _, Creator = plugin_classes(trt)
        creator = Creator()
        registry = trt.get_plugin_registry()
        if not registry.register_creator(creator, PLUGIN_NAMESPACE):
            existing = registry.get_creator(PLUGIN_NAME, PLUGIN_VERSION, PLUGIN_NAMESPACE)
            if existing is None:
                raise PluginRuntimeError(f"could not register TensorRT plugin creator {PLUGIN_NAME}")
            creator = existing
        _registered[key] = creator
    return _registered[key]
