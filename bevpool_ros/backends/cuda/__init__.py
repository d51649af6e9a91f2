"""CUDA backend: NVRTC-compiled kernels (plugin/), driven through cuda-python.

Importing this package needs no GPU; constructing CudaBackend does (BackendUnavailable otherwise).
CudaBackend is imported on first use, so the shared core (backends/gpu_frame.py) can use the
driver wrappers here without an import cycle.
"""


def __getattr__(name):
    if name == "CudaBackend":
        from .backend import CudaBackend

        return CudaBackend
    raise AttributeError(name)


__all__ = ["CudaBackend"]
