"""glibc heap settings for a process that moves multi-megabyte messages (bevpool_node; a
BevFeature consumer may call it too).

Each 2.6 MB BevFeature publish or take allocates and frees payload-sized buffers (rclpy's C
message, the serialized copy, the Python array). glibc serves a large allocation with a fresh
``mmap`` (above its mmap threshold) or from the heap, and gives the heap's free top back to the
kernel once more than its trim threshold is free: either way the next buffer's pages are new and
fault on first touch. Page faults are expensive in a VM: on the H200 host ``serialize_message`` of
a 2.6 MB message took 3.1 ms with glibc's defaults and 0.8 ms with the settings below, a memcpy of
it 0.22 ms; the 2.6 MB hop between two processes 7.1 -> 3.3 ms (``bench/dds_hop.py``). With a
fixed mmap threshold of 32 MiB (glibc's largest) and a trim threshold of 256 MiB, freed buffers
stay mapped and are reused: the process keeps up to 256 MiB of freed memory instead of returning
it at once. ``BEVPOOL_HEAP_TUNING=0`` leaves glibc's defaults; ``MALLOC_*`` or ``GLIBC_TUNABLES``
in the environment are the user's choice and are left alone.
"""
from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # malloc.h
MMAP_THRESHOLD = 32 << 20                     # glibc's maximum on 64-bit
TRIM_THRESHOLD = 256 << 20
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")

state = "not asked"  # what keep_freed_memory did in this process (reported in /diagnostics)


def keep_freed_memory() -> str:
    """Apply the settings above once per process; returns (and remembers) what was done."""
    global state
    if os.environ.get("BEVPOOL_HEAP_TUNING") == "0":
        state = "glibc defaults (BEVPOOL_HEAP_TUNING=0)"
    elif any(k in os.environ for k in USER_SETTINGS):
        state = "the environment's (" + ", ".join(k for k in USER_SETTINGS if k in os.environ) + ")"
    else:
        try:
            mallopt = ctypes.CDLL(None).mallopt
        except (OSError, AttributeError):
            state = "unchanged (no mallopt: not glibc)"
            return state
        mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
        ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
        state = "freed buffers kept (mmap threshold 32 MiB, trim threshold 256 MiB)" if ok else \
            "unchanged (mallopt refused)"
    return state


class _MallInfo2(ctypes.Structure):  # malloc.h, glibc 2.33 and later
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _libc():
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


_LIBC = _libc()
_MALLINFO2 = getattr(_LIBC, "mallinfo2", None)
if _MALLINFO2 is not None:
    _MALLINFO2.restype = _MallInfo2


def resident_bytes() -> int | None:
    """This process's resident memory (VmRSS), from /proc/self/statm; None where there is none."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def usage() -> dict | None:
    """What malloc holds, in bytes: ``in_use`` (allocated, large mappings included; pages never
    written count here but not in the resident memory) and ``free`` (freed, kept in the heaps
    for reuse). None without glibc's mallinfo2."""
    if _MALLINFO2 is None:
        return None
    m = _MALLINFO2()
    return {"in_use": m.uordblks + m.hblkhd, "free": m.fordblks}

