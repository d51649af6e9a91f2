"""Copies and fills of a frame as kernels (plugin/bevpool_convert.cuh: bevconv_copy_bytes,
bevconv_fill_u32, bevconv_fill_bytes) instead of copy-engine and memset operations.

Why: a frame whose work is only kernels is one run on the SMs. On a GPU shared with another
process's networks without MPS, the GPU time-slices between the processes, and a frame that
alternates between the copy engine and the SMs waited a slice at each switch (measured on the
H200 beside an fp16 GEMM load: 2.5 ms of device time per set for 0.1 ms of work;
docs/gpu_sharing.md). Host memory takes part through its device mapping (PinnedBuffer or
HostRegistration with ``mapped``)."""
from __future__ import annotations

from ..cuda.driver import launch_args

_THREADS = 256


def _blocks(rt, units: int) -> int:
    return max(1, min(-(-units // _THREADS), rt.device.sm_count * 8))


def copy(rt, s, dst: int, src: int, nbytes: int) -> None:
    """``nbytes`` from device address ``src`` to ``dst`` (either may be mapped host memory)."""
    if nbytes:
        launch_args(rt.module, "bevconv_copy_bytes", (_blocks(rt, -(-nbytes // 16)), 1, 1), (_THREADS, 1, 1),
                    (("ptr", int(src)), ("ptr", int(dst)), ("i64", int(nbytes))), s)


def fill_u32(rt, s, dst: int, value: int, count: int) -> None:
    if count:
        launch_args(rt.module, "bevconv_fill_u32", (_blocks(rt, count), 1, 1), (_THREADS, 1, 1),
                    (("ptr", int(dst)), ("u32", int(value) & 0xFFFFFFFF), ("i64", int(count))), s)


def fill_bytes(rt, s, dst: int, value: int, nbytes: int) -> None:
    if nbytes:
        launch_args(rt.module, "bevconv_fill_bytes", (_blocks(rt, nbytes), 1, 1), (_THREADS, 1, 1),
                    (("ptr", int(dst)), ("u32", int(value) & 0xFF), ("i64", int(nbytes))), s)
