"""What the GPU backends share: the backend base (``GpuBackend``), the frame path (``frame``),
device inputs, kernel copies and the measured choices (``choices``). The backends built on them sit
beside ``cpu.py``: ``backends/cuda.py`` (kernels launched directly) and ``backends/tensorrt/``."""


def __getattr__(name):  # the backends need cuda-python: imported on first use, not with the package
    if name == "GpuBackend":
        from .base import GpuBackend

        return GpuBackend
    raise AttributeError(name)


__all__ = ["GpuBackend"]
