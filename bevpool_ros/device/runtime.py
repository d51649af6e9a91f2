"""GPU-side state shared by the backends, the benchmark and the GPU tests.

``KernelRuntime``: device + the NVRTC-built module (one per process and device) + a stream of the
priority asked for (one per process, device and priority).
What runs on it, a plan with the device arrays it binds, is an operator (operator.py).
"""
from __future__ import annotations

import logging
from functools import lru_cache

from ..kernels import table as L
from ..regime import classify, working_set_bytes
from ..scatter_map import ScatterMap
from .driver import Device, Module, Stream
from .nvrtc_build import get_kernel_image

log = logging.getLogger(__name__)


class KernelRuntime:
    """A device, its loaded module and one stream. The device and module are made once per
    process and device, a stream once per priority: backends of another ``gpu.stream_priority``
    share the module and run on a stream of theirs."""

    def __init__(self, device: Device, module: Module, stream: Stream):
        self.device, self.module, self.stream = device, module, stream


@lru_cache(maxsize=None)
def _loaded(ordinal: int) -> tuple[Device, Module]:
    device = Device(ordinal)
    module = Module(get_kernel_image(device.arch))
    log.info("cuda runtime: %s (%s, %d SMs, L2 %.0f MiB)", device.name, device.arch, device.sm_count,
             device.l2_bytes / 2**20)
    return device, module


def get_runtime(ordinal: int = 0, stream_priority: str = "highest") -> KernelRuntime:
    """The runtime of GPU ``ordinal`` whose stream runs at ``stream_priority`` (highest | normal)."""
    return _runtime(int(ordinal), stream_priority)


@lru_cache(maxsize=None)
def _runtime(ordinal: int, stream_priority: str) -> KernelRuntime:
    device, module = _loaded(ordinal)
    device.make_current()
    return KernelRuntime(device, module, Stream(stream_priority))


def regime_for(smap: ScatterMap, precision: str, l2_bytes: int) -> str:
    dtype = L.PRECISION_DTYPES[precision].input_name
    return classify(working_set_bytes(smap, dtype), l2_bytes)
