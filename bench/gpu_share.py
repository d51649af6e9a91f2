#!/usr/bin/env python3
"""A GPU shared with networks, for the latency benchmarks (bench/latency.py --gpu-load, --mps).

    python bench/gpu_share.py --load gemm|conv [--seconds S] [--stats FILE]   # the load alone

Loads (what a robot's depth network and heads put on the GPU while the node pools):
  gemm  fp16 4096 x 4096 x 4096 matrix products back to back (PyTorch, else CuPy)
  conv  a convolutional backbone of realistic size: six 256 x 704 images (one nuScenes camera
        set) through a ResNet-like stack of 3x3 convolutions, fp16, channels-last (PyTorch)
Each runs in its own process (another CUDA context: the GPU time-slices between contexts unless
an MPS server joins them) or, for the in-process measurement, in a thread of the caller on a
normal-priority stream (``InProcessLoad``): its host thread waits on events, which releases the
interpreter lock, so the caller's Python runs while the GPU is busy.

``mps_daemon()`` starts a private MPS control daemon (its pipe and log folders in a temporary
directory, named to every child through CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY) and
stops it afterwards; nothing else on the machine changes.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LOADS = ("none", "gemm", "conv")


# --- the loads -----------------------------------------------------------------------------------
def _gemm_step(torch, stream):
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)

    def step():
        with torch.cuda.stream(stream):
            for _ in range(8):
                torch.matmul(a, b, out=c)
    return step


def _conv_step(torch, stream):
    nn = torch.nn
    widths = (64, 128, 256, 512)
    layers = [nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.ReLU()]
    cin = 64
    for i, w in enumerate(widths):
        for j in range(3):
            layers += [nn.Conv2d(cin, w, 3, stride=2 if (j == 0 and i > 0) else 1, padding=1), nn.ReLU()]
            cin = w
    net = nn.Sequential(*layers).cuda().half().to(memory_format=torch.channels_last).eval()
    x = torch.randn(6, 3, 256, 704, device="cuda", dtype=torch.float16).to(memory_format=torch.channels_last)

    def step():
        with torch.cuda.stream(stream), torch.no_grad():
            net(x)
    return step


def _cupy_gemm_step(stream):
    import cupy

    a = cupy.random.standard_normal((4096, 4096), dtype=cupy.float32).astype(cupy.float16)
    b = a.copy()
    c = cupy.empty_like(a)

    def step():
        with stream:
            for _ in range(8):
                cupy.matmul(a, b, out=c)
    return step


GREEN_SM_STEP = 8  # green contexts split a Hopper GPU's SMs in groups of this many
_GREEN_CONTEXTS: list = []


def _green_stream(torch, sm_percent: int):
    """A stream of a green context holding ``sm_percent`` of the SMs (rounded down to whole
    groups): work on it never runs on the other SMs, which stay free for the pool call."""
    from torch.cuda import green_contexts

    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    n = max(GREEN_SM_STEP, sms * sm_percent // 100 // GREEN_SM_STEP * GREEN_SM_STEP)
    ctx = green_contexts.GreenContext.create(num_sms=n, device_id=torch.cuda.current_device())
    _GREEN_CONTEXTS.append(ctx)  # destroyed when collected: kept for the process's life
    if hasattr(ctx, "Stream"):
        return ctx.Stream(), n
    ctx.set_context()  # older: current in the load's thread, which does all its work there
    return torch.cuda.Stream(), n


def make_load(kind: str, priority: str = "normal", sm_percent: int | None = None):
    """(step, mark, sms): ``step()`` enqueues a few milliseconds of work on the load's stream;
    ``mark()`` records an event after it and returns a function that waits for that event; ``sms``:
    the SMs the load may use, on a green context of ``sm_percent`` of them (None: all)."""
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError("no CUDA in torch")
    except ImportError:
        if kind != "gemm" or sm_percent is not None:
            raise SystemExit(f"--gpu-load {kind}" + (" on a green context" if sm_percent is not None else "")
                             + " needs PyTorch with CUDA") from None
        import cupy

        stream = cupy.cuda.Stream(non_blocking=True)

        def cupy_mark():
            ev = cupy.cuda.Event(disable_timing=True)
            ev.record(stream)
            return ev.synchronize
        return _cupy_gemm_step(stream), cupy_mark, None
    if sm_percent is not None:
        stream, sms = _green_stream(torch, sm_percent)
    else:
        least, greatest = torch.cuda.Stream.priority_range()
        stream, sms = torch.cuda.Stream(priority=greatest if priority == "highest" else least), None
    step = {"gemm": _gemm_step, "conv": _conv_step}[kind](torch, stream)

    def mark():  # Event.synchronize releases the interpreter lock while it waits
        ev = torch.cuda.Event()
        ev.record(stream)
        return ev.synchronize
    return step, mark, sms


def run_load(kind: str, seconds: float, stop: threading.Event | None = None, started=None,
             sm_percent: int | None = None) -> dict:
    """Steps back to back until ``seconds`` pass or ``stop`` is set: the next step is always
    queued behind the one running, so the GPU never idles between them."""
    step, mark, sms = make_load(kind, sm_percent=sm_percent)
    step()
    mark()()
    if started is not None:
        started()
    steps, t0 = 0, time.perf_counter()
    step()
    previous = mark()
    while time.perf_counter() - t0 < seconds and not (stop is not None and stop.is_set()):
        step()
        current = mark()
        previous()
        previous = current
        steps += 1
    previous()
    elapsed = time.perf_counter() - t0
    return {"load": kind, "steps": steps, "seconds": elapsed, "steps_per_s": steps / max(1e-9, elapsed),
            "green_context_sms": sms}


class InProcessLoad:
    """The load in a thread of this process, on a normal-priority stream of this context, or with
    ``sm_percent`` on a stream of a green context holding that share of the SMs."""

    def __init__(self, kind: str, sm_percent: int | None = None):
        self.kind, self.sm_percent, self.stats = kind, sm_percent, None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-load", daemon=True)

    def _run(self):
        try:
            self.stats = run_load(self.kind, 1e9, self._stop, sm_percent=self.sm_percent)
        except BaseException as e:  # noqa: BLE001 - reported by __enter__ / __exit__
            self.error = e

    def __enter__(self):
        self._thread.start()
        time.sleep(2.0)  # past its warm-up: cuBLAS / cuDNN handles, first kernels
        if self.error is not None or not self._thread.is_alive():
            raise SystemExit(f"--gpu-load {self.kind} in this process failed to start: {self.error!r}")
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(60)
        if self.error is not None:
            raise SystemExit(f"--gpu-load {self.kind} in this process failed: {self.error!r}")


@contextlib.contextmanager
def load_process(kind: str, log_dir: Path, sm_percent: int | None = None):
    """The load in another process for the block's duration; yields its stats dict (filled at exit).
    ``sm_percent``: under MPS, the share of the SMs the load's client may use
    (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, read when its context is made): the rest stay free for others."""
    if kind == "none":
        yield {}
        return
    stats_file = log_dir / f"gpu_load_{kind}.json"
    env = dict(os.environ)
    if sm_percent is not None:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(sm_percent)
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--load", kind, "--seconds", "1e9",
                             "--stats", str(stats_file)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            env=env)
    stats: dict = {}
    try:
        deadline = time.monotonic() + 60
        while not (log_dir / f"gpu_load_{kind}.json.running").exists():  # warmed up, stepping
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"--gpu-load {kind}: the load process did not start (rc {proc.poll()})")
            time.sleep(0.1)
        yield stats
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if stats_file.exists():
            stats.update(json.loads(stats_file.read_text()))


@contextlib.contextmanager
def mps_daemon(enabled: bool = True):
    """A private MPS control daemon for this process and its children; stopped at the end."""
    if not enabled:
        yield None
        return
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise SystemExit("--mps: nvidia-cuda-mps-control is not on PATH")
    root = Path(tempfile.mkdtemp(prefix="bevpool_mps_"))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(root / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(root / "log")}
    for d in env.values():
        Path(d).mkdir()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    subprocess.run([control, "-d"], check=True, env=os.environ)
    try:
        yield root
    finally:
        # quit waits for the clients to leave: a caller that is one itself (a CUDA context in this
        # process, --transport inprocess) leaves at its exit, and the daemon with it
        quitter = subprocess.Popen([control], stdin=subprocess.PIPE, env=os.environ)
        quitter.stdin.write(b"quit\n")
        quitter.stdin.close()
        try:
            quitter.wait(10)
            gone = True
        except subprocess.TimeoutExpired:
            gone = False
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if gone:
            shutil.rmtree(root, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--load", choices=LOADS[1:], required=True)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--stats", default=None, help="write the load's steps per second here at exit")
    args = ap.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    started = (lambda: Path(args.stats + ".running").touch()) if args.stats else None
    stats = run_load(args.load, args.seconds, stop, started)
    if args.stats:
        Path(args.stats).write_text(json.dumps(stats))
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
