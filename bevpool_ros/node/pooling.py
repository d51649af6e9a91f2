"""The pooling thread: camera set -> backend.pool_cameras -> BEV grid in the outgoing payload.

It runs apart from the ROS executor so that a slow pool never blocks subscriptions, timers
or parameter services. Its input queue is bounded: when a new set arrives while the queue is
full, the oldest waiting set is dropped (counted ``worker_busy``); fresher data wins.
No ROS import: results leave through the ``on_result`` / ``on_drop`` callbacks.

Per set the worker hands the backend each camera's tensors as they arrived (the backend copies
each once into its staging slot) and the array the BEV must land in: a view of the outgoing
message's payload (``out_buffer.view``), so the grid is never copied or cast on the host again.
Prepare, re-prepare (a calibration change) and pool all run in this thread; the GPU backends
make their context current in whichever thread calls them.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import fp8
from ..backends import InputError, NonFiniteInput, NonFiniteOutput
from ..cameras.calibration import LiveCalibration
from ..cameras.sync import CameraSet
from ..ros.liveness import INJECTED_STALL, injected_stall, long_step
from ..scatter_map import scatter_map_for
from ..thread_name import name_this_thread

E4M3_WIRE = np.dtype(np.uint8)
FLOWING_S = 1.0  # sets count as flowing while one was pooled this recently (between_sets)
AFTER_SET_KEPT = 256  # after_set jobs waiting for a set
log = logging.getLogger(__name__)


def decode_mixed_e4m3(cameras: list) -> list:
    """One wire dtype per stream and set: a GPU backend takes E4M3 codes raw (and checks them on
    its device) but refuses codes mixed with float tensors. In such a set the codes are decoded
    here (exact in float16), and a NaN code is the ``non_finite`` drop the device would report."""
    out = [list(c) for c in cameras]
    for i, stream in enumerate(("depth", "feat")):
        arrays = [c[i] for c in cameras if isinstance(c[i], np.ndarray)]
        if len({a.dtype == E4M3_WIRE for a in arrays}) < 2:
            continue  # all codes or all floats: the backend takes them as they are
        for c in out:
            if isinstance(c[i], np.ndarray) and c[i].dtype == E4M3_WIRE:
                if fp8.has_nan_codes(c[i]):
                    raise NonFiniteInput(f"{stream}: float8_e4m3 tensor holds NaN codes")
                c[i] = fp8.decode(c[i], np.float16)
    return [tuple(c) for c in out]


def overwritten(camera_set: CameraSet) -> list[str]:
    """The set's hand-off views (handoff.reader.HandoffView) whose slot the producer already
    claimed for a later tensor (the ring's seqlock): '<camera>/<stream>' each."""
    return [f"{cam}/{stream}" for cam, streams in camera_set.frames.items()
            for stream, (_, payload) in streams.items()
            if hasattr(payload, "still_valid") and not payload.still_valid()]


@dataclass
class PoolResult:
    camera_set: CameraSet
    bev: np.ndarray | None  # in the published dtype, a view of out_buffer's memory; None: left on
                            # the device (host_grid() said only hand-off consumers want it)
    rig: object            # the Rig the grid was pooled on
    pool_s: float          # backend.pool_cameras: staging, device work, copies, checks
    assemble_s: float      # matching the set's cameras to the rig's order
    started: float         # perf_counter when the pooling thread took the set
    gpu: object = None     # the backend frame's FrameTiming (GPU backends): device time, wait


class ArrayBuffer:
    """Default ``out_buffer``: one numpy array per (shape, dtype), reused frame after frame."""

    def __init__(self):
        self._array = None

    def view(self, shape, dtype) -> np.ndarray:
        a = self._array
        if a is None or a.shape != tuple(shape) or a.dtype != np.dtype(dtype):
            a = self._array = np.empty(shape, dtype)
        return a


class PoolingWorker:
    def __init__(self, backend, calibration: LiveCalibration, on_result, on_drop, queue_size: int = 2,
                 on_rebuild=None, out_dtype="float32", out_buffer=None, on_prepare_error=None,
                 host_grid=None, warm_device_inputs: bool = False, on_warning=None):
        """``out_dtype``: the published dtype (or a callable returning it, read per set);
        ``out_buffer.view(shape, dtype)``: the memory the outgoing message is built from;
        ``host_grid()``: False when nobody needs the grid on the host this set (the backend may
        then leave it on its device: PoolResult.bev None). ``warm_device_inputs``: after each
        prepare, run the backend's device-input path once (hand-off sets expected; backends
        without that path skip it); a failure goes to ``on_warning(key, text)``, and the first
        real set meets it again and is dropped with its cause."""
        self.backend = backend
        self.warm_device_inputs = warm_device_inputs
        self.on_warning = on_warning or (lambda key, text: None)
        self.host_grid = host_grid or (lambda: True)
        self.out_dtype = out_dtype
        self.out_buffer = out_buffer or ArrayBuffer()
        self.calibration = calibration
        self.on_result = on_result
        self.on_drop = on_drop
        self.on_rebuild = on_rebuild or (lambda rig: None)
        # (backend, error, rig) -> the backend to use instead, or raises: a backend that cannot
        # run a rig (its map, its channel count) must not leave the node without one
        self.on_prepare_error = on_prepare_error
        self.queue_size = queue_size
        self._queue: deque[CameraSet] = deque()
        self._cv = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        self._prepared_version = None
        self.rebuilds = 0
        self.busy = False
        self._after: deque = deque(maxlen=AFTER_SET_KEPT)  # after_set: one run after each set
        # the hand-off core's launcher (node/handoff_launch.py), when the node has one: each pool
        # runs inside ``pool_guard()`` (the launcher held), ``on_busy(n)`` hears how many sets this
        # worker has queued or pools, ``after_pool(camera_set)`` runs after each published set
        self.pool_guard = contextlib.nullcontext
        self.on_busy = None
        self.after_pool = None
        self._adopted: dict = {}  # between_sets: job -> [timer, period s, next due], while sets flow
        self._last_set = -1e9  # monotonic time the last set was pooled
        self._current: tuple | None = None  # (monotonic start, thread ident, stamp) of the set pooled now

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.prepare()  # the first scatter map is built before any data arrives
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="bevpool-pooling", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._running = False
            self._last_set = -1e9  # the executor runs the timers this thread adopted again
            self._hand_back_timers()
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._cv:  # and for a set pooled inline (reserve_or_submit) by another thread
            self._cv.wait_for(lambda: not self.busy, timeout)

    @property
    def prepared_version(self):
        """The calibration version the backend is prepared for (None before the first prepare)."""
        return self._prepared_version

    def prepare(self) -> bool:
        """Adopt the current calibration if it changed; True when a new map was prepared. A long
        step for the watchdog (kernels compiled, an engine built: seconds to minutes)."""
        version = self.calibration.version
        if version == self._prepared_version:
            return False
        rig = self.calibration.rig
        with long_step("preparing the backend for a new calibration"):
            smap = scatter_map_for(rig)
            try:
                self.backend.prepare(smap)
            except Exception as e:
                if self.on_prepare_error is None:
                    raise
                self.backend = self.on_prepare_error(self.backend, e, rig)
                self.backend.prepare(smap)
        self._prepared_version = version
        self._rig = rig
        self.rebuilds += 1
        self._warm(rig)
        return True

    def _warm(self, rig) -> None:
        warm = getattr(self.backend, "warm_device_inputs", None) if self.warm_device_inputs else None
        if warm is None:
            return
        dtype = self.out_dtype() if callable(self.out_dtype) else self.out_dtype
        try:
            warm(out=self.out_buffer.view((*rig.grid_shape, rig.channels), dtype))
        except Exception as e:  # noqa: BLE001 - the first hand-off set reports its own failure
            self.on_warning("warm_up_failed", f"device-input warm-up failed: {type(e).__name__}: {e}")

    # input ------------------------------------------------------------------------------
    def _busy_changed(self) -> None:
        """(lock held) Say how many sets wait here or are pooled (the launcher's gate)."""
        if self.on_busy is not None:
            self.on_busy(len(self._queue) + int(self.busy))

    def submit(self, camera_set: CameraSet) -> None:
        with self._cv:
            self._queue.append(camera_set)
            while len(self._queue) > self.queue_size:
                self._queue.popleft()
                self.on_drop("worker_busy", "pooling thread busy: oldest waiting set dropped")
            self._busy_changed()
            self._cv.notify()

    def reserve_or_submit(self, camera_set: CameraSet) -> Callable[[], None] | None:
        """For the hand-off's set-loop and signal threads, whose sets are ready to pool: when the
        pooling thread is idle with nothing queued, the worker is reserved for ``camera_set`` and the
        job that pools it in the calling thread comes back (one thread hop less: the queue wait was
        0.24 / 1.1 ms p50 / p99 on the H200 host); else it is queued and None comes back. The caller
        decides under its hand-over lock, so that no later set is reserved or queued before it, and
        runs the job after releasing that lock; a job that comes back must run (the worker stays
        busy until it has). The executor never pools inline: a slow pool or a re-prepare must not
        stall its callbacks."""
        with self._cv:
            if self.busy or self._queue or not self._running:
                inline = False
            else:
                inline = self.busy = True
                self._busy_changed()
        if not inline:
            self.submit(camera_set)
            return None
        return lambda: self._process_guarded(camera_set)

    def discard_queued(self) -> int:
        """Forget the sets waiting for the thread (the node was deactivated); how many."""
        with self._cv:
            n = len(self._queue)
            self._queue.clear()
            self._busy_changed()
        return n

    @property
    def queued(self) -> int:
        return len(self._queue)

    def status(self) -> dict:
        return {"worker_queue": self.queued}

    # what the watchdog reads (ros/liveness.py) -----------------------------------------------
    @property
    def thread_ident(self) -> int | None:
        return self._thread.ident if self._thread is not None else None

    def thread_alive(self) -> bool:
        """False when the thread ended while it should run."""
        return not self._running or (self._thread is not None and self._thread.is_alive())

    def in_progress(self) -> tuple:
        """(monotonic start, thread ident, what) of the set being pooled now; (None, None, '')."""
        current = self._current
        if current is None:
            return None, None, ""
        return current[0], current[1], f"set stamped {current[2]}"

    def wait_until_idle(self, timeout_s: float) -> bool:
        """Block the caller while a set is being pooled (and published), at most ``timeout_s``;
        True when the thread is idle. For callbacks whose work can wait a millisecond: the GIL
        they would hold meanwhile slows every step of the pooling thread's set."""
        with self._cv:
            return self._cv.wait_for(lambda: not self.busy, timeout_s)

    # housekeeping -----------------------------------------------------------------------
    def between_sets(self, job, timer) -> None:
        """Run ``job`` (periodic housekeeping: /diagnostics, the graph check, the synchroniser's
        time-outs) where it cannot delay a set: while sets flow, in the thread that pools, right
        after a set, when the next one is a camera period away; else now, in the caller's thread.

        Every executor wake-up while a set is pooled costs that set: the executor's Python (its
        wait set, the callback) holds the GIL the pooling thread needs back after each driver
        call. On the H200 host the sets that the 25 ms sync-poll timer's wake-ups overlapped took
        ~3 ms instead of ~1 (pooled and announced); the timer's beat with the camera period keeps
        its phase for a whole run, so a run had 15-17 % such sets or almost none.
        So ``timer`` (the rclpy timer whose callback this is), while sets flow, is cancelled: the
        executor no longer wakes for it, and this thread runs ``job`` at the timer's period after
        sets. When sets stop flowing (none for FLOWING_S) the timer is reset: the executor runs
        it again. (One-off work after a set: ``after_set``.)"""
        with self._cv:
            if self._running and time.monotonic() - self._last_set < FLOWING_S:
                timer.cancel()
                self._adopted[job] = [timer, timer.timer_period_ns * 1e-9, 0.0]
                return
        self._run_job(job)

    def after_set(self, job) -> None:
        """Run ``job`` in the thread that pools, after a set; one such job per set, in order.
        For one-off work of a few milliseconds that must not delay a set, such as learning an
        announcement template (handoff/cdr_template.py): a node's first set meets a dozen. Jobs
        wait while no set comes (at most AFTER_SET_KEPT; older ones are forgotten)."""
        with self._cv:
            self._after.append(job)

    def forget(self, job) -> None:
        """``job``'s owner is going (its timer destroyed): never run or reset it again."""
        with self._cv:
            self._adopted.pop(job, None)

    def _due_jobs(self, now: float) -> list:
        """(lock held) The adopted periodic jobs that are due, after a set."""
        jobs = []
        for job, entry in self._adopted.items():
            if now >= entry[2]:
                jobs.append(job)
                entry[2] = now + entry[1]
        return jobs

    def _hand_back_timers(self) -> None:
        """(lock held) Sets stopped flowing: the executor runs the adopted timers again."""
        if not self._adopted or time.monotonic() - self._last_set < FLOWING_S:
            return
        timers = [entry[0] for entry in self._adopted.values()]
        self._adopted.clear()
        for timer in timers:
            try:
                timer.reset()
            except Exception:  # destroyed meanwhile (its owner closed): nothing to hand back
                pass

    @staticmethod
    def _run_job(job) -> None:
        try:
            job()
        except Exception as e:  # housekeeping never takes the pooling thread down
            log.warning("pooling thread: housekeeping job %s failed: %s: %s",
                        getattr(job, "__qualname__", job), type(e).__name__, e)

    # work -------------------------------------------------------------------------------
    def launched_set(self) -> None:
        """A set the hand-off core pooled and announced without this worker: the housekeeping due
        after a set runs now, in the caller's thread (the core's set loop, its datagram sent)."""
        with self._cv:
            self._last_set = time.monotonic()
            jobs = self._due_jobs(self._last_set)
            if self._after:
                jobs.append(self._after.popleft())
        for job in jobs:
            self._run_job(job)

    def _overwritten(self, camera_set: CameraSet, when: str) -> bool:
        stale = overwritten(camera_set)
        if stale:
            self.on_drop("handoff_overwritten", f"hand-off tensors {', '.join(stale)} were "
                         f"overwritten by their producer {when}; set not published")
        return bool(stale)

    def _loop(self) -> None:
        name_this_thread()
        while True:
            with self._cv:  # not while a set is pooled inline (reserve_or_submit): one pool at a time
                while self._running and (not self._queue or self.busy):
                    self._cv.wait(0.5)
                    self._hand_back_timers()
                if not self._running:
                    return
                camera_set = self._queue.popleft()
                self.busy = True
            self._process_guarded(camera_set)

    def _process_guarded(self, camera_set: CameraSet) -> None:
        """(``busy`` set by the caller) ``process``, never raising; then idle again."""
        self._current = (time.monotonic(), threading.get_ident(), camera_set.stamp_ns)
        try:
            self.process(camera_set)
            if INJECTED_STALL:
                injected_stall("pooling")
        except Exception as e:  # never let one bad set kill the thread
            self.on_drop("internal_error", f"{type(e).__name__}: {e}")
        finally:
            self._current = None
            with self._cv:
                self._last_set = time.monotonic()
                jobs = self._due_jobs(self._last_set)
                if self._after:
                    jobs.append(self._after.popleft())
            for job in jobs:  # still busy: a set arriving meanwhile is queued, not pooled inline
                self._run_job(job)
            with self._cv:
                self.busy = False
                self._busy_changed()
                self._cv.notify_all()

    def process(self, camera_set: CameraSet) -> PoolResult | None:
        started = time.perf_counter()
        invalid = {c: why for c, why in self.calibration.invalid.items() if c in camera_set.frames}
        if invalid:
            self.on_drop("calibration_invalid", f"cameras {sorted(invalid)} have no usable calibration: "
                         + "; ".join(invalid.values()))
            return None
        if self.prepare():
            self.on_rebuild(self._rig)
        rig = self._rig
        t0 = time.perf_counter()
        N, D, H, W = rig.depth_shape
        C = rig.channels
        cameras = []
        for cam in rig.cameras:
            frames = camera_set.frames.get(cam.name)
            if frames is None:  # zero_fill: the backend zeroes the slot, which adds nothing to the grid
                cameras.append((None, None))
                continue
            d, f = frames["depth"][1], frames["feat"][1]
            if d.shape != (D, H, W) or f.shape != (H, W, C):
                self.on_drop("bad_shape", f"camera {cam.name}: depth {d.shape} / feat {f.shape} do not fit "
                             f"the current rig ({D}, {H}, {W}) / ({H}, {W}, {C})")
                return None
            cameras.append((d, f))
        if self._overwritten(camera_set, "before it was read"):
            return None
        dtype = self.out_dtype() if callable(self.out_dtype) else self.out_dtype
        out = self.out_buffer.view((*rig.grid_shape, C), dtype)
        t1 = time.perf_counter()
        try:
            with self.pool_guard():
                bev = self.backend.pool_cameras(decode_mixed_e4m3(cameras), out=out, host_copy=self.host_grid())
        except NonFiniteInput as e:  # found by the backend's own (device) check: the node's reason
            self.on_drop("non_finite", str(e))
            return None
        except InputError as e:
            self.on_drop("backend_input_error", str(e))
            return None
        except NonFiniteOutput as e:
            self.on_drop("non_finite_output", f"{e}; set not published")
            return None
        t2 = time.perf_counter()
        if self._overwritten(camera_set, "while it was read"):  # the seqlock's second look
            return None
        result = PoolResult(camera_set, bev, rig, t2 - t1, t1 - t0, started,
                            getattr(self.backend, "last_frame_timing", None))
        self.on_result(result)
        if self.after_pool is not None:
            self.after_pool(camera_set)
        return result
