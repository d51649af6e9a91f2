"""Build a serialized engine for one scatter map, precision and target GPU.

Kernel choice: the same rule as the cuda backend (launch.choose_v3_kernel on the memory regime
of the *target's* L2), so an AOT build for an RTX 4090 gets the 4090's kernel even when built on
a machine without a GPU. The plan comes from launch.plan_v3 and is baked into the engine.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass

from ...regime import classify, working_set_bytes
from ...scatter_map import ScatterMap
from ..cuda import launch as L
from ..cuda.schedule import V3Schedule
from .engine_cache import EngineKey
from .network import create_network, populate
from .plugin_config import PluginConfig, config_for_v3, constant_arrays
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


def engine_key(lib, smap: ScatterMap, target: Target, precision: str, cfg: PluginConfig,
               sched: V3Schedule) -> EngineKey:
    """Cache key of the engine ``build_engine`` makes for these arguments.

    TensorRT-RTX builds ahead of time for a compute capability: the GPU name does not enter
    (the L2-dependent kernel choice is in the plugin digest), so engines prebuilt on a machine
    without a GPU (prebuild.py) are found by the node. Full TensorRT tunes on the live GPU: its
    name enters the key.
    """
    fields = {k: v.tobytes().hex() for k, v in cfg.to_fields().items()}
    plugin = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    return EngineKey(smap.key or "unkeyed", sched.digest(), target.arch, "aot" if lib.is_rtx else target.name,
                     lib.tag, precision, plugin)


def plugin_config_for(smap: ScatterMap, precision: str, target: Target, **launch_options
                      ) -> tuple[PluginConfig, V3Schedule]:
    """Plugin config + schedule for ``target``: the regime comes from the target's L2."""
    regime = classify(working_set_bytes(smap, L.PRECISION_INPUT[precision]), target.l2_bytes)
    return config_for_v3(smap, precision, regime, **launch_options)


def build_engine(lib, smap: ScatterMap, precision: str, target: Target, **launch_options) -> BuiltEngine:
    """Serialized engine bytes (AOT for ``target.arch`` on TensorRT-RTX; no GPU needed there).

    launch_options (acc, out_scale, kernel, k_min, threads) go to plugin_config.v3_launch.
    """
    check_buildable(lib, target.arch, precision)
    smap = smap.validate()
    cfg, sched = plugin_config_for(smap, precision, target, **launch_options)
    trt = lib.trt
    logger = _CapturingLogger(trt)
    builder = trt.Builder(logger)
    network = create_network(lib, builder)
    keep = populate(lib, builder, network, cfg, constant_arrays(cfg, smap, sched))
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_LIMIT)
    if lib.is_rtx:  # ahead-of-time for the target, not for whatever GPU (if any) is here
        config.num_compute_capabilities = 1
        config.set_compute_capability(rtx_compute_capability(trt, target.arch), 0)
    t0 = time.perf_counter()
    data = builder.build_serialized_network(network, config)
    dt = time.perf_counter() - t0
    del keep
    if data is None:
        raise EngineBuildError(f"TensorRT ({lib.tag}) built no engine for {target.arch} {precision}: "
                               + ("; ".join(logger.errors) or "no error text"))
    log.info("TensorRT engine: %s %s %s kernel %s grid %s, %d bytes in %.2f s", lib.tag, target.arch,
             precision, cfg.plan.kernel, cfg.plan.grid, data.nbytes, dt)
    return BuiltEngine(bytes(memoryview(data)), cfg, target, dt)
