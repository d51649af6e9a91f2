"""What the GPU backends share: the backend base (``GpuBackend``), the frame path (``frame``), the
measured choices (``choices``), and the cuda backend built on them (kernels launched directly)."""


def __getattr__(name):  # the backends need cuda-python: imported on first use, not with the package
    if name == "GpuBackend":
        from .base import GpuBackend

        return GpuBackend
    if name == "CudaBackend":
        from .cuda_backend import CudaBackend

        return CudaBackend
    raise AttributeError(name)


__all__ = ["GpuBackend", "CudaBackend"]
