"""CUDA backend: NVRTC-compiled kernels (plugin/), driven through cuda-python.

Importing this package needs no GPU; constructing CudaBackend does (BackendUnavailable otherwise).
"""
from .backend import CudaBackend

__all__ = ["CudaBackend"]
