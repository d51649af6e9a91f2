"""CUDA-graph replay timing: the one way every number in the benchmark is measured.

A graph holds ``inner`` back-to-back launches of the per-frame work (cycling over the rotation
sets); one sample = device-event time of one graph replay / inner; the result is the median of
``reps`` samples after ``warmup`` replays. The event pair's fixed cost is spread over ``inner``
launches and appears equally in the empty-launch term of the floor.
"""
from __future__ import annotations

import numpy as np

from .driver import DeviceBuffer, EventTimer, Graph, Stream

DEFAULT_INNER = 32
DEFAULT_REPS = 100


def time_graph(stream: Stream, enqueue, inner: int = DEFAULT_INNER, reps: int = DEFAULT_REPS,
               warmup: int = 5) -> dict:
    """``enqueue(i, stream)`` records launch i; returns median/min/p90 microseconds per launch."""
    graph = Graph(stream, lambda s: [enqueue(i, s) for i in range(inner)])
    try:
        for _ in range(warmup):
            graph.replay()
        stream.synchronize()
        timer = EventTimer()
        samples = []
        for _ in range(reps):
            timer.record_start(stream)
            graph.replay()
            timer.record_end(stream)
            samples.append(timer.elapsed_ms() * 1000.0 / inner)
    finally:
        graph.destroy()
    s = np.asarray(samples)
    return {"median_us": float(np.median(s)), "min_us": float(s.min()),
            "p90_us": float(np.percentile(s, 90)), "samples": int(s.size), "inner": inner}


def d2d_bandwidth(stream: Stream, nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    a, b = DeviceBuffer(nbytes), DeviceBuffer(nbytes)
    try:
        stream.memset8(a, 1, nbytes)
        stream.d2d(b, a, nbytes)
        stream.synchronize()
        timer = EventTimer()
        times = []
        for _ in range(reps):
            timer.record_start(stream)
            stream.d2d(b, a, nbytes)
            timer.record_end(stream)
            times.append(timer.elapsed_ms() / 1000.0)
        return 2.0 * nbytes / float(np.median(times))
    finally:
        a.free()
        b.free()


def rotation_sets(set_bytes: int, l2_bytes: int, cap: int = 64) -> int:
    """How many input/output sets to cycle so one launch's data was evicted since its last use:
    enough sets to cover twice the L2; one when a single set already exceeds it."""
    if set_bytes <= 0 or set_bytes >= 2 * l2_bytes:
        return 1
    return int(min(cap, -(-2 * l2_bytes // set_bytes) + 1))
