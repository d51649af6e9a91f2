"""Build a serialized engine for one scatter map, precision and target GPU.

Kernel choice: the same rule as the cuda backend (launch.choose_v3_kernel on the memory regime
of the *target's* L2), so an AOT build for an RTX 4090 gets the 4090's kernel even when built on
a machine without a GPU. The engine holds the launch as a calibration-free template
(plugin_config); the map arrays are engine inputs, so the build needs no scatter map at all.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass

from ...kernels import table as L
from ...kernels.schedule import V3Schedule
from ...regime import classify, working_set_bytes
from ...scatter_map import ScatterMap
from .engine_cache import EngineKey
from .network import add_map_profile, create_network, parse_onnx, populate
from .plugin_config import PluginConfig, config_for_v3
from .targets import Target, check_buildable, rtx_compute_capability

log = logging.getLogger(__name__)
WORKSPACE_LIMIT = 64 << 20


class EngineBuildError(RuntimeError):
    """TensorRT returned no engine; the message carries TensorRT's own error lines."""


class _CapturingLogger:
    """TensorRT logger that keeps error lines, so a failed build can say why."""

    def __new__(cls, trt):
        class Capture(trt.ILogger):
            def __init__(self):
                trt.ILogger.__init__(self)
                self.errors: list[str] = []

            def log(self, severity, msg):
                if severity <= trt.ILogger.Severity.ERROR:
                    self.errors.append(str(msg))
                    log.error("TensorRT: %s", msg)
                elif severity <= trt.ILogger.Severity.WARNING:
                    log.warning("TensorRT: %s", msg)

        return Capture()


@dataclass(frozen=True)
class BuiltEngine:
    data: bytes
    config: PluginConfig
    target: Target
    build_s: float


def kernel_identity() -> dict[str, str]:
    """What the engine's kernels are made from: the plugin/ sources (nvrtc_build's digest of them)
    and the NVRTC that compiles them. The plugin compiles at attach time, so an engine cached
    for other kernel sources or another NVRTC must never be served."""
    from ...device.nvrtc_build import cache_key, nvrtc_version

    return {"kernel_sources": cache_key("engine", ()), "nvrtc": "%d.%d" % nvrtc_version()}


def engine_key(lib, cfg: PluginConfig, target: Target, kernels: dict[str, str] | None = None) -> EngineKey:
    """Cache key of the engine ``build_engine`` makes for ``cfg`` (calibration-free: no map data).

    TensorRT-RTX builds ahead of time for a compute capability: the GPU name does not enter
    (the L2-dependent kernel choice is in the plugin digest), so engines prebuilt on a machine
    without a GPU (prebuild.py) are found by the node. Full TensorRT tunes on the live GPU: its
    name enters the key.
    """
    fields = {k: v.tobytes().hex() for k, v in cfg.to_fields().items()}
    plugin = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    kernels = kernel_identity() if kernels is None else kernels
    return EngineKey(rig_shape(cfg), target.arch, "aot" if lib.is_rtx else target.name, lib.tag, cfg.precision,
                     plugin, kernels["kernel_sources"], kernels["nvrtc"])


def rig_shape(cfg: PluginConfig) -> str:
    """The rig's shapes (what stays fixed across its calibrations): names an engine family."""
    return _shape_name(cfg.depth_shape, cfg.grid_shape, cfg.channels)


def rig_shape_of(smap: ScatterMap) -> str:
    return _shape_name(smap.depth_shape, smap.grid_shape, smap.channels)


def _shape_name(depth_shape, grid_shape, channels: int) -> str:
    n, d, h, w = depth_shape
    z, y, x = grid_shape
    return f"N{n}D{d}H{h}W{w}_Z{z}Y{y}X{x}_C{channels}"


def plugin_config_for(smap: ScatterMap, precision: str, target: Target, **launch_options
                      ) -> tuple[PluginConfig, V3Schedule]:
    """Plugin config + this calibration's schedule for ``target``: the regime comes from the target's L2."""
    regime = classify(working_set_bytes(smap, L.PRECISION_DTYPES[precision].input_name), target.l2_bytes)
    return config_for_v3(smap, precision, regime, **launch_options)


def fp8_flag_needed(lib, precision: str) -> bool:
    """Full TensorRT 10.x before 10.12 builds a plugin with FP8 I/O only with BuilderFlag.FP8,
    which a strongly typed network refuses: those versions get a weakly typed network + the flag.
    TensorRT 11 (no precision flags at all) and TensorRT-RTX stay strongly typed."""
    if lib.is_rtx or precision != "fp8":
        return False
    parts = (lib.version.split(".") + ["0", "0"])[:2]
    try:
        major, minor = int(parts[0]), int(parts[1])
    except ValueError:
        return False
    return major == 10 and minor < 12


def build_engine(lib, cfg: PluginConfig, target: Target, onnx_model: bytes | None = None) -> BuiltEngine:
    """Serialized engine bytes for ``cfg`` (AOT for ``target.arch`` on TensorRT-RTX; no GPU needed there).

    ``onnx_model``: a whole user network holding the BEVPool node (onnx_insert.insert_bevpool)
    instead of the one-layer network. The network is checked against ``cfg`` before building
    (engine_check.check_network): a wrong input, dtype, shape, profile or layer fails here, not
    on the vehicle.
    """
    from .engine_check import check_engine_fields, check_network

    check_buildable(lib, target.arch, cfg.precision)
    trt = lib.trt
    logger = _CapturingLogger(trt)
    builder = trt.Builder(logger)
    weak = fp8_flag_needed(lib, cfg.precision)
    network = create_network(lib, builder, strongly_typed=not weak)
    keep = populate(lib, network, cfg) if onnx_model is None else parse_onnx(lib, network, onnx_model)
    config = builder.create_builder_config()
    profile = add_map_profile(builder, config, cfg)
    check_network(lib, network, profile, cfg, embedded=onnx_model is not None)
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_LIMIT)
    if weak:
        config.set_flag(trt.BuilderFlag.FP8)
        config.set_flag(trt.BuilderFlag.FP16)  # the fp8 plugin's output is half
    if lib.is_rtx:  # ahead-of-time for the target, not for whatever GPU (if any) is here
        config.num_compute_capabilities = 1
        config.set_compute_capability(rtx_compute_capability(trt, target.arch), 0)
    t0 = time.perf_counter()
    data = builder.build_serialized_network(network, config)
    dt = time.perf_counter() - t0
    del keep
    if data is None:
        raise EngineBuildError(f"TensorRT ({lib.tag}) built no engine for {target.arch} {cfg.precision}: "
                               + ("; ".join(logger.errors) or "no error text"))
    log.info("TensorRT engine: %s %s %s kernel %s, %d bytes in %.2f s", lib.tag, target.arch,
             cfg.precision, cfg.plan.kernel, data.nbytes, dt)
    blob = bytes(memoryview(data))
    if lib.is_rtx:  # its plugin record layout is known: what the runtime will recreate is checked now
        check_engine_fields(lib, blob, cfg)
    return BuiltEngine(blob, cfg, target, dt)
