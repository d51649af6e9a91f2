"""GPU-side state shared by the backends, the benchmark and the GPU tests.

``KernelRuntime``: device + stream + the NVRTC-built module (one per process and device).
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
    def __init__(self, ordinal: int = 0):
        self.device = Device(ordinal)
        self.stream = Stream()  # driver.default_stream_priority when the runtime is first made
        self.module = Module(get_kernel_image(self.device.arch))
        log.info("cuda runtime: %s (%s, %d SMs, L2 %.0f MiB)", self.device.name, self.device.arch,
                 self.device.sm_count, self.device.l2_bytes / 2**20)


@lru_cache(maxsize=None)
def get_runtime(ordinal: int = 0) -> KernelRuntime:
    return KernelRuntime(ordinal)


def regime_for(smap: ScatterMap, precision: str, l2_bytes: int) -> str:
    dtype = L.PRECISION_INPUT[precision]
    return classify(working_set_bytes(smap, dtype), l2_bytes)
