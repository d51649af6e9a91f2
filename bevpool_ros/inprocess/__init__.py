"""In-process BEV pooling for callers that run their networks in the same process:
``BevPooler`` (pooler.py) takes device tensors (DLPack / ``__cuda_array_interface__``) or host
arrays and returns the grid on the device, ordered on the caller's stream (docs/inprocess.md)."""

from .pooler import BevPooler

__all__ = ["BevPooler"]
