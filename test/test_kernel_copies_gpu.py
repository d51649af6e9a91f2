"""The copy and fill kernels (backends/gpu/kernel_copies.py) on a real GPU: every byte they write
against numpy, into poisoned memory, with aligned and unaligned ends, zero entries, more entries
than one launch takes, and nothing written outside the destinations."""
from __future__ import annotations

import numpy as np
import pytest

from bevpool_ros.backends.gpu import kernel_copies

pytestmark = pytest.mark.gpu

POISON = 0xAB


@pytest.fixture(scope="module")
def rt():
    from bevpool_ros.device.runtime import get_runtime

    return get_runtime()


def run(rt, src_host: np.ndarray, dst_bytes: int, enqueue) -> np.ndarray:
    """``enqueue(stream, src_ptr, dst_ptr)`` over a device copy of ``src_host`` and a poisoned
    destination; the destination's bytes afterwards."""
    from bevpool_ros.device.driver import DeviceBuffer

    src, dst = DeviceBuffer(src_host.nbytes), DeviceBuffer(dst_bytes)
    out = np.full(dst_bytes, POISON, np.uint8)
    try:
        s = rt.stream
        s.h2d(src, src_host.ctypes.data, src_host.nbytes)
        s.h2d(dst, out.ctypes.data, dst_bytes)
        enqueue(s, src.ptr, dst.ptr)
        s.d2h(out.ctypes.data, dst, dst_bytes)
        s.synchronize()
    finally:
        src.free()
        dst.free()
    return out


@pytest.mark.parametrize("count", [1, 12, kernel_copies.COPY_MANY, kernel_copies.COPY_MANY + 5])
def test_copy_many_writes_each_entry_and_nothing_else(rt, count):
    rng = np.random.default_rng(count)
    src_host = rng.integers(0, 255, 1 << 20, dtype=np.uint8)
    expected = np.full(1 << 21, POISON, np.uint8)
    entries, dst_at = [], 0
    for i in range(count):
        nbytes = int(rng.choice([1, 15, 16, 17, 4096, 20768, int(rng.integers(1, 60_000))]))
        src_at = int(rng.integers(0, src_host.size - nbytes))
        if i % 3 == 0:  # some aligned on both ends (the vector path), the rest anywhere
            src_at -= src_at % 16
            dst_at += -dst_at % 16
        zero = i % 4 == 1
        entries.append((dst_at, None if zero else src_at, nbytes))
        expected[dst_at:dst_at + nbytes] = 0 if zero else src_host[src_at:src_at + nbytes]
        dst_at += nbytes + int(rng.integers(0, 40))  # gaps: must stay poisoned

    def enqueue(s, src, dst):
        kernel_copies.copy_many(rt, s, [(dst + d, None if o is None else src + o, n) for d, o, n in entries])

    np.testing.assert_array_equal(run(rt, src_host, expected.size, enqueue), expected)


def test_copy_and_fill_u32(rt):
    src_host = np.arange(4096, dtype=np.uint32).view(np.uint8)
    expected = np.full(8192, POISON, np.uint8)
    expected[3:3 + 1001] = src_host[5:5 + 1001]  # unaligned: the byte path
    expected[2048:2048 + 4000] = src_host[:4000]  # aligned: the vector path and a tail
    expected[7000:7000 + 4 * 7] = np.full(7, 0x01020304, np.uint32).view(np.uint8)

    def enqueue(s, src, dst):
        kernel_copies.copy(rt, s, dst + 3, src + 5, 1001)
        kernel_copies.copy(rt, s, dst + 2048, src, 4000)
        kernel_copies.fill_u32(rt, s, dst + 7000, 0x01020304, 7)
        kernel_copies.copy_many(rt, s, [(dst + 100, src, 0)])  # nothing to do: no launch, no write

    np.testing.assert_array_equal(run(rt, src_host, expected.size, enqueue), expected)
