"""Which CUstream a call runs on: the one the caller names, in whatever form its framework
has it, or the framework's current stream.

CUDA's special handles are kept as they are: 0 the legacy default stream (what PyTorch and CuPy
report for their default stream), 1 the same stream by its explicit name (CU_STREAM_LEGACY, what
``__cuda_array_interface__`` and DLPack must use, 0 being reserved there), 2 the per-thread
default stream.
"""

from __future__ import annotations

from ..errors import InputError

LEGACY, PER_THREAD = 1, 2


def stream_handle(stream) -> int:
    """The CUstream address of ``stream``: an int, a PyTorch / CuPy stream, a cuda.bindings
    CUstream, a bevpool driver Stream, or anything with ``__cuda_stream__``."""
    if isinstance(stream, bool):
        raise InputError(f"stream: expected a CUDA stream, got {stream!r}")
    if isinstance(stream, int):
        if stream < 0:
            raise InputError(f"stream: {stream} is not a CUstream address")
        return stream
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:  # the CUDA Python stream protocol: (version, address)
        return int(protocol()[1])
    for attribute in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        value = getattr(stream, attribute, None)
        if isinstance(value, int):
            return value
    handle = getattr(stream, "handle", None)  # driver.Stream
    for candidate in (handle, stream):
        try:
            return int(candidate)  # cuda.bindings CUstream converts to its address
        except (TypeError, ValueError):
            continue
    raise InputError(f"stream: cannot read a CUDA stream from {type(stream).__name__}")


def current_stream(tensor) -> int | None:
    """The current stream of ``tensor``'s framework (PyTorch, CuPy) on its device; None when the
    tensor comes from elsewhere. Nothing is imported that the caller did not import already."""
    found = framework_stream(tensor)
    return None if found is None else found[0]


def framework_stream(tensor) -> tuple[int, object] | None:
    """(CUstream, the object that owns it) of the current stream of ``tensor``'s framework, or
    None. The owner, not only the handle: a grid holds it so the stream outlives the grid. A
    CuPy stream is destroyed with its object; PyTorch's streams never are (pooled for the
    process; an ExternalStream owns nothing), so a PyTorch handle has no owner to hold."""
    module = type(tensor).__module__.split(".", 1)[0]
    if module == "torch":
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # no Stream object: ~us less
        if raw is not None and tensor.is_cuda:
            return int(raw(tensor.get_device())), None
        current = torch.cuda.current_stream(tensor.device)
        return stream_handle(current), current
    if module == "cupy":
        import cupy

        current = cupy.cuda.get_current_stream()
        return stream_handle(current), current
    return None


def same_stream(a: int | None, b: int | None) -> bool:
    """0 and 1 both name the legacy default stream; 2, the per-thread default stream, names a
    different stream in each thread, so it is never known to be the same."""
    if a is None or b is None or a == PER_THREAD or b == PER_THREAD:
        return False
    return a == b or {a, b} == {0, LEGACY}


def exported(handle: int) -> int:
    """The handle as the array protocols carry it (0 is reserved there: the legacy stream is 1)."""
    return LEGACY if handle == 0 else handle
