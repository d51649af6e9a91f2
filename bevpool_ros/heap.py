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
