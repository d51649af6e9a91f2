"""TensorRTBackend: prepare() loads or builds the engine for the map; pool() runs it.

Construction fails with BackendUnavailable (so create_backend falls back to cuda, then cpu)
when there is no TensorRT module, no GPU, or a GPU this TensorRT cannot run on (TensorRT-RTX
refuses compute capability 9.0), or fp8 is asked for below SM89.

Launch: with ``autotune`` (default, as in the cuda backend) the kernel/k_min/threads of the plan
baked into the engine are measured on this GPU by the cuda backend's tuner; otherwise the launch
description's defaults for the GPU's memory regime are used. An engine prebuilt with those
defaults (prebuild.py) is used as found, without tuning.

precision: fp16 | fp8 | auto. auto follows the cuda backend's rule (precision_select.decide):
FP8 only on SM89+, and only when its engine is measured faster than the FP16 engine AND its
output is within the documented FP8 tolerance of the FP64 reference. The choice is cached per
(GPU, map, TensorRT version).

FP8 scales: an engine's output scale is a build-time constant (like static Q/DQ scales), set by
the ``fp8_scales=(depth_scale, feat_scale)`` option. Raw E4M3 codes (uint8) are used as they come;
float inputs are quantized on the host with those scales (saturating at +-448).
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging

import numpy as np

from ..base import Backend, BackendUnavailable, NonFiniteOutput, all_finite, check_out
from ..staging import stage_fp16, stage_fp8
from ...scatter_map import ScatterMap
from .engine_cache import EngineCache
from .targets import Target, TargetError, check_runnable, fp8_supported
from .trt_import import TensorRTMissing, load_tensorrt

log = logging.getLogger(__name__)


class TensorRTBackend(Backend):
    name = "tensorrt"

    def __init__(self, precision: str = "fp16", device: int = 0, cache_dir=None, fp8_scales=(1.0, 1.0),
                 accumulate: str | None = None, kernel: str | None = None, k_min: int | None = None,
                 threads: int | None = None, autotune: bool = True, trt_module: str | None = None,
                 **_ignored):
        super().__init__(precision)
        if precision == "fp32":
            raise BackendUnavailable("tensorrt backend runs fp16, fp8 or auto (fp32 is the cpu backend's)")
        # GPU first: without one, importing TensorRT (~0.8 s for the RTX libraries) is wasted start-up
        self.rt = _gpu_runtime(int(device))
        try:
            self.lib = load_tensorrt(trt_module)
        except TensorRTMissing as e:
            raise BackendUnavailable(str(e)) from e
        _check_network_route(self.lib)
        dev = self.rt.device
        try:
            check_runnable(self.lib, dev.arch)
        except TargetError as e:
            raise BackendUnavailable(str(e)) from e
        if precision == "fp8" and not fp8_supported(dev.arch):
            raise BackendUnavailable(f"fp8 needs SM89+, {dev.name} is {dev.arch}")
        self.target = Target(dev.arch, int(dev.l2_bytes), dev.name)
        self.cache = EngineCache(cache_dir)
        self.fp8_scales = (float(fp8_scales[0]), float(fp8_scales[1]))
        # same knobs as the cuda backend; None = the launch description's default
        self.launch_options = {"acc": accumulate, "kernel": kernel, "k_min": k_min, "threads": threads}
        self.launch_options = {k: v for k, v in self.launch_options.items() if v is not None or k == "kernel"}
        self.autotune = autotune and kernel is None
        self.tuned: dict[str, tuple] = {}  # precision -> (kernel, k_min, threads) measured here
        self.runner = None
        self.auto_record: dict | None = None

    # --- calibration ------------------------------------------------------------------------
    def prepare(self, smap: ScatterMap) -> None:
        super().prepare(smap)
        self.close()
        if self.requested_precision == "auto":
            self.precision = self._auto_precision()
        else:
            self.precision = self.requested_precision
        if self.runner is None:
            self.runner = self._runner(self.precision)

    def _out_scale(self, precision: str) -> float:
        return 1.0 / (self.fp8_scales[0] * self.fp8_scales[1]) if precision == "fp8" else 1.0

    def _runner(self, precision: str):
        """Load the cached engine (or build it), deserialize it; a refused cached engine is rebuilt once."""
        from ..cuda.launch import V3_KERNELS
        from .builder import build_engine, engine_key, plugin_config_for
        from .runner import EngineLoadError, EngineRunner

        opts = {**self.launch_options, "out_scale": self._out_scale(precision)}
        if opts["kernel"] and V3_KERNELS[opts["kernel"]].precision != precision:
            opts["kernel"] = None  # an override names one precision's kernel (auto builds both)
        cfg, sched = plugin_config_for(self.smap, precision, self.target, **opts)
        key = engine_key(self.lib, self.smap, self.target, precision, cfg, sched)
        prebuilt = self.cache.path(key) is not None and self.cache.path(key).is_file()
        if self.autotune and not prebuilt:  # a prebuilt (untuned) engine wins over tuning
            kernel, k_min, threads = self._tuned_launch(precision)
            opts.update(kernel=kernel, k_min=k_min, threads=threads)
            cfg, sched = plugin_config_for(self.smap, precision, self.target, **opts)
            key = engine_key(self.lib, self.smap, self.target, precision, cfg, sched)
        build = lambda: build_engine(self.lib, self.smap, precision, self.target, **opts).data  # noqa: E731
        data, cached = self.cache.get_or_build(key, build)
        try:
            return EngineRunner(self.lib, data, cfg, self.rt)
        except EngineLoadError as e:
            if not cached:
                raise
            self.cache.invalidate(key, f"refused by TensorRT ({e})")
            data = build()
            self.cache.store(key, data)
            return EngineRunner(self.lib, data, cfg, self.rt)

    def _tuned_launch(self, precision: str) -> tuple[str, int, int]:
        """(kernel, k_min, threads) measured on this GPU with the cuda backend's tuner (cuda/autotune.py),
        cached per (GPU, map, precision). The engine then bakes that plan; an untuned engine (prebuild,
        autotune=False) uses the launch description's defaults instead."""
        from ..cuda.precision_select import load_choice, store_choice

        if precision in self.tuned:
            return self.tuned[precision]
        smap = self.smap
        key = f"tensorrt|{self.target.name}|{smap.key or 'unkeyed'}|C{smap.channels}|{_map_digest(smap)}|{precision}|launch"
        cached = load_choice(key)
        if cached and len(cached) == 3:
            choice = (str(cached[0]), int(cached[1]), int(cached[2]))
        else:
            choice = self._measure_launch(precision)
            store_choice(key, {"precision": list(choice)})
        self.tuned[precision] = choice
        log.info("tensorrt launch for %s: kernel %s, k_min %d, %d threads", precision, *choice)
        return choice

    def _measure_launch(self, precision: str) -> tuple[str, int, int]:
        from ..cuda.autotune import tune_v3
        from ..cuda.runtime import MapOnDevice

        md = MapOnDevice(self.rt, self.smap)
        try:
            choice, _ = tune_v3(md, precision)
        finally:
            for buf in md.arrays.buffers.values():
                buf.free()
        return (choice.kernel, choice.k_min, choice.threads)

    # --- per frame --------------------------------------------------------------------------
    def pool(self, depth: np.ndarray, feat: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        smap = self._require_map()
        r = self.runner
        if r is None:
            raise RuntimeError("tensorrt backend: closed; call prepare(scatter_map) again")
        if self.precision == "fp16":
            stage_fp16(smap, depth, feat, r.h_depth.array, r.h_feat.array)
        else:  # float inputs quantised with the engine's fixed scales; raw codes carry them
            stage_fp8(smap, depth, feat, r.h_depth.array, r.h_feat.array, self.fp8_scales)
        bev = r.run()
        if out is not None:  # until this backend runs on gpu_frame.GpuFrame: one host copy/cast
            check_out(smap, out)
            with np.errstate(over="ignore"):
                np.copyto(out, bev, casting="same_kind")
            bev = out
        if not all_finite(bev):
            raise NonFiniteOutput("tensorrt grid holds NaN/Inf")
        return bev

    # --- precision: auto ----------------------------------------------------------------------
    def _auto_precision(self) -> str:
        from ..cuda.precision_select import decide, fp8_within_tolerance, load_choice, store_choice
        from ...reference import pool_reference

        if not fp8_supported(self.target.arch):
            self.auto_record = {"precision": "fp16", "reason": f"no FP8 on {self.target.arch}"}
            return "fp16"
        smap = self.smap
        key = f"tensorrt|{self.lib.tag}|{self.target.name}|{smap.key or 'unkeyed'}|C{smap.channels}|{_map_digest(smap)}"
        cached = load_choice(key)
        if cached in ("fp16", "fp8"):
            log.info("precision auto (tensorrt): %s (cached for %s)", cached, key)
            return cached
        rng = np.random.default_rng(0)
        depth = rng.random(smap.depth_shape).astype(np.float32)
        feat = rng.uniform(-1.0, 1.0, smap.feat_shape).astype(np.float32)
        runners = {p: self._runner(p) for p in ("fp16", "fp8")}
        times = {p: r.time_us() for p, r in runners.items()}
        self.runner, self.precision = runners["fp8"], "fp8"
        stage_fp8(smap, depth, feat, self.runner.h_depth.array, self.runner.h_feat.array, self.fp8_scales)
        out8 = runners["fp8"].run()
        ref = pool_reference(depth, feat, smap)
        ok, err = fp8_within_tolerance(out8, ref, pool_reference(np.abs(depth), np.abs(feat), smap))
        choice = decide(times["fp16"], times["fp8"], ok)
        runners["fp16" if choice == "fp8" else "fp8"].close()
        self.runner = runners[choice]
        self.auto_record = {"precision": choice, "fp16_us": times["fp16"], "fp8_us": times["fp8"],
                            "fp8_max_abs_err": err, "fp8_within_tolerance": ok}
        log.info("precision auto (tensorrt): %s (fp16 %.2f us, fp8 %.2f us, fp8 max err %.4f, within tol %s)",
                 choice, times["fp16"], times["fp8"], err, ok)
        store_choice(key, self.auto_record)
        return choice

    # --- misc ---------------------------------------------------------------------------------
    def describe(self) -> dict:
        d = {"backend": self.name, "precision": self.precision, "device": self.target.name,
             "arch": self.target.arch, "l2_bytes": self.target.l2_bytes, "tensorrt": self.lib.tag,
             "engine_cache": self.cache.stats()}
        if self.runner is not None:
            plan = self.runner.cfg.plan
            d.update(kernel=plan.kernel, grid=list(plan.grid), block=list(plan.block),
                     input_dtype=self.runner.cfg.input_dtype, output_dtype=self.runner.cfg.output_dtype)
        if self.auto_record:
            d["auto"] = self.auto_record
        return d

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.runner = None


def _map_digest(smap: ScatterMap) -> str:
    return hashlib.sha256(b"".join(a.tobytes() for a in smap.arrays().values())).hexdigest()[:16]


def _check_network_route(lib) -> None:
    """BackendUnavailable unless this TensorRT can take our plugin into a network here."""
    if lib.has_add_plugin_v3:
        return
    if not lib.onnx_parser_safe:
        raise BackendUnavailable(f"{lib.tag}: its ONNX parser would abort on the plugin node in this "
                                 "process (TensorRT-RTX imported before bevpool_ros; see docs/tensorrt.md)")
    if importlib.util.find_spec("onnx") is None:
        raise BackendUnavailable(f"{lib.tag} needs the 'onnx' package to add the plugin (pip install onnx)")


def _gpu_runtime(ordinal: int):
    """The cuda backend's per-device runtime (context, stream, NVRTC module) or BackendUnavailable."""
    try:
        from ..cuda.runtime import get_runtime

        return get_runtime(ordinal)
    except BackendUnavailable:
        raise
    except (ImportError, OSError, RuntimeError) as e:  # CudaError, CompileError, missing libs
        raise BackendUnavailable(f"no usable GPU for TensorRT ({type(e).__name__}: {e})") from e
