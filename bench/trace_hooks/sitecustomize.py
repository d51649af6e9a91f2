"""Diagnostics for latency investigations across processes (bench/latency.py starts three): every
Python process started with this folder on PYTHONPATH records, at exit,

- GCTRACE_DIR: its cyclic-GC pauses, $GCTRACE_DIR/gc_<pid>.json (per generation: count, p50, p99,
  max, total ms);
- POOLING_PROFILE_DIR: a cProfile of bevpool_node's pooling stage (``PoolingWorker.process``, in
  the pooling thread only), $POOLING_PROFILE_DIR/pooling_<pid>.txt (top functions by own time)
  and .prof; written by the process that pooled;
- TIMELINE_DIR: a timeline of the node process, $TIMELINE_DIR/timeline_<pid>.json: each pooled set
  (``PoolingWorker._process_guarded``: start, end, thread), each GC pause, each timer callback and
  each entity the executor took (subscription by topic, timer, guard condition, waitable), each
  CameraTensor callback and each published set's arrivals, as perf_counter seconds (CLOCK_MONOTONIC,
  the other processes' clock); for finding what the slow sets overlapped and, with
  ``bench/latency.py --split``, where a DDS set's time goes. Written by the process that pooled.

    GCTRACE_DIR=/tmp/gc POOLING_PROFILE_DIR=/tmp/prof PYTHONPATH=bench/trace_hooks:$PWD \\
        python bench/latency.py ...
"""
import atexit
import functools
import gc
import json
import os
import sys
import time

_GC_DIR = os.environ.get("GCTRACE_DIR")
_PROFILE_DIR = os.environ.get("POOLING_PROFILE_DIR")
_start = [0.0]
_pauses: dict[int, list[float]] = {}


def _on_gc(phase, info):
    if phase == "start":
        _start[0] = time.perf_counter()
    else:
        _pauses.setdefault(info["generation"], []).append((time.perf_counter() - _start[0]) * 1e3)


def _write_gc():
    def stats(ms):
        ms = sorted(ms)
        return {"n": len(ms), "p50_ms": ms[len(ms) // 2], "p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
                "max_ms": ms[-1], "total_ms": sum(ms), "over_1ms": sum(x > 1.0 for x in ms)}

    os.makedirs(_GC_DIR, exist_ok=True)
    with open(os.path.join(_GC_DIR, f"gc_{os.getpid()}.json"), "w") as f:
        json.dump({"argv": sys.argv[:4], "gc": {g: stats(v) for g, v in sorted(_pauses.items())}}, f)


def _profile_pooling():
    import cProfile
    import pstats

    from bevpool_ros.node import pooling

    profile, calls = cProfile.Profile(), [0]
    process = pooling.PoolingWorker.process

    def profiled(self, camera_set):
        calls[0] += 1
        profile.enable()
        try:
            return process(self, camera_set)
        finally:
            profile.disable()

    def write():
        if not calls[0]:
            return  # not the node, or it pooled nothing
        os.makedirs(_PROFILE_DIR, exist_ok=True)
        base = os.path.join(_PROFILE_DIR, f"pooling_{os.getpid()}")
        profile.dump_stats(base + ".prof")
        with open(base + ".txt", "w") as f:
            f.write(f"{calls[0]} sets pooled\n")
            pstats.Stats(profile, stream=f).sort_stats("tottime").print_stats(30)
            pstats.Stats(profile, stream=f).sort_stats("cumulative").print_stats(30)

    pooling.PoolingWorker.process = profiled
    atexit.register(write)


_TIMELINE_DIR = os.environ.get("TIMELINE_DIR")
_timeline: dict[str, list] = {"sets": [], "gc": [], "timers": [], "takes": [], "arrivals": [], "published": [],
                              "announced": []}


def _timed(kind: str, name, f):
    """``f`` timed into the timeline under ``name`` (or ``name(*args)``). ``wraps`` keeps f's
    signature visible: an executor passes TimerInfo only to timer callbacks that take one."""
    @functools.wraps(f)
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            _timeline[kind].append((t0, time.perf_counter(), name(*a) if callable(name) else name))
    return wrapper


def _record_input_side():
    """Per CameraTensor callback (start, end, camera/stream, stamp) and per published set (stamp,
    first and last input arrival, pooling start, published): bench/latency.py --split joins them
    with the publisher's and the subscriber's clocks (all CLOCK_MONOTONIC)."""
    from bevpool_ros.node import inputs, reporting

    on_tensor = inputs.Inputs.on_tensor

    def traced_on_tensor(self, msg, camera, stream):
        t0 = time.perf_counter()
        try:
            return on_tensor(self, msg, camera, stream)
        finally:
            stamp = int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)
            _timeline["arrivals"].append((t0, time.perf_counter(), f"{camera}/{stream}", stamp))

    inputs.Inputs.on_tensor = traced_on_tensor
    published = reporting.Report.published

    def traced_published(self, r, t_msg, t_pub, done, handoff_s=0.0):
        s = r.camera_set
        _timeline["published"].append((s.stamp_ns, s.first_arrival, s.last_arrival, r.started, t_pub, done))
        return published(self, r, t_msg, t_pub, done, handoff_s)

    reporting.Report.published = traced_published
    _record_grid_announcements()


def _record_grid_announcements():
    """When each grid's datagram went to the hand-off consumers (HandoffRing.announce: stamp,
    perf_counter after the send): bench/latency.py's consumer wake-up. The stamps are read from the
    bytes at exit, not on the path."""
    from bevpool_ros.handoff.producer import HandoffRing

    announce, sent = HandoffRing.announce, []

    def traced_announce(self, data):
        try:
            return announce(self, data)
        finally:
            sent.append((time.perf_counter(), data))

    def stamps():
        from bevpool_msgs.msg import BevHandoff
        from rclpy.serialization import deserialize_message

        for t, data in sent:
            m = deserialize_message(data, BevHandoff)
            _timeline["announced"].append((m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec, t))

    HandoffRing.announce = traced_announce
    _timeline["_finish"] = stamps


def _record_timeline():
    import threading

    import rclpy.executors
    import rclpy.node

    from bevpool_ros.node import pooling

    process = pooling.PoolingWorker._process_guarded

    def traced(self, camera_set):
        t0 = time.perf_counter()
        try:
            return process(self, camera_set)
        finally:
            _timeline["sets"].append((t0, time.perf_counter(), threading.current_thread().name))

    pooling.PoolingWorker._process_guarded = traced
    create_timer = rclpy.node.Node.create_timer

    def timer(self, period, callback, *a, **k):
        job = getattr(getattr(callback, "__self__", None), "job", callback)  # a HousekeepingTimer's
        name = getattr(job, "__qualname__", str(job))
        return create_timer(self, period, _timed("timers", name, callback), *a, **k)

    rclpy.node.Node.create_timer = timer
    for kind in ("_take_timer", "_take_guard_condition", "_take_waitable"):
        if hasattr(rclpy.executors.Executor, kind):
            setattr(rclpy.executors.Executor, kind,
                    _timed("takes", kind, getattr(rclpy.executors.Executor, kind)))
    # named by topic: which input's deserialisation it was
    rclpy.executors.Executor._take_subscription = _timed(
        "takes", lambda executor, sub: f"take {sub.topic_name}", rclpy.executors.Executor._take_subscription)
    _record_input_side()

    def gc_times(phase, info):
        if phase == "start":
            _timeline["_gc0"] = time.perf_counter()
        else:
            _timeline["gc"].append((_timeline.get("_gc0", 0.0), time.perf_counter(), info["generation"]))

    gc.callbacks.append(gc_times)

    def write():
        if not _timeline["sets"]:
            return  # not the node
        os.makedirs(_TIMELINE_DIR, exist_ok=True)
        _timeline.pop("_gc0", None)
        _timeline.pop("_finish", lambda: None)()
        with open(os.path.join(_TIMELINE_DIR, f"timeline_{os.getpid()}.json"), "w") as f:
            json.dump(_timeline, f)

    atexit.register(write)


if _TIMELINE_DIR:
    try:
        _record_timeline()
    except ImportError:  # bevpool_ros or rclpy not on the path of this process
        pass
if _GC_DIR:
    gc.callbacks.append(_on_gc)
    atexit.register(_write_gc)
if _PROFILE_DIR:
    try:
        _profile_pooling()
    except ImportError:  # bevpool_ros not on the path of this process
        pass
