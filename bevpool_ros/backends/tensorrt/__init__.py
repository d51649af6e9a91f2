"""TensorRT backend: the BEVPool IPluginV3 in a one-layer engine (TensorRT or TensorRT-RTX).

Importing this package needs neither TensorRT nor a GPU; constructing TensorRTBackend needs
both (BackendUnavailable otherwise, so create_backend falls back to cuda, then cpu).
"""
from .backend import TensorRTBackend

__all__ = ["TensorRTBackend"]
