"""TensorRTBackend: the shared GPU frame path with a TensorRT engine as the pooling step.

Everything around the pooling step is the shared GPU core (backends/gpu/: GpuBackend,
GpuFrame): per-camera pinned staging, one CUDA graph per frame (H2D, device conversion and
checks, the pooling step, epilogue, D2H), measured choices as typed records (backends/gpu/choices.py),
precision ``auto`` decided on whole frames. What this class adds:

* the pooling step is ``EngineRunner.enqueue`` (``execute_async_v3``), captured inside the frame
  graph: TensorRT calls the plugin's Python enqueue only at capture, never per frame;
* one engine per rig shape class: the scatter map (its V3 schedule) is an engine input, so a new
  calibration of the same rig (TF polled every second on a vehicle) uploads new arrays into the
  runner's bound buffers and recaptures: no rebuild, no deserialization, no re-tune. A new engine
  is needed only when the launch changes (another memory regime, so another kernel);
* the launch choice is tuned once per (GPU, rig shapes, precision, regime), not per calibration,
  with the cuda backend's tuner and record type; an engine prebuilt with the default launch
  (bevpool-trt-build) is used as found, without tuning.

Construction fails with BackendUnavailable (create_backend then falls back to cuda, then cpu)
without a GPU, without a TensorRT module, on a GPU this TensorRT cannot run on (TensorRT-RTX
refuses compute capability 9.0), or for fp8 below SM89.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import logging

import numpy as np

from ...errors import BackendUnavailable
from ...kernels.planning import FP8_KERNEL_OUT_SCALE, LaunchChoice
from ...kernels.table import PRECISION_DTYPES, V3_KERNELS
from ...regime import classify, working_set_bytes
from ...scatter_map import ScatterMap
from ..gpu.base import GpuBackend
from ..gpu.choices import choice_key
from .engine_cache import EngineCache
from .plugin_source import PluginSourceError, select_and_install
from .targets import Target, TargetError, check_runnable, fp8_supported
from .trt_import import TensorRTMissing, load_tensorrt

log = logging.getLogger(__name__)
# GpuBackend's own options
_GPU_OPTIONS = ("check_finite", "host_memory", "fp8_scales", "stream_priority", "choice_store")


class TensorRTBackend(GpuBackend):
    name = "tensorrt"

    def __init__(self, precision: str = "fp16", device: int = 0, cache_dir=None, accumulate: str | None = None,
                 kernel: str | None = None, k_min: int | None = None, threads: int | None = None,
                 autotune: bool = True, trt_module: str | None = None, trt_plugin: str = "auto",
                 trt_plugin_library: str | None = None, **options):
        if precision == "fp32":
            raise BackendUnavailable("tensorrt backend runs fp16, fp8 or auto (fp32 is the cpu backend's)")
        # GPU first: without one, importing TensorRT (~0.8 s for the RTX libraries) is wasted start-up
        try:
            super().__init__(precision, device, autotune=autotune and kernel is None,
                             **{k: options[k] for k in _GPU_OPTIONS if k in options})
        except BackendUnavailable:
            raise
        except (ImportError, OSError, RuntimeError) as e:  # CudaError, CompileError, missing libs
            raise BackendUnavailable(f"no usable GPU for TensorRT ({type(e).__name__}: {e})") from e
        self.launch_options = {"acc": accumulate, "kernel": kernel, "k_min": k_min, "threads": threads}
        try:
            self.lib = load_tensorrt(trt_module)
        except TensorRTMissing as e:
            raise BackendUnavailable(str(e)) from e
        _check_network_route(self.lib)
        try:  # before any engine is built or loaded: one plugin creator per process
            self.plugin_source = select_and_install(self.lib, trt_plugin, trt_plugin_library or None)
        except PluginSourceError as e:
            raise BackendUnavailable(str(e)) from e
        dev = self.rt.device
        try:
            check_runnable(self.lib, dev.arch)
        except TargetError as e:
            raise BackendUnavailable(str(e)) from e
        if precision == "fp8" and not fp8_supported(dev.arch):
            raise BackendUnavailable(f"fp8 needs SM89+, {dev.name} is {dev.arch}")
        self.target = Target(dev.arch, int(dev.l2_bytes), dev.name)
        self.cache = EngineCache(cache_dir)
        self.runners: dict[str, tuple] = {}  # precision -> (engine key, EngineRunner)
        self.engine_loads = self.calibration_updates = 0

    # --- calibration ------------------------------------------------------------------------
    def _fp8_runs(self) -> bool:
        return fp8_supported(self.target.arch)

    def _prepared(self) -> None:
        for p in [p for p in self.runners if p != self.precision]:  # auto measured both: keep one
            self.runners.pop(p)[1].close()
        log.info("tensorrt backend: %s, kernel %s, engine loads %d, calibration updates %d", self.precision,
                 self.plan.kernel, self.engine_loads, self.calibration_updates)

    def _frame_for(self, precision: str):
        """(GpuFrame with the engine as its pooling step, bound plan, launch choice) for the map."""
        from .plugin_config import bind_plan, map_inputs

        cfg, sched, key, choice = self._config(precision)
        held = self.runners.get(precision)
        if held is not None and held[0] == key:
            runner = held[1]
            self.calibration_updates += 1
        else:
            if held is not None:
                held[1].close()
            runner = self._load(key, cfg)
            self.runners[precision] = (key, runner)
        arrays = map_inputs(cfg, self.smap, sched)
        runner.set_map(arrays)
        frame = self._new_frame(precision, runner.enqueue)
        plan = bind_plan(cfg, [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in arrays.values())])
        return frame, plan, choice

    def _config(self, precision: str):
        """(plugin config, this calibration's schedule, engine key, launch choice) for the map."""
        from .builder import engine_key, plugin_config_for

        opts = {**self.launch_options, "out_scale": FP8_KERNEL_OUT_SCALE if precision == "fp8" else 1.0}
        if opts["kernel"] and V3_KERNELS[opts["kernel"]].precision != precision:
            opts["kernel"] = None  # an override names one precision's kernel (auto builds both)
        cfg, sched = plugin_config_for(self.smap, precision, self.target, **opts)
        key = engine_key(self.lib, cfg, self.target)
        prebuilt = self.cache.path(key) is not None and self.cache.path(key).is_file()
        if not self.autotune or prebuilt:  # a prebuilt (untuned) engine wins over tuning
            return cfg, sched, key, None
        choice = self._tuned_launch(precision)
        cfg, sched = plugin_config_for(self.smap, precision, self.target, choice=choice,
                                       **{k: v for k, v in opts.items() if k not in ("kernel", "k_min", "threads")})
        return cfg, sched, engine_key(self.lib, cfg, self.target), choice

    def _load(self, key, cfg):
        """Load the cached engine (or build it), deserialize it; a refused cached engine is rebuilt once."""
        from .builder import build_engine
        from .runner import EngineLoadError, EngineRunner

        build = lambda: build_engine(self.lib, cfg, self.target).data  # noqa: E731
        data, cached = self.cache.get_or_build(key, build)
        self.engine_loads += 1
        try:
            return EngineRunner(self.lib, data, cfg, self.rt)
        except EngineLoadError as e:
            if not cached:
                raise
            self.cache.invalidate(key, f"refused by TensorRT ({e})")
            data = build()
            self.cache.store(key, data)
            return EngineRunner(self.lib, data, cfg, self.rt)

    def _launch_key(self, precision: str) -> str:
        """Keyed by the rig's shape class instead of the map: a new calibration of the rig reuses
        the choice, hence the engine."""
        regime = classify(working_set_bytes(self.smap, PRECISION_DTYPES[precision].input_name), self.target.l2_bytes)
        return choice_key(LaunchChoice, backend=self.name, device=self.rt.device.name,
                          smap=shape_class(self.smap), precision=precision, extra=(regime,))

    def _measure_launch(self, precision: str) -> LaunchChoice:
        from ...device.autotune import tune_v3

        best, _ = tune_v3(self.rt, self.smap, precision)
        return LaunchChoice(best.kernel, best.k_min, best.threads, best.median_us)

    # --- measurement, description ---------------------------------------------------------------
    def kernel_time_us(self, reps: int = 100) -> float:
        """Graph-replay median of the engine alone (no copies)."""
        self._require_map()
        return self.runners[self.precision][1].time_us(reps)

    def describe(self) -> dict:
        d = super().describe()
        d.update(tensorrt=self.lib.tag, trt_plugin=self.plugin_source.describe(),
                 engine_cache=self.cache.stats(), engine_loads=self.engine_loads,
                 calibration_updates=self.calibration_updates)
        held = self.runners.get(self.precision)
        if self.plan is not None and held is not None:
            cfg = held[1].cfg
            d.update(kernel=self.plan.kernel, grid=list(self.plan.grid), block=list(self.plan.block),
                     launch_choice=list(dataclasses.astuple(self.launch_choice))[:3] if self.launch_choice else None,
                     input_dtype=cfg.input_dtype, output_dtype=cfg.output_dtype,
                     host_memory=getattr(self.frame, "host_memory", None), check_finite=self.check_finite)
        return d

    def close(self) -> None:
        self._release()
        for _, runner in self.runners.values():
            runner.close()
        self.runners = {}


def shape_class(smap: ScatterMap) -> ScatterMap:
    """The map with its calibration removed (no points, keyed by its shapes): what a launch choice
    or an engine of this rig depends on, as choices.choice_key takes it."""
    from .builder import rig_shape_of

    empty = np.zeros(0, np.int32)
    return dataclasses.replace(smap, ranks_depth=empty, ranks_feat=empty, ranks_bev=empty,
                               interval_starts=empty, interval_lengths=empty, key=rig_shape_of(smap))


def _check_network_route(lib) -> None:
    """BackendUnavailable unless this TensorRT can take our plugin into a network here."""
    if lib.has_add_plugin_v3:
        return
    if not lib.onnx_parser_safe:
        raise BackendUnavailable(f"{lib.tag}: its ONNX parser would abort on the plugin node in this "
                                 "process (TensorRT-RTX imported before bevpool_ros; see docs/tensorrt.md)")
    if importlib.util.find_spec("onnx") is None:
        raise BackendUnavailable(f"{lib.tag} needs the 'onnx' package to add the plugin (pip install onnx)")
