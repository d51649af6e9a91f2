"""The calling thread's Python name given to the OS (Linux: /proc/<pid>/task/<tid>/comm, 15 bytes),
so that per-thread CPU time (bench/latency.py), ``top -H`` and ``perf`` name the node's threads:
CPython names native threads itself only from 3.14. Elsewhere, or without libc, nothing happens."""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
import threading

PR_SET_NAME = 15
_libc = None


def name_this_thread() -> None:
    global _libc
    if not sys.platform.startswith("linux"):
        return
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.prctl(PR_SET_NAME, threading.current_thread().name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass
