"""Copies and fills of a frame as kernels (plugin/bevpool_convert.cuh: bevconv_copy_many,
bevconv_fill_u32) instead of copy-engine and memset operations.

Why: a frame whose work is only kernels is one run on the SMs. On a GPU shared with another
process's networks without MPS, the GPU time-slices between the processes, and a frame that
alternates between the copy engine and the SMs waited a slice at each switch (measured on the
H200 beside an fp16 GEMM load: 2.5 ms of device time per set for 0.1 ms of work;
docs/gpu_sharing.md). Host memory takes part through its device mapping (PinnedBuffer or
HostRegistration with ``mapped``)."""
from __future__ import annotations

import numpy as np

from ...device.driver import launch_args

_THREADS = 256
COPY_MANY = 16  # entries of one bevconv_copy_many launch (BEVCONV_COPY_MANY in the CUDA source)


def _blocks(rt, units: int) -> int:
    return max(1, min(-(-units // _THREADS), rt.device.sm_count * 8))


def copy(rt, s, dst: int, src: int, nbytes: int) -> None:
    """``nbytes`` from device address ``src`` to ``dst`` (either may be mapped host memory)."""
    copy_many(rt, s, [(dst, src, nbytes)])


def fill_u32(rt, s, dst: int, value: int, count: int) -> None:
    if count:
        launch_args(rt.module, "bevconv_fill_u32", (_blocks(rt, count), 1, 1), (_THREADS, 1, 1),
                    (("ptr", int(dst)), ("u32", int(value) & 0xFFFFFFFF), ("i64", int(count))), s)


def copy_table(entries) -> bytes:
    """The BevconvCopyTable struct of up to COPY_MANY (dst, src or None, nbytes) entries: the
    sources, then the destinations, then the byte counts (unused entries zero)."""
    table = np.zeros((3, COPY_MANY), dtype=np.uint64)
    for i, (dst, src, nbytes) in enumerate(entries):
        table[:, i] = (src or 0, dst, nbytes)
    return table.tobytes()


def copy_many(rt, s, entries) -> None:
    """Each (dst, src, nbytes) entry copied, zeros written where src is None: one launch per
    COPY_MANY entries (a frame's per-camera gather, its scratch words) instead of one per entry.
    The entries must not overlap."""
    entries = [e for e in entries if e[2]]
    for first in range(0, len(entries), COPY_MANY):
        chunk = entries[first:first + COPY_MANY]
        largest = max(nbytes for _, _, nbytes in chunk)
        # blocks per entry sized for the largest entry's 16-byte vectors, all entries together
        # within the cap of one elementwise launch (a single copy: that launch's own size)
        per_entry = max(1, min(-(-largest // (16 * _THREADS)), rt.device.sm_count * 8 // len(chunk)))
        launch_args(rt.module, "bevconv_copy_many", (per_entry, len(chunk), 1), (_THREADS, 1, 1),
                    (("bytes", copy_table(chunk)), ("i32", len(chunk))), s)
