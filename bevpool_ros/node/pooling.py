"""The pooling thread: camera set -> stacked tensors -> backend.pool -> BEV grid.

It runs apart from the ROS executor so that a slow pool never blocks subscriptions, timers
or parameter services. Its input queue is bounded: when a new set arrives while the queue is
full, the oldest waiting set is dropped (counted ``worker_busy``); fresher data wins.
No ROS import: results leave through the ``on_result`` / ``on_drop`` callbacks.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..backends import InputError
from ..scatter_map import scatter_map_for
from .calibration import LiveCalibration
from .sync import CameraSet


@dataclass
class PoolResult:
    camera_set: CameraSet
    bev: np.ndarray
    rig: object            # the Rig the grid was pooled on
    pool_s: float          # backend.pool only
    assemble_s: float      # stacking the per-camera tensors
    started: float         # perf_counter when the pooling thread took the set


class PoolingWorker:
    def __init__(self, backend, calibration: LiveCalibration, on_result, on_drop, queue_size: int = 2,
                 on_rebuild=None):
        self.backend = backend
        self.calibration = calibration
        self.on_result = on_result
        self.on_drop = on_drop
        self.on_rebuild = on_rebuild or (lambda rig: None)
        self.queue_size = queue_size
        self._queue: deque[CameraSet] = deque()
        self._cv = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None
        self._prepared_version = None
        self._buffers: dict = {}
        self.rebuilds = 0
        self.busy = False

    # lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.prepare()  # the first scatter map is built before any data arrives
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="bevpool-pooling", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._running = False
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def prepare(self) -> bool:
        """Adopt the current calibration if it changed; True when a new map was prepared."""
        version = self.calibration.version
        if version == self._prepared_version:
            return False
        rig = self.calibration.rig
        self.backend.prepare(scatter_map_for(rig))
        self._prepared_version = version
        self._rig = rig
        self.rebuilds += 1
        return True

    # input ------------------------------------------------------------------------------
    def submit(self, camera_set: CameraSet) -> None:
        with self._cv:
            self._queue.append(camera_set)
            while len(self._queue) > self.queue_size:
                self._queue.popleft()
                self.on_drop("worker_busy", "pooling thread busy: oldest waiting set dropped")
            self._cv.notify()

    @property
    def queued(self) -> int:
        return len(self._queue)

    # work -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cv:
                while self._running and not self._queue:
                    self._cv.wait(0.5)
                if not self._running:
                    return
                camera_set = self._queue.popleft()
                self.busy = True
            try:
                self.process(camera_set)
            except Exception as e:  # never let one bad set kill the thread
                self.on_drop("internal_error", f"{type(e).__name__}: {e}")
            finally:
                self.busy = False

    def _buffer(self, name: str, shape, dtype) -> np.ndarray:
        key = (name, tuple(shape), np.dtype(dtype).name)
        buf = self._buffers.get(key)
        if buf is None:
            self._buffers = {k: v for k, v in self._buffers.items() if k[0] != name}
            buf = self._buffers[key] = np.empty(shape, dtype)
        return buf

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
        arrays = [f[s][1] for f in camera_set.frames.values() for s in ("depth", "feat")]
        # float16 end to end only when everything is float16 and the backend is a GPU one
        half = self.backend.name != "cpu" and all(a.dtype == np.float16 for a in arrays)
        dtype = np.float16 if half else np.float32
        depth = self._buffer("depth", (N, D, H, W), dtype)
        feat = self._buffer("feat", (N, H, W, C), dtype)
        for n, cam in enumerate(rig.cameras):
            frames = camera_set.frames.get(cam.name)
            if frames is None:  # zero_fill: a zero depth distribution adds nothing to the grid
                depth[n] = 0
                feat[n] = 0
                continue
            d, f = frames["depth"][1], frames["feat"][1]
            if d.shape != (D, H, W) or f.shape != (H, W, C):
                self.on_drop("bad_shape", f"camera {cam.name}: depth {d.shape} / feat {f.shape} do not fit "
                             f"the current rig ({D}, {H}, {W}) / ({H}, {W}, {C})")
                return None
            np.copyto(depth[n], d, casting="same_kind")
            np.copyto(feat[n], f, casting="same_kind")
        t1 = time.perf_counter()
        try:
            bev = self.backend.pool(depth, feat)
        except InputError as e:
            self.on_drop("backend_input_error", str(e))
            return None
        t2 = time.perf_counter()
        if not np.isfinite(bev).all():
            self.on_drop("non_finite_output", "backend produced NaN/Inf; set not published")
            return None
        result = PoolResult(camera_set, bev, rig, t2 - t1, t1 - t0, started)
        self.on_result(result)
        return result
