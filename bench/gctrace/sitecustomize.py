"""Every Python process started with this folder on PYTHONPATH records its cyclic-GC pauses and
writes them at exit to $GCTRACE_DIR/gc_<pid>.json (per generation: count, p50, p99, max, total ms).
For latency investigations across processes (bench/latency.py starts three):
    GCTRACE_DIR=/tmp/gc PYTHONPATH=bench/gctrace:$PWD python bench/latency.py ...
"""
import atexit
import gc
import json
import os
import sys
import time

_OUT = os.environ.get("GCTRACE_DIR")
_start = [0.0]
_pauses: dict[int, list[float]] = {}


def _on_gc(phase, info):
    if phase == "start":
        _start[0] = time.perf_counter()
    else:
        _pauses.setdefault(info["generation"], []).append((time.perf_counter() - _start[0]) * 1e3)


def _write():
    def stats(ms):
        ms = sorted(ms)
        return {"n": len(ms), "p50_ms": ms[len(ms) // 2], "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
                "max_ms": ms[-1], "total_ms": sum(ms), "over_1ms": sum(x > 1.0 for x in ms)}

    os.makedirs(_OUT, exist_ok=True)
    with open(os.path.join(_OUT, f"gc_{os.getpid()}.json"), "w") as f:
        json.dump({"argv": sys.argv[:4], "gc": {g: stats(v) for g, v in sorted(_pauses.items())}}, f)


if _OUT:
    gc.callbacks.append(_on_gc)
    atexit.register(_write)
