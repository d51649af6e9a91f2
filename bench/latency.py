#!/usr/bin/env python3
"""End-to-end latency of BEV pooling: over ROS 2 (publisher, node and subscriber in three
processes) or in-process (BevPooler inside the caller's process).

    python bench/latency.py [--backend cpu] [--precision fp16] [--bev-dtype float32]
                            [--transport dds|handoff_out|handoff_both|inprocess]
                            [--rig nuscenes|wide_c256|F]
                            [--frames 1000] [--rate 30] [--rows FILE.json]
                            [--split] [--consumer-heap] [--param NAME=VALUE ...]
                            [--gpu-load none|gemm|conv [--gpu-load-in process|thread]] [--mps]
                            [--native auto|on|off] [--node-env NAME=VALUE ...] [--launch-profile]
                            [--profile-executor]

Per camera set (synthetic frames of the rig; default the shipped 6-camera nuScenes rig):
  e2e       last input message of the set published (publisher process) -> its grid received
            (subscriber process): a BevFeature decoded (dds), or the BevHandoff opened and its IPC
            event waited on (handoff_out; "handoff" is the same). handoff_both: the publisher
            hands its device tensors over too (CameraHandoffPublisher: ring copy + TensorHandoff;
            the clock starts when the last camera tensor's announcement is published) and the
            node reads them in place (input.handoff only). One clock: CLOCK_MONOTONIC is
            system-wide, so the two processes' timestamps compare directly. inprocess: pool call ->
            grid ready on the stream, timed on the GPU (bench/inprocess_latency.py; no ROS).
  node      the node's own view from /diagnostics: last input received -> BEV published
  stage     the pooling stage inside the node (payloads in -> BEV bytes ready): backend.pool()
            plus assembling the set, as /diagnostics reports it
  kernel    the pooling kernel alone (cuda: CUDA-graph replay median; cpu: backend.pool())
  split     (--split, dds) each set cut at the processes: the publisher's burst of 18 messages,
            last one handed over -> the node's callback of the set's last input, -> BEV published,
            -> received by the subscriber; the node's per-message take and callback
  hand-off stages (handoff_both; --native on|off: the hand-off core in the publisher and the
            subscriber, BEVPOOL_NATIVE, the node keeping its Python path): producer enqueue ->
            announcements sent (publish_set called -> its last datagram sent) and -> its ROS copies
            published; consumer read (the grid's announcement read off its socket -> on_grid, the
            grid's write waited for); with --split also the consumer's wake-up (the node's datagram
            sent -> read off the consumer's socket)
GPU shared with networks (bench/gpu_share.py): --gpu-load runs a load for the whole run, in
another process (another CUDA context) or, with --transport inprocess and --gpu-load-in thread, in
this process on a normal-priority stream; --mps starts a private MPS control daemon for the run's
processes and stops it after. Under a load the GPU-event figures of inprocess leave out the wait
for the GPU (both events wait alike): its row's host_wait (call -> grid ready seen by the host) is
the figure to quote, and the node's rows carry its own gpu_wait (submission -> done, minus its
device time) from /diagnostics.
Writes <out>.json and <out>.md (default bench/results/latency_<backend>), and with --rows appends
one row per configuration (backend, precision, input_dtype, output_dtype, transport, rig,
rate_hz, frames, received, e2e_p50_ms, e2e_p99_ms, stage_p50_ms, stage_p99_ms, kernel_us, ...)
to that JSON list.
A benchmark, not a timed test: numbers depend on the machine and on what else runs there.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import gpu_share  # noqa: E402  (bench/gpu_share.py: the loads and the MPS daemon)

from bevpool_ros.proc_stat import process_stat, thread_stats  # noqa: E402

RIG = ROOT / "config" / "rigs" / "nuscenes_bevdet_r50.yaml"
TRANSPORTS = ("dds", "handoff_out", "handoff_both", "inprocess")
HANDOFF_OUT = ("handoff_out", "handoff_both")  # the subscriber reads BevHandoff
DRAIN_S = 2.0
IDLE_S = 2.0  # the node's CPU time is sampled this long before the first set (its idle cost)
READY_TIMEOUT_S = 40.0  # node start-up (kernel compile / autotune on a cold cache) + discovery


# --- the two ROS roles, each in its own process ------------------------------------------------
def _spin_until(node, predicate, timeout: float) -> bool:
    import rclpy

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not predicate():
        rclpy.spin_once(node, timeout_sec=0.02)
    return bool(predicate())


def switch_interval(args) -> None:
    """The producer's and the consumer's GIL switch interval (--switch-interval-ms; the node sets
    its own, ros.process.GIL_SWITCH_INTERVAL_S): each has a ROS executor and a hand-off thread."""
    if args.switch_interval_ms > 0:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)


def role_publisher(args) -> int:
    """Publish ``frames`` camera sets at ``rate``; record when each set's last message went out."""
    import rclpy

    switch_interval(args)
    if args.transport == "handoff_both":
        return role_handoff_publisher(args)

    from bevpool_ros.demo.synthetic_publisher import SyntheticRigPublisher
    from bevpool_ros.rig_yaml import load_rig

    rclpy.init(args=[sys.argv[0]])
    pub = SyntheticRigPublisher(load_rig(args.rig), dtype=args.input_dtype)
    sent, first = [], []
    try:
        if not pub.wait_for_subscribers(60.0, spin=lambda t: rclpy.spin_once(pub, timeout_sec=t)):
            print("publisher: the node never subscribed", file=sys.stderr)
            return 1
        for i in range(min(args.cycle_frames, args.frames)):  # build every message before timing
            pub._messages(i)
        publish_frame = pub.publish_frame

        def timed_frame(*a, **k):  # when the set's first message went out (--split)
            t0 = time.monotonic_ns()
            stamp = publish_frame(*a, **k)
            first.append((stamp, t0))
            return stamp
        pub.publish_frame = timed_frame
        pub.start(args.rate, args.frames, on_frame=lambda i, stamp, t: sent.append((stamp, time.monotonic_ns())))
        _spin_until(pub, lambda: pub.done, args.frames / args.rate * 3 + 30)
    finally:
        Path(args.record).write_text(json.dumps({"sent": sent, "first": first}))
        pub.destroy_node()
        rclpy.try_shutdown()
    return 0


def role_handoff_publisher(args) -> int:
    """handoff_both: the camera tensors of each set handed over through the GPU ring
    (CameraHandoffPublisher, mode on), announced as TensorHandoff; the set's time is taken after
    the last announcement was published."""
    import rclpy

    from bevpool_ros.device.driver import DeviceCopy
    from bevpool_ros.handoff.camera_publisher import CameraHandoffPublisher, ring_for_rig
    from bevpool_ros.rig_yaml import load_rig
    from bevpool_ros.synthetic import SyntheticScene

    rclpy.init(args=[sys.argv[0]])
    node = rclpy.create_node("bevpool_latency_handoff_publisher")
    rig = load_rig(args.rig)
    slot, size = ring_for_rig(rig, np.dtype(args.input_dtype).itemsize)
    pub = CameraHandoffPublisher(node, rig, slot_bytes=slot, ring_size=size, mode="on")
    scene = SyntheticScene(rig, seed=0)
    frames = []  # per cycle frame: [(camera, stream, device tensor, layout)], uploaded once
    for i in range(min(args.cycle_frames, args.frames)):
        depth, feat = scene.frame(i)
        frames.append([(cam.name, stream, DeviceCopy(arr[n].astype(args.input_dtype)), layout)
                       for n, cam in enumerate(rig.cameras)
                       for stream, arr, layout in (("depth", depth, "DHW"), ("feat", feat, "HWC"))])
    sent, stages = [], []
    state = {"i": 0, "datagrams_sent": 0.0}
    ring = pub.producer.ring

    def timed(f):  # the instant a set's datagrams were sent: after the last call of either way
        def wrapper(*a, **k):
            try:
                return f(*a, **k)
            finally:
                state["datagrams_sent"] = time.perf_counter()
        return wrapper
    ring.announce = timed(ring.announce)  # the Python twin's per-tensor sends
    if ring.native is not None:
        ring.native.publish_set = timed(ring.native.publish_set)  # the core's one call per set

    def tick():
        i = state["i"]
        if i >= args.frames:
            timer.cancel()
            return
        stamp = time.time_ns()
        t0 = time.perf_counter()
        # the set's copies in one burst of GPU work, then its announcements (publish_set)
        pub.publish_set([(cam, stream, tensor, layout, 1.0) for cam, stream, tensor, layout in frames[i % len(frames)]],
                        stamp)
        t1 = time.perf_counter()
        sent.append((stamp, time.monotonic_ns()))
        stages.append(((state["datagrams_sent"] - t0) * 1e3, (t1 - t0) * 1e3))
        state["i"] = i + 1
    try:
        ready = _spin_until(node, lambda: all(p.get_subscription_count() > 0
                                              for p in pub.handoff_pubs.values()), 60.0)
        if not ready:
            print("publisher: the node never subscribed to the hand-off topics", file=sys.stderr)
            return 1
        timer = node.create_timer(1.0 / args.rate, tick)
        _spin_until(node, timer.is_canceled, args.frames / args.rate * 3 + 30)
    finally:
        Path(args.record).write_text(json.dumps({"sent": sent, "producer_stages_ms": stages,
                                                 "native": ring.native is not None}))
        pub.close()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def role_subscriber(args) -> int:
    """Receive grids (BevFeature or BevHandoff) and /diagnostics until the stop file appears."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.node import Node

    from bevpool_ros.io.bev_message import stamp_to_ns
    from bevpool_ros.io.tensor_codec import decode_any
    from bevpool_ros.ros.diagnostics import status_values
    from bevpool_ros.ros.qos import make_qos

    switch_interval(args)
    if args.consumer_heap:  # what docs/dds.md advises a BevFeature consumer (bevpool_ros/heap.py)
        from bevpool_ros.heap import keep_freed_memory

        keep_freed_memory()
    rclpy.init(args=[sys.argv[0]])
    node = Node("bevpool_latency_subscriber")
    received, diagnostics, state = [], [], {"overwritten": 0, "errors": 0, "last_error": ""}
    qos = make_qos("reliable", 10)
    grids = None
    if args.transport in HANDOFF_OUT:
        from bevpool_ros.handoff.bev_subscriber import BevHandoffSubscriber

        def on_grid(view, msg):  # the grid is usable: its write was waited for
            t = time.monotonic_ns()
            state["dtype"] = view.dtype.name
            if view.still_valid():
                received.append((stamp_to_ns(msg.header.stamp), t))
                state.setdefault("open_ms", []).append((time.perf_counter() - grids.last_arrival) * 1e3)
                state.setdefault("arrivals", []).append((stamp_to_ns(msg.header.stamp), grids.last_arrival))
            else:
                state["overwritten"] += 1
        grids = BevHandoffSubscriber(node, "bev/handoff", on_grid, qos)
        sub = grids.subscription
        reader_open = grids.reader.open

        def timed_open(msg, wait=True):  # splits the subscriber's share: before open, open + wait
            t0 = time.perf_counter()
            try:
                return reader_open(msg, wait=wait)
            finally:
                state.setdefault("before_open_ms", []).append((t0 - grids.last_arrival) * 1e3)
                state.setdefault("open_call_ms", []).append((time.perf_counter() - t0) * 1e3)
        grids.reader.open = timed_open
        templates = grids.links.templates  # the datagram's reading (cdr_template.TemplateReader)
        deserialize = templates.deserialize

        def timed_deserialize(data):  # the datagram's share of "before open"
            t0 = time.perf_counter()
            try:
                return deserialize(data)
            finally:
                state.setdefault("deserialize_ms", []).append((time.perf_counter() - t0) * 1e3)
        templates.deserialize = timed_deserialize
    else:
        from bevpool_msgs.msg import BevFeature

        def on_grid(msg):
            decode_any(msg.tensor)  # what any consumer does: a view of the bytes, checked
            received.append((stamp_to_ns(msg.header.stamp), time.monotonic_ns()))
        sub = node.create_subscription(BevFeature, "bev/features", on_grid, qos)
    node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: diagnostics.append(
        (time.monotonic_ns(), status_values(m))), 10)
    stop = Path(args.record + ".stop")
    try:
        if not _spin_until(node, lambda: sub.get_publisher_count() > 0, READY_TIMEOUT_S + 5):
            print("subscriber: no grid publisher appeared", file=sys.stderr)
            return 1
        Path(args.record + ".ready").touch()
        _spin_until(node, stop.exists, 3600.0)
        asked = time.monotonic_ns()  # one more /diagnostics, so its statistics cover the whole run
        _spin_until(node, lambda: diagnostics and diagnostics[-1][0] > asked, 10.0)
    finally:
        if grids is not None:
            state.update(overwritten=state["overwritten"] + grids.overwritten, errors=grids.errors,
                         last_error=grids.last_error, first_by=dict(grids.links.first_by),
                         signal_lost=grids.links.lost, filter_error=grids.links.filter_error,
                         ros_copies=grids.links.ros_copies, filtered_at_end=grids.links.filtered,
                         native=grids.links.native)
            grids.close()  # no delivery while the process goes down
        # the last status covers the whole run; one from its middle shows what held while sets flowed
        # (a producer gone at the end closes its links and lifts the content filters)
        Path(args.record).write_text(json.dumps({"received": received, **state,
                                                 "diagnostics": diagnostics[-1][1] if diagnostics else {},
                                                 "diagnostics_mid": diagnostics[len(diagnostics) // 2][1]
                                                 if diagnostics else {},
                                                 "drops_over_time": drops_over_time(diagnostics)}))
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


def name_values(items: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` arguments as a dict."""
    return dict(item.partition("=")[::2] for item in items)


def drops_over_time(diagnostics: list) -> list:
    """When the node's drop counters grew: [seconds since its first status, {counter: growth}] for
    each status that saw some (drops at the start, e.g. while templates are learnt, differ in kind from
    drops spread over a run)."""
    out, last = [], {}
    for t, values in diagnostics:
        now = {k: int(v) for k, v in values.items() if k.startswith(("dropped_", "sync_")) and str(v).isdigit()}
        grew = {k: v - last.get(k, 0) for k, v in now.items() if v > last.get(k, 0)}
        if grew:
            out.append([round((t - diagnostics[0][0]) / 1e9, 2), grew])
        last = now
    return out


# --- orchestration -------------------------------------------------------------------------------
def workload_yaml(name: str) -> str:
    """The shipped rig's YAML with a workload's overrides (bevpool_ros.workloads) applied."""
    import yaml

    from bevpool_ros.workloads import RIG_WORKLOADS

    d = yaml.safe_load(RIG.read_text())
    d["name"] = name
    for key, value in RIG_WORKLOADS[name][1].items():
        if key in ("input_width", "input_height", "resize"):
            d["input"][key.replace("input_", "")] = value
        elif key == "crop_top":
            d["input"]["crop"][1] = value
        elif key == "depth_step":
            d["depth_bins"]["step"] = value
        elif key in ("x", "y", "z"):
            d["bev_grid"][key] = [value.lower, value.upper, value.step]
        else:
            d[key] = value
    return yaml.safe_dump(d, sort_keys=False)


def resolve_rig(name: str) -> Path:
    """A rig YAML: the file given, a rig of config/rigs by name, or a benchmark workload of the
    shipped rig (bevpool_ros.workloads, e.g. wide_c256) written to a temporary YAML for the node."""
    from bevpool_ros.rig_yaml import load_rig
    from bevpool_ros.workloads import RIG_WORKLOADS, workload_rig

    path = Path(name)
    if path.is_file():
        return path.resolve()
    shipped = ROOT / "config" / "rigs" / f"{name}.yaml"
    if shipped.is_file():
        return shipped
    if name in ("nuscenes", "canonical"):
        return RIG
    if name in RIG_WORKLOADS:
        out = Path(tempfile.mkdtemp(prefix="bevpool_rig_")) / f"{name}.yaml"
        out.write_text(workload_yaml(name))
        if load_rig(out) != workload_rig(name):
            raise SystemExit(f"--rig {name}: the YAML does not reproduce the workload's rig")
        return out
    raise SystemExit(f"--rig {name}: not a file, a rig of config/rigs, nor one of "
                     f"{sorted(RIG_WORKLOADS)}")


def rig_label(path) -> str:
    from bevpool_ros.rig_yaml import load_rig

    return load_rig(path).name


def kernel_only(backend_name: str, precision: str, rig_path, frames: int = 50) -> dict:
    """The kernel alone on the synthetic inputs: the floor the node's latency sits on."""
    from bevpool_ros.backends import create_backend
    from bevpool_ros.rig_yaml import load_rig
    from bevpool_ros.scatter_map import build_scatter_map
    from bevpool_ros.synthetic import SyntheticScene

    rig = load_rig(rig_path)
    backend = create_backend(backend_name, precision)
    backend.prepare(build_scatter_map(rig))
    depth, feat = SyntheticScene(rig).frame(0)
    backend.pool(depth, feat)
    times = []
    for _ in range(frames):
        t0 = time.perf_counter()
        backend.pool(depth, feat)
        times.append((time.perf_counter() - t0) * 1e3)
    kernel_us = backend.kernel_time_us() if hasattr(backend, "kernel_time_us") else float(np.median(times)) * 1e3
    backend.close()
    return {"backend": backend.name, "pool_p50_ms": float(np.percentile(times, 50)),
            "pool_p99_ms": float(np.percentile(times, 99)), "kernel_us": float(kernel_us), "frames": frames}


def machine() -> dict:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_avg_at_start": os.getloadavg()}


def _child(role: str, args, record: str, log) -> subprocess.Popen:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", role, "--record", record,
           "--frames", str(args.frames), "--rate", str(args.rate), "--transport", args.transport,
           "--input-dtype", args.input_dtype, "--rig", str(args.rig),
           "--switch-interval-ms", str(args.switch_interval_ms)] + (["--consumer-heap"] if args.consumer_heap else [])
    env = dict(os.environ, PYTHONUNBUFFERED="1", BEVPOOL_NATIVE=args.native)  # the hand-off core: on, off, auto
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def _wait_file(path: Path, procs, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        if any(p.poll() is not None for p in procs):
            return path.exists()
        time.sleep(0.05)
    return False


def _stop(proc: subprocess.Popen, timeout: float = 20.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return proc.returncode


def run_pipeline(args) -> dict:
    from bevpool_ros.demo.session import isolate, ros_param_args

    isolate()
    params = {"rig_file": str(args.rig), "backend": args.backend, "precision": args.precision,
              "output.bev_dtype": args.bev_dtype, "output.publish_image": False, "diagnostics.period_s": 0.5,
              "diagnostics.latency_window": min(100000, args.frames + 10),
              "output.gpu_handoff": args.transport in HANDOFF_OUT,
              "input.handoff": "only" if args.transport == "handoff_both" else "none"}
    params.update(name_values(args.param))  # --param executor=single_threaded ...: node parameters (strings)
    work = Path(tempfile.mkdtemp(prefix="bevpool_latency_"))
    log = open(work / "processes.log", "w+")
    node_env = dict(os.environ, PYTHONUNBUFFERED="1", BEVPOOL_NATIVE=args.native)  # its set loop too
    node_env.update(name_values(args.node_env))  # --node-env BEVPOOL_LAUNCH_WAIT=prewait: an experiment's switch
    if args.profile_executor:  # ros/process.py: the spinning thread under cProfile, its statistics at exit
        node_env["BEVPOOL_PROFILE_EXECUTOR"] = str(work / "executor.prof")
    if args.launch_profile:  # handoff/native/launcher.cpp: its launches' phases, rewritten every 50
        node_env["BEVPOOL_LAUNCH_PROFILE"] = str(work / "launch_profile.json")
    if args.split:  # the node's timeline (bench/trace_hooks): its arrivals and publishes per set
        node_env.update(TIMELINE_DIR=str(work / "timeline"), PYTHONPATH=os.pathsep.join(
            [str(ROOT / "bench" / "trace_hooks"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    node = subprocess.Popen([sys.executable, "-m", "bevpool_ros.node.main", "--ros-args", *ros_param_args(params)],
                            stdout=log, stderr=subprocess.STDOUT, env=node_env)
    sub = _child("subscriber", args, str(work / "sub.json"), log)
    pub = None
    try:
        if not _wait_file(work / "sub.json.ready", (node, sub), READY_TIMEOUT_S):
            log.flush()
            log.seek(0)
            print(log.read()[-4000:], file=sys.stderr)
            raise SystemExit(f"no {args.transport} grid publisher reached the subscriber "
                             f"in {READY_TIMEOUT_S:g} s (node log above)")
        with CpuTrace(node.pid) as idle:  # the node up, no set yet: its timers, executor, watchdogs
            time.sleep(IDLE_S)
        with CpuTrace(node.pid) as trace:  # from the publisher's start to the drain's end
            pub = _child("publisher", args, str(work / "pub.json"), log)
            pub.wait(args.frames / args.rate * 3 + 120)
            time.sleep(DRAIN_S)  # grids still in flight reach the subscriber
        (work / "sub.json.stop").touch()
        sub.wait(30)
    finally:
        for p in (pub, sub):
            if p is not None:
                _stop(p)
        node_rc = _stop(node)
        log.flush()
        log.seek(0)
        log_tail = log.read()[-4000:]
        log.close()
    pubrec = json.loads((work / "pub.json").read_text()) if (work / "pub.json").exists() else {"sent": []}
    subrec = json.loads((work / "sub.json").read_text()) if (work / "sub.json").exists() else {"received": []}
    timelines = sorted((work / "timeline").glob("timeline_*.json")) if args.split else []
    return {"sent": dict(pubrec["sent"]), "first": dict(pubrec.get("first", [])), "sub": subrec, "pub": pubrec,
            "node_rc": node_rc, "log_tail": log_tail,
            **dict(zip(("node_cpu_s", "node_thread_cpu_s"), trace.whole_run() or (None, {}))),
            "node_cpu_trace": trace.samples, "node_idle_cpu": idle_cpu(idle.samples),
            "timeline": json.loads(timelines[-1].read_text()) if timelines else None,
            "executor_profile": executor_profile(work / "executor.prof"),
            "launch_profile": json.loads((work / "launch_profile.json").read_text())
            if (work / "launch_profile.json").exists() else None}


def executor_profile(path: Path, top: int = 12) -> list[dict]:
    """The node's executor thread by function (cProfile, thread CPU time): the ``top`` by own time, in s."""
    if not path.exists():
        return []
    import pstats

    stats = pstats.Stats(str(path)).stats
    rows = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    return [{"function": f"{Path(file).name}:{line}({name})", "calls": calls, "own_s": own, "cumulative_s": cum}
            for (file, line, name), (_, calls, own, cum, _) in rows]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time process ``pid`` used so far, in seconds; None: gone."""
    stat = process_stat(pid)
    return stat.cpu_s if stat is not None else None


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """User + system CPU time of each of process ``pid``'s threads so far, summed by thread name
    (rclpy's, DDS's and the node's threads are named), in seconds."""
    out: dict[str, float] = {}
    for stat in thread_stats(pid):
        out[stat.name] = out.get(stat.name, 0.0) + stat.cpu_s
    return out


class CpuTrace:
    """The node's CPU time sampled every ``period_s`` by a thread of the bench (reading /proc costs
    the bench, not the node): ``samples`` [(CLOCK_MONOTONIC ns, process s, {thread name: s})], the
    clock the publisher stamps its sends with, so a window of sets can be cut out of it."""

    def __init__(self, pid: int, period_s: float = 0.2):
        import threading

        self.pid, self.period_s, self.samples = pid, period_s, []
        self.started = self.ended = False  # the node was read at the trace's start, at its end
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-trace", daemon=True)

    def sample(self) -> bool:
        cpu = cpu_seconds(self.pid)
        if cpu is not None:
            self.samples.append((time.monotonic_ns(), cpu, thread_cpu_seconds(self.pid)))
        return cpu is not None

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def __enter__(self) -> "CpuTrace":
        self.started = self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self.ended = self.sample()

    def whole_run(self) -> tuple[float, dict] | None:
        """cpu_between the first and the last sample; None unless the node was there at both ends."""
        return cpu_between(self.samples[0], self.samples[-1]) if self.started and self.ended else None


def cpu_between(a, b) -> tuple[float, dict[str, float]]:
    """The node's CPU seconds from sample ``a`` to ``b`` (CpuTrace): overall, and by thread (those that ran)."""
    by_thread = {name: v - a[2].get(name, 0.0) for name, v in b[2].items() if v - a[2].get(name, 0.0) > 0}
    return b[1] - a[1], by_thread


def _top_threads(by_thread: dict, per: float, digits: int) -> dict:
    return {k: round(v * 1e3 / per, digits) for k, v in sorted(by_thread.items(), key=lambda kv: -kv[1])[:8]}


def steady_cpu_per_set(samples: list, sent_ns, warmup: int) -> dict | None:
    """The node's CPU time per set while sets flow (ms): from the first sample after the publisher
    sent its set ``warmup`` to the last sample before it sent its last, over the sets it sent in
    between; the node's start-up on the first sets (rings mapped, graphs captured, templates
    learnt) is left out, and so is the drain. None when the run is too short for two samples."""
    sent = sorted(sent_ns)
    if len(sent) <= warmup + 1:
        return None
    inside = [s for s in samples if sent[warmup] <= s[0] <= sent[-1]]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    sets = sum(1 for t in sent if a[0] < t <= b[0])
    if not sets:
        return None
    cpu, by_thread = cpu_between(a, b)
    return {"ms_per_set": cpu * 1e3 / sets, "sets": sets, "seconds": (b[0] - a[0]) * 1e-9,
            "by_thread": _top_threads(by_thread, sets, 3)}


def idle_cpu(samples: list) -> dict | None:
    """The node's CPU time per second (ms) over ``samples`` taken while no set came (its timers,
    executor and watchdogs alone), overall and by thread."""
    if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
        return None
    seconds = (samples[-1][0] - samples[0][0]) * 1e-9
    cpu, by_thread = cpu_between(samples[0], samples[-1])
    return {"ms_per_s": cpu * 1e3 / seconds, "seconds": seconds, "by_thread": _top_threads(by_thread, seconds, 2)}


def node_cpu_per_set(run: dict, received: int) -> float | None:
    """The node's CPU time (user + sys) per received set, in ms, over the publisher's run and the
    drain: everything the node did meanwhile (its timers and executor too), so an upper bound."""
    cpu = run.get("node_cpu_s")
    return None if cpu is None or not received else cpu * 1e3 / received


def split_sets(run: dict, measured) -> dict:
    """--split: each set's time cut at the processes' boundaries (one CLOCK_MONOTONIC), in ms:
    burst (publisher: first message handed to DDS -> last), to_node (last handed over -> the node's
    callback of the set's last input began), node (-> the BEV's publish() called), to_consumer (the
    publish call, the hop, received and decoded by the subscriber); plus the node's per-message take
    (deserialisation) and callback. The cut is where publish() starts, not where it returns: a
    SYNCHRONOUS publish may deliver before it returns to a thread that lost its core."""
    tl = run["timeline"]
    if not tl:
        return {}
    sent, first = run["sent"], run["first"]
    received = dict(run["sub"]["received"])
    parts: dict[str, list] = {k: [] for k in ("burst", "to_node", "node", "to_consumer")}
    for stamp, _first_arrival, last_arrival, _started, t_pub, _done in tl["published"]:
        if stamp not in measured or stamp not in received or stamp not in first:
            continue
        t_sent, t_first = sent[stamp] / 1e9, first[stamp] / 1e9
        parts["burst"].append((t_sent - t_first) * 1e3)
        parts["to_node"].append((last_arrival - t_sent) * 1e3)
        parts["node"].append((t_pub - last_arrival) * 1e3)
        parts["to_consumer"].append((received[stamp] / 1e9 - t_pub) * 1e3)
    out = {k: percentiles(v) for k, v in parts.items()}
    tensors = [(b - a) * 1e3 for a, b, name in tl["takes"] if name.endswith(("/depth", "/feat"))]
    out["take_per_message"] = percentiles(tensors)  # the node's default topics (bench runs them)
    out["callback_per_message"] = percentiles([(b - a) * 1e3 for a, b, _, _ in tl["arrivals"]])
    return out


def handoff_stage_fields(args, run: dict, measured) -> dict:
    """The hand-off's per-stage numbers (p50 / p99 ms) of the measured sets, and which implementation
    ran (None: not measured in this configuration)."""
    if args.transport not in HANDOFF_OUT:
        return {}
    pub, sub = run["pub"], run["sub"]
    out = {"native_publisher": pub.get("native"), "native_subscriber": sub.get("native")}
    stamps = [s for s, _ in pub.get("sent", [])]
    producer = [v for s, v in zip(stamps, pub.get("producer_stages_ms", [])) if s in measured]
    read = [v for (s, _), v in zip(sub.get("received", []), sub.get("open_ms", [])) if s in measured]
    announced = dict((run.get("timeline") or {}).get("announced", []))  # --split: the node's datagrams
    wake = [(t - announced[s]) * 1e3 for s, t in sub.get("arrivals", []) if s in measured and s in announced]
    for name, values in (("producer_sent", [a for a, _ in producer]), ("producer_published", [b for _, b in producer]),
                         ("consumer_wakeup", wake), ("consumer_read", read)):
        q = percentiles(values) if values else {50: None, 99: None}
        out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = q[50], q[99]
    return out


def percentiles(values, qs=(50, 95, 99)) -> dict:
    if not len(values):
        return {q: float("nan") for q in qs}
    return dict(zip(qs, np.percentile(values, qs).tolist()))


def render_md(res: dict) -> str:
    e, n, r = res["e2e_ms"], res["node_ms"], res["row"]
    lines = [
        f"# bevpool_node latency: {r['backend']} backend ({r['precision']}), {r['output_dtype']} grid over "
        f"{r['transport']}, {res['cameras']} cameras at {res['rate_hz']:g} Hz",
        "",
        f"Command: `{res['command']}`  ",
        f"Machine: {res['machine']['cpu']}, {res['machine']['cores']} cores, Python {res['machine']['python']} "
        f"(load average at start {', '.join(f'{x:.2f}' for x in res['machine']['load_avg_at_start'])})  ",
        f"Sets: {r['frames']} sent, {r['received']} received ({res['warmup']} warm-up sets left out of the "
        f"statistics); publisher, node and subscriber in three processes; inputs {res['input_dtype']}.",
        "",
        "| measure (ms) | p50 | p95 | p99 |",
        "|---|---|---|---|",
        f"| end to end: last input published -> grid received (other process) | {e[50]:.2f} | {e[95]:.2f} | "
        f"{e[99]:.2f} |",
        *(["| end to end from the producer's datagrams: last announcement sent -> grid received | "
           + " | ".join(f"{res['e2e_datagrams_ms'][q]:.2f}" for q in (50, 95, 99)) + " |"]
          if r["transport"] == "handoff_both" else []),
        f"| in the node: last input received -> BEV published | {n['p50']:.2f} | {n['p95']:.2f} | {n['p99']:.2f} |",
        f"| pooling stage in the node | {r['stage_p50_ms']:.3f} | | {r['stage_p99_ms']:.3f} |",
        f"| kernel alone (us) | {r['kernel_us']:.1f} | | |",
        f"| the node's GPU work per set, on the device | {r['gpu_device_p50_ms']:.3f} | | "
        f"{r['gpu_device_p99_ms']:.3f} |",
        f"| its wait for the GPU (submitted -> done, minus the above) | {r['gpu_wait_p50_ms']:.3f} | | "
        f"{r['gpu_wait_p99_ms']:.3f} |",
        f"| the node's CPU time per set (user + sys, /proc; all its threads; the whole run, start-up included) | "
        f"{_ms(r['node_cpu_ms_per_set'])} | | |",
        f"| the same while sets flow (after the warm-up sets, before the drain) | "
        f"{_ms((r.get('node_cpu_steady') or {}).get('ms_per_set'))} | | |",
        f"| the node idle before the first set (ms of CPU per second) | "
        f"{_ms((r.get('node_idle_cpu') or {}).get('ms_per_s'))} | | |",
        "",
        f"GPU load: {r['gpu_load']}" + (f" (another process, {r['gpu_load_steps_per_s']:.1f} steps/s)"
                                        if r.get("gpu_load_steps_per_s") else "") + f"; MPS: {r['mps']}.",
        "",
        "Node stages (p50 / p99 ms): " + ", ".join(
            f"{k} {v['p50']:.2f} / {v['p99']:.2f}" for k, v in res["stages_ms"].items()) + ".",
        "",
        *([("Split per set (p50 / p99 ms; --split): " + ", ".join(
            f"{k} {v[50]:.2f} / {v[99]:.2f}" for k, v in res["split_ms"].items()) + "."), ""]
          if res.get("split_ms") else []),
        f"Drops: {res['drops'] or 'none'}." + (
            f" Hand-off: grids overwritten before read {res['overwritten']}; first copy -> grid usable "
            f"in the subscriber p50 {res['handoff_open_ms'][50]:.3f} / p99 {res['handoff_open_ms'][99]:.3f} ms."
            if r["transport"] in HANDOFF_OUT else ""),
        *(["", handoff_stages_md(r)] if r["transport"] == "handoff_both" else []),
        *(["", f"The node's launcher (hand-off core): {r['core_launch']}."] if r.get("core_launch") else []),
        *(["", f"The node's input hand-off mid-run: {res['input_handoff_mid_run']}."]
          if res.get("input_handoff_mid_run") else []),
        *(["", "The node's drops as they came (s after its first status: counters grown): " + "; ".join(
            f"{t:.1f} s: " + ", ".join(f"{k} {v}" for k, v in grew.items()) for t, grew in res["drops_over_time"])
            + "."] if res.get("drops_over_time") else []),
        *(["", "The core launcher's launches by phase (mean us, wall / thread CPU; --launch-profile, over "
               f"{r['launch_phases_us']['launches']} launches): " + ", ".join(
                   f"{k[:-8]} {r['launch_phases_us'][k]:.1f} / {r['launch_phases_us'][k[:-8] + '_cpu_us']:.1f}"
                   for k in r["launch_phases_us"] if k.endswith("_wall_us")) + "."]
          if r.get("launch_phases_us") else []),
        *(["", "The node's executor thread under cProfile, by own CPU time (ms per set; profiled, so slower): "
               + ", ".join(f"{p['function']} {p['own_ms']:.3f} ({p['calls']} calls)"
                           for p in res["executor_profile_ms_per_set"]) + "."]
          if res.get("executor_profile_ms_per_set") else []),
        "",
        "The node's CPU time per set by thread (ms, /proc/<pid>/task): " + (", ".join(
            f"{k} {v:.3f}" for k, v in r.get("node_thread_cpu_ms_per_set", {}).items()) or "n/a") + ".",
        "",
        "The same while sets flow: " + (", ".join(
            f"{k} {v:.3f}" for k, v in (r.get("node_cpu_steady") or {}).get("by_thread", {}).items()) or "n/a")
        + "; idle (ms per s): " + (", ".join(
            f"{k} {v:.2f}" for k, v in (r.get("node_idle_cpu") or {}).get("by_thread", {}).items()) or "n/a") + ".",
    ]
    return "\n".join(lines) + "\n"


def _ms(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def handoff_stages_md(r: dict) -> str:
    def cell(name):
        p50, p99 = r.get(f"{name}_p50_ms"), r.get(f"{name}_p99_ms")
        return "n/a (--split)" if p50 is None else f"{p50:.3f} / {p99:.3f}"
    impl = {True: "the hand-off core", False: "the Python path", None: "?"}
    return (f"Hand-off stages (p50 / p99 ms; publisher: {impl[r.get('native_publisher')]}, subscriber: "
            f"{impl[r.get('native_subscriber')]}, node's intake: {impl[r.get('native_node')]}): producer enqueue "
            f"-> announcements sent {cell('producer_sent')}, -> ROS copies published {cell('producer_published')}; "
            f"consumer wake-up (node's datagram sent -> read off the socket) {cell('consumer_wakeup')}; "
            f"consumer read (-> on_grid, grid waited for) {cell('consumer_read')}.")


def write_results(prefix: Path, res: dict, md: str, rows_file: str | None, row: dict,
                  info: dict) -> None:
    """<prefix>.json and .md; with ``rows_file``, the row appended to that JSON list."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".json").write_text(json.dumps(res, indent=2) + "\n")
    prefix.with_suffix(".md").write_text(md)
    if rows_file:
        rows_path = Path(rows_file)
        rows = json.loads(rows_path.read_text()) if rows_path.exists() else []
        row = {k: (None if isinstance(v, float) and v != v else v)  # NaN -> null
               for k, v in row.items()}
        row = dict(row, date_utc=res["date_utc"], machine=info["cpu"])
        rows_path.write_text(json.dumps(rows + [row], indent=2) + "\n")


def main_inprocess(args, argv) -> int:
    """--transport inprocess: BevPooler in this process (bench/inprocess_latency.py), no ROS."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import inprocess_latency

    from bevpool_ros.rig_yaml import load_rig

    if args.backend not in ("cuda", "best"):
        raise SystemExit("--transport inprocess measures the device path: --backend cuda")
    info = machine()
    rig = load_rig(args.rig)
    from bevpool_ros.errors import BackendUnavailable

    try:
        if args.gpu_load_in == "thread":
            sys.setswitchinterval(0.0005)  # as the node: the load thread gives the lock back soon
        with gpu_share.mps_daemon(args.mps), shared_gpu(args) as load:
            row = inprocess_latency.run(rig, precision=args.precision, input_dtype=args.input_dtype,
                                        bev_dtype=args.bev_dtype, frames=args.frames, rate=args.rate,
                                        warmup=args.warmup, tensors=args.tensors,
                                        caller_priority=args.caller_priority)
        row.update(load_fields(args, load))
    except (BackendUnavailable, ImportError) as e:  # no GPU, or --tensors names a missing framework
        raise SystemExit(f"--transport inprocess: {e}") from None
    command = "python bench/latency.py " + " ".join(argv if argv is not None else sys.argv[1:])
    res = {"row": row, "machine": info, "command": command,
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    r = row
    md = (f"# BevPooler in-process: {r['precision']}, {r['input_dtype']} in "
          f"({r['tensors']} tensors), "
          f"{r['output_dtype']} grid, rig {r['rig']}, {r['rate_hz']:g} Hz\n\n"
          f"Command: `{command}`  \n"
          f"Sets: {r['frames']} measured, {r['received']} checked clean.\n\n"
          "| measure | p50 | p99 |\n|---|---|---|\n"
          "| end to end: pool call -> grid ready on the stream (GPU events, ms) | "
          f"{r['e2e_p50_ms']:.4f} | {r['e2e_p99_ms']:.4f} |\n"
          f"| the call on the host (ms) | {r['stage_p50_ms']:.4f} | {r['stage_p99_ms']:.4f} |\n"
          f"| call -> grid ready seen by the host (ms) | {r['host_wait_p50_ms']:.4f} | "
          f"{r['host_wait_p99_ms']:.4f} |\n"
          f"| kernel alone (us) | {r['kernel_us']:.1f} | |\n\n"
          f"GPU load: {r['gpu_load']} ({r['gpu_load_in']}), MPS: {r['mps']}; caller's stream priority "
          f"{r['caller_priority']}.\n"
          f"p99 minus kernel: {r['e2e_minus_kernel_p99_us']:.1f} us; graph replays "
          f"{r['graph_replays']}, eager frames {r['eager_frames']}.\n")
    prefix = Path(args.out) if args.out else ROOT / "bench" / "results" / "latency_inprocess"
    write_results(prefix, res, md, args.rows, row, info)
    print(md)
    return 0 if row["received"] == row["frames"] else 1


@contextlib.contextmanager
def shared_gpu(args):
    """The run's GPU load (--gpu-load), in another process or a thread of this one; yields its stats."""
    if args.gpu_load != "none" and args.gpu_load_in == "thread":
        with gpu_share.InProcessLoad(args.gpu_load, args.gpu_load_sm_percent) as load:
            stats = {}
            yield stats
        stats.update(load.stats or {})
        return
    with gpu_share.load_process(args.gpu_load, Path(tempfile.mkdtemp(prefix="bevpool_load_")),
                                args.gpu_load_sm_percent) as stats:
        yield stats


def load_fields(args, stats: dict) -> dict:
    return {"gpu_load": args.gpu_load, "gpu_load_in": args.gpu_load_in if args.gpu_load != "none" else "none",
            "mps": bool(args.mps), "gpu_load_steps_per_s": stats.get("steps_per_s"),
            "gpu_load_sm_percent": args.gpu_load_sm_percent, "gpu_load_green_sms": stats.get("green_context_sms")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu", choices=("best", "tensorrt", "cuda", "cpu"))
    ap.add_argument("--precision", default="fp16", choices=("fp32", "fp16", "fp8", "auto"))
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--rate", type=float, default=30.0)
    ap.add_argument("--bev-dtype", default="float32", choices=("float32", "float16"))
    ap.add_argument("--input-dtype", default="float32",
                    choices=("float32", "float16", "float8_e4m3"),
                    help="float8_e4m3 (E4M3 codes with power-of-two scales): inprocess only")
    ap.add_argument("--transport", default="dds", choices=(*TRANSPORTS, "handoff"),
                    help="dds | handoff_out (the node's grid through the GPU hand-off; "
                         "'handoff' too) | handoff_both (the camera tensors too) | inprocess "
                         "(BevPooler in this process, no ROS)")
    ap.add_argument("--rig", default=str(RIG),
                    help="rig YAML, a rig of config/rigs, or a workload (wide_c256)")
    ap.add_argument("--tensors", default="auto", choices=("auto", "torch", "cupy", "driver"),
                    help="inprocess: the caller's tensors (auto: PyTorch when it has CUDA)")
    ap.add_argument("--out", default=None, help="output prefix (default bench/results/latency_<backend>)")
    ap.add_argument("--rows", default=None, help="append this configuration's row to a JSON list file")
    ap.add_argument("--switch-interval-ms", type=float, default=0.0,
                    help="GIL switch interval of the publisher and subscriber processes (0: CPython's "
                    "5 ms; the node always runs at 0.5)")
    ap.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                    help="a bevpool_node string parameter for this run (repeatable), e.g. executor=single_threaded")
    ap.add_argument("--consumer-heap", action="store_true",
                    help="the subscriber keeps freed buffers mapped (bevpool_ros.heap, as docs/dds.md "
                    "advises a BevFeature consumer); the node always does unless BEVPOOL_HEAP_TUNING=0")
    ap.add_argument("--split", action="store_true",
                    help="dds: cut each set's time at the processes (publisher burst, -> node, node, -> "
                    "subscriber) from a timeline of the node (bench/trace_hooks)")
    ap.add_argument("--gpu-load", default="none", choices=gpu_share.LOADS,
                    help="a co-running GPU load for the whole run (bench/gpu_share.py): gemm (fp16 4096^3 "
                    "products back to back), conv (a ResNet-like backbone on six 256 x 704 images)")
    ap.add_argument("--gpu-load-in", default="process", choices=("process", "thread"),
                    help="process: another process (another CUDA context); thread: this process, a "
                    "normal-priority stream (--transport inprocess only)")
    ap.add_argument("--mps", action="store_true",
                    help="start a private MPS control daemon for the run's processes, stop it after")
    ap.add_argument("--gpu-load-sm-percent", type=int, default=None, metavar="P",
                    help="the load may use P%% of the SMs, the rest left to the node / pool call: "
                    "with --mps and a load in another process, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; with "
                    "--gpu-load-in thread, a green context of that many SMs (PyTorch)")
    ap.add_argument("--caller-priority", default="highest", choices=("highest", "normal"),
                    help="inprocess: priority of the caller's stream the pool call is enqueued on")
    ap.add_argument("--native", default="auto", choices=("auto", "on", "off"),
                    help="handoff transports: the hand-off core in the publisher, the node and the subscriber "
                         "(BEVPOOL_NATIVE; on fails where it is not built)")
    ap.add_argument("--node-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for the node's process, e.g. BEVPOOL_LAUNCH_WAIT=prewait "
                         "(docs/gpu_handoff.md); in the row as node_env")
    ap.add_argument("--launch-profile", action="store_true",
                    help="the hand-off core launcher's mean wall and thread-CPU time per phase (submit, host "
                         "wait, checks and datagrams, ROS copy), in the row as launch_phases_us")
    ap.add_argument("--profile-executor", action="store_true",
                    help="the node's executor thread under cProfile: its functions by own CPU time per set in the "
                         "results (a measurement aid: profiling slows that thread)")
    ap.add_argument("--role", choices=("publisher", "subscriber"), help=argparse.SUPPRESS)
    ap.add_argument("--record", help=argparse.SUPPRESS)
    ap.add_argument("--cycle-frames", type=int, default=8, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.transport = "handoff_out" if args.transport == "handoff" else args.transport
    if args.role:
        return (role_publisher if args.role == "publisher" else role_subscriber)(args)
    args.rig = str(resolve_rig(args.rig))
    if args.gpu_load_in == "thread" and args.transport != "inprocess":
        ap.error("--gpu-load-in thread: the load shares the caller's process only with --transport inprocess")
    if args.gpu_load_sm_percent is not None and not (
            0 < args.gpu_load_sm_percent <= 100 and args.gpu_load != "none"
            and (args.gpu_load_in == "thread" or args.mps)):
        ap.error("--gpu-load-sm-percent P: 1-100, for a load in another process under --mps or in a thread")
    if args.transport == "inprocess":
        return main_inprocess(args, argv)
    if args.transport in HANDOFF_OUT and args.backend not in ("cuda", "best"):
        ap.error(f"--transport {args.transport} hands grids over on a GPU: --backend cuda")
    if args.input_dtype == "float8_e4m3":
        ap.error("--input-dtype float8_e4m3 is measured in-process only (--transport inprocess)")

    info = machine()
    with gpu_share.mps_daemon(args.mps), shared_gpu(args) as load:
        run = run_pipeline(args)
    sent, sub = run["sent"], run["sub"]
    d = sub.get("diagnostics", {})
    f = lambda k: float(d.get(k, "nan"))  # noqa: E731
    order = sorted(sent)
    measured = set(order[args.warmup:])
    e2e = [(t - sent[s]) / 1e6 for s, t in sub["received"] if s in measured]
    e = percentiles(e2e)
    # handoff_both: the same from the producer's last datagram (what the node's wake-up takes), the set's
    # time less its ROS copies' publish (producer stages: enqueue -> datagrams sent, -> ROS copies published)
    stages = dict(zip((st for st, _ in run["pub"].get("sent", [])), run["pub"].get("producer_stages_ms", [])))
    e2e_datagrams = percentiles([(t - sent[s]) / 1e6 + stages[s][1] - stages[s][0] for s, t in sub["received"]
                                 if s in measured and s in stages])
    received_n = len(sub["received"])
    thread_ms = {name: round(v * 1e3 / received_n, 3) for name, v in
                 sorted(run.get("node_thread_cpu_s", {}).items(), key=lambda kv: -kv[1])} if received_n else {}
    backend = d.get("backend", args.backend)
    kern = kernel_only(backend if backend not in ("best", "") else "cpu", args.precision, args.rig)
    stage = ("stage_p50_ms", "stage_p99_ms") if "stage_p50_ms" in d else ("pool_p50_ms", "pool_p99_ms")
    row = {"backend": backend, "precision": d.get("precision", args.precision),
           "output_dtype": sub.get("dtype", args.bev_dtype),
           "transport": args.transport, "rig": rig_label(args.rig),
           "frames": len(sent), "received": len(sub["received"]),
           "e2e_p50_ms": e[50], "e2e_p99_ms": e[99], "stage_p50_ms": f(stage[0]), "stage_p99_ms": f(stage[1]),
           "kernel_us": kern["kernel_us"], "input_dtype": args.input_dtype, "rate_hz": args.rate,
           "switch_interval_ms": args.switch_interval_ms, "consumer_heap": args.consumer_heap,
           "executor": d.get("executor"), "node_heap": d.get("heap"),
           "node_p50_ms": f("latency_p50_ms"), "node_p99_ms": f("latency_p99_ms"),
           "pool_p50_ms": f("pool_p50_ms"), "pool_p99_ms": f("pool_p99_ms"),
           "gpu_device_p50_ms": f("gpu_device_p50_ms"), "gpu_device_p99_ms": f("gpu_device_p99_ms"),
           "gpu_wait_p50_ms": f("gpu_wait_p50_ms"), "gpu_wait_p99_ms": f("gpu_wait_p99_ms"),
           "node_gpu_shared": d.get("gpu_shared"), "node_params": ",".join(args.param),
           "node_env": ",".join(args.node_env), "launch_phases_us": run.get("launch_profile"),
           **load_fields(args, load),
           "node_cpu_ms_per_set": node_cpu_per_set(run, len(sub["received"])),
           "native_node": "set loop in the core" in d.get("input_handoff", ""),
           "e2e_datagrams_p50_ms": e2e_datagrams[50], "e2e_datagrams_p99_ms": e2e_datagrams[99],
           "launched_by_core": int(d.get("launched_by_core", 0)), "core_launch": d.get("handoff_core_launch"),
           "node_thread_cpu_ms_per_set": dict(list(thread_ms.items())[:8]),
           "node_cpu_steady": steady_cpu_per_set(run.get("node_cpu_trace", []), run["sent"].values(), args.warmup),
           "node_idle_cpu": run.get("node_idle_cpu"),
           **handoff_stage_fields(args, run, measured)}
    res = {
        "row": row, "backend_requested": args.backend, "cameras": 6, "rate_hz": args.rate,
        "input_dtype": args.input_dtype, "warmup": args.warmup, "measured": len(e2e),
        "e2e_ms": e, "e2e_datagrams_ms": e2e_datagrams,
        "node_ms": {"p50": f("latency_p50_ms"), "p95": f("latency_p95_ms"), "p99": f("latency_p99_ms")},
        "stages_ms": {k: {"p50": f(f"{k}_p50_ms"), "p99": f(f"{k}_p99_ms")}
                      for k in ("queue_wait", "assemble", "handoff", "message", "publish")},
        "drops": {k: int(v) for k, v in d.items() if k.startswith("dropped_")
                  or k in ("sync_incomplete_timeout", "sync_late", "sync_evicted", "sync_superseded")},
        "handoff_open_ms": percentiles(sub.get("open_ms", [])[args.warmup:])
        if args.transport in HANDOFF_OUT else None,
        "subscriber_before_open_ms": percentiles(sub.get("before_open_ms", [])[args.warmup:])
        if args.transport in HANDOFF_OUT else None,
        "subscriber_open_call_ms": percentiles(sub.get("open_call_ms", [])[args.warmup:])
        if args.transport in HANDOFF_OUT else None,
        "subscriber_deserialize_ms": percentiles(sub.get("deserialize_ms", [])[args.warmup:])
        if args.transport in HANDOFF_OUT else None,
        "overwritten": sub.get("overwritten", 0), "subscriber_errors": sub.get("errors", 0),
        "subscriber_last_error": sub.get("last_error", ""), "gpu_handoff": d.get("gpu_handoff"),
        "input_handoff": d.get("input_handoff"),  # the node's wake-up: first arrivals by way
        "input_handoff_mid_run": sub.get("diagnostics_mid", {}).get("input_handoff"),
        "drops_over_time": sub.get("drops_over_time", []),
        "executor_profile_ms_per_set": [
            {"function": p["function"], "calls": p["calls"], "own_ms": round(p["own_s"] * 1e3 / received_n, 4),
             "cumulative_ms": round(p["cumulative_s"] * 1e3 / received_n, 4)}
            for p in run.get("executor_profile", [])] if received_n else [],
        "subscriber_first_by": sub.get("first_by"), "subscriber_signal_lost": sub.get("signal_lost"),
        "subscriber_filter_error": sub.get("filter_error"), "subscriber_ros_copies": sub.get("ros_copies"),
        "subscriber_filtered_at_end": sub.get("filtered_at_end"),
        "split_ms": split_sets(run, measured),
        "kernel_only": kern, "node_exit_code": run["node_rc"], "machine": info,
        "command": "python bench/latency.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    prefix = Path(args.out) if args.out else ROOT / "bench" / "results" / f"latency_{backend}"
    write_results(prefix, res, render_md(res), args.rows, row, info)
    print(render_md(res))
    if not row["received"]:
        print(run["log_tail"], file=sys.stderr)
    return 0 if run["node_rc"] == 0 and row["received"] else 1


if __name__ == "__main__":
    sys.exit(main())
