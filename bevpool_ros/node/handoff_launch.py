"""The node's sets launched by the hand-off core (CoreLaunch), and the cuda backend's graphs of
hand-off sets it shares with the core's launcher (handoff/native/launcher.py, SharedGraphs), so
that a set whose slots the backend met before is launched, checked and announced by the core in
one call, from the set loop's thread, as the set completes.

A set the backend pools in Python (the first of each slot combination, and any set the launcher
cannot take) leaves its graph behind once the backend captured one (a binding met twice,
device_frame.py): ``after_set`` hands it to the launcher under the set's key, the (ring id, slot)
of each tensor in the order the set loop lists them (cameras in rig order, depth then feat). The
backend destroying a graph (64 kept, a new calibration) takes it back from the launcher first."""
from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager

import numpy as np

from ..cameras.sync import STREAMS
from ..handoff.native.core import Launch
from ..handoff.native.setloop import GATE_ARMED, GATE_BUSY, GATE_EPOCH, GATE_STAMP, GATE_VERSION, GATE_WORDS
from ..ros.liveness import INJECTED_STALL

LAUNCH_BYTES = ctypes.sizeof(Launch)  # a REC_LAUNCHED record's data: bp_launch, then the BevHandoff


def set_key(camera_set, cameras) -> tuple | None:
    """The launcher's key of a set of hand-off views (``cameras``: the rig's names in order);
    None when a camera is missing or a payload is no hand-off view (no graph of the core's)."""
    key = []
    for cam in cameras:
        streams = camera_set.frames.get(cam)
        if streams is None:
            return None
        for stream in STREAMS:
            view = streams[stream][1]
            if not hasattr(view, "ring_id"):
                return None
            key.append((view.ring_id, view.slot))
    return tuple(key)


def member_key(members) -> tuple:
    """The same key of the set loop's members (core.Member)."""
    return tuple((m.ring_id, m.values.slot) for m in members)


class SharedGraphs:
    def __init__(self, launcher, run):
        """``run``: the backend's device-input path (backends/gpu/device_inputs.DeviceInputRun)."""
        self.launcher, self.frame = launcher, run.device
        self._keys: dict = {}  # the frame's graph key -> the launcher's
        self.frame.on_destroy.append(self._destroyed)

    def after_set(self, key: tuple | None) -> None:
        """Python pooled a set of ``key`` (set_key): its graph, if the backend replayed one, goes to
        the launcher."""
        graph = self.frame.last_graph
        if key is None or graph is None:
            return
        self._keys[self.frame.last_key] = key
        self.launcher.remember(key, int(graph.exec))

    def forget_ring(self, ring_id: int) -> None:
        """A producer's ring is unmapped: the graphs that read its slots (their addresses) go, even
        though the backend keeps them (a ring mapped again may sit elsewhere)."""
        for frame_key, key in list(self._keys.items()):
            if any(rid == ring_id for rid, _ in key):
                self.launcher.forget(key)
                del self._keys[frame_key]

    def _destroyed(self, frame_key, graph) -> None:
        key = self._keys.pop(frame_key, None)
        if key is not None:
            self.launcher.forget(key)

    def close(self) -> None:
        """Before the backend's frame changes: the launcher keeps none of its graphs."""
        if self._destroyed in self.frame.on_destroy:
            self.frame.on_destroy.remove(self._destroyed)
        self.launcher.forget_all()
        self._keys.clear()


class GateStamp:
    """publishing.LastStamp in the launcher's gate words: the core checks and moves the same
    (epoch, stamp) for the sets it publishes."""

    def __init__(self, gate):
        self.gate = gate

    def get(self) -> tuple | None:
        epoch = int(self.gate[GATE_EPOCH])
        return None if epoch < 0 else (epoch, int(self.gate[GATE_STAMP]))

    def set(self, epoch: int, stamp_ns: int) -> None:
        self.gate[GATE_STAMP] = stamp_ns
        self.gate[GATE_EPOCH] = epoch


class CoreLaunch:
    """The node's sets pooled by the hand-off core's launcher (handoff/native/launcher.py) from the
    set loop's thread, without Python before their grid's datagram and its ROS copy: made after the first set
    Python pooled whose tensors are all hand-off views (the backend's device-input path, its
    graph shared), armed while nothing but the launcher's work is wanted per set:

      * the node active, someone subscribed (processing.skip_without_subscribers), nobody on the
        BevFeature or image topics (the grid stays on the GPU);
      * the backend prepared for the current calibration, no camera's calibration invalid, the
        published dtype the launcher's grid's.

    A calibration change stops it at once (the gate's version word, moved by LiveCalibration's
    hook): the next set goes to Python, which re-prepares the backend; the launcher is then made
    again for the new frame. Every other condition is judged after each set Python pools and at
    each /diagnostics status (``status``): a BevFeature subscriber that appears gets grids within
    one diagnostics period. A failed launch (the driver) hands every later set to Python, said once.
    """

    def __init__(self, lib, *, intake, inputs, worker, outputs, calibration, ego_frame: str, out_dtype, wanted,
                 active, warn):
        """``intake``: the set loop (node/handoff_sets.SetLoopIntake); ``inputs``: HandoffInputs
        (its reader's rings); ``worker``: PoolingWorker; ``outputs``: publishing.Outputs (its
        native hand-off ring); ``out_dtype()``, ``wanted()`` (someone would receive a grid),
        ``active()``: the node's; ``warn(key, text)``: the node's throttled warning."""
        self.lib, self.intake, self.inputs, self.worker, self.outputs = lib, intake, inputs, worker, outputs
        self.calibration, self.ego_frame = calibration, ego_frame
        self.out_dtype, self.wanted, self.active, self.warn = out_dtype, wanted, active, warn
        self.gate = np.zeros(GATE_WORDS, np.int64)
        self.gate[GATE_ARMED] = self.gate[GATE_EPOCH] = -1
        self.launcher = self.shared = None
        self._built_for = None  # (device-input run, grid dtype) the launcher was made for
        self._template = None   # its BevHandoff template's id in the output ring
        self._ros_copy = None   # the launcher's publish of the grids' ROS copies (native.ros_copy)
        self._rings: dict[int, str] = {}  # producer rings the launcher knows -> their socket paths
        self._failures = 0      # the loop's launch_failed count already handled
        self.off_reason = "waiting for a set pooled by Python"
        self._lock = threading.Lock()  # made and torn down by the pooling thread, closed by the node's
        worker.pool_guard, worker.on_busy, worker.after_pool = self.held, self._busy, self._after_pool
        outputs.last = GateStamp(self.gate)
        intake.on_launched = self._launched
        calibration.on_change.append(self._calibration_changed)
        self._calibration_changed()

    # --- the gate ------------------------------------------------------------------------------
    def _busy(self, n: int) -> None:
        self.gate[GATE_BUSY] = n

    def _calibration_changed(self) -> None:
        """(LiveCalibration's lock held) The launcher takes no set of the old calibration from now on."""
        c = self.calibration
        self.gate[GATE_VERSION] = -2 if c.invalid else c.version

    def rearm(self) -> None:
        """Judge whether the launcher may take the next sets (the pooling thread, the status)."""
        version = self.calibration.version  # read once: a change after it leaves the gate closed
        reason = self._why_not(version)
        self.off_reason = reason
        self.gate[GATE_ARMED] = -1 if reason else version

    def _why_not(self, version: int) -> str:
        if self.launcher is None:
            return self.off_reason if self._built_for is None else "no launcher"
        failed = self.intake.loop.counts().get("intake_launch_failed", 0)
        if failed > self._failures:
            self._failures = failed
            self._built_for = ("failed",)
            self.warn("launch_failed", "the hand-off core's launch failed (see the internal_error drop); "
                      "every set is pooled by Python from now on")
        if self._built_for == ("failed",):
            return "a launch failed: sets are pooled by Python"
        if not self.active():
            return "node inactive"
        if not self.wanted():
            return "nobody subscribed"
        if self.outputs.host_grid_needed():
            return "a BevFeature or image subscriber wants the grid on the host"
        if self.calibration.invalid or self.worker.prepared_version != version:
            return "calibration changed: the next set re-prepares the backend"
        if np.dtype(self.out_dtype()) != self._built_for[1]:
            return "output.bev_dtype changed: the next set makes the launcher again"
        return ""

    def stop(self) -> None:
        """No launch from now on; returns once none runs (deactivation)."""
        self.gate[GATE_ARMED] = -1
        with self.held():
            pass

    # --- sets Python pools -----------------------------------------------------------------------
    @contextmanager
    def held(self):
        """Around the backend's pooling of a set in Python: no launch meanwhile (its buffers)."""
        launcher = self.launcher
        if launcher is None:
            yield
            return
        with launcher.held():
            yield

    def _after_pool(self, camera_set) -> None:
        """(pooling thread) A set Python pooled and published: its graph and rings go to the launcher."""
        key = set_key(camera_set, self.calibration.camera_names)
        if key is not None and self._built_for != ("failed",):
            try:
                self._build()
                if self.launcher is not None:
                    self._know_rings(camera_set)
                    self.shared.after_set(key)
            except Exception as e:  # noqa: BLE001 - the Python path goes on; said once
                self.teardown()
                self._built_for = ("failed",)
                self.off_reason = f"launcher not made: {type(e).__name__}: {e}"[:200]
                self.warn("launch_failed", f"the hand-off core's launcher is off: {self.off_reason}")
        self.rearm()

    def _build(self) -> None:
        from std_msgs.msg import Header

        from ..handoff.cdr_template import CdrTemplate
        from ..handoff.message import handoff_msg
        from ..handoff.native.launcher import NativeLauncher
        from ..handoff.producer import Written
        from .handoff_output import device_output

        backend = self.worker.backend
        make_run = getattr(backend, "device_input_run", None)
        handoff = self.outputs.handoff
        if make_run is None or handoff is None or handoff.ring.native is None:
            self._built_for = ("failed",)
            self.off_reason = ("the backend has no device-input path" if make_run is None
                               else "the output ring is not the core's")
            return
        run = make_run()
        out = device_output(backend)
        dtype = np.dtype(out.dtype)
        if self._built_for == (run, dtype):
            return
        self.teardown()
        flags_ptr, grid_ptr, grid_bytes = run.targets(dtype)
        if grid_ptr != out.ptr:
            raise RuntimeError("the device-input path's grid is not the published one")
        ring = handoff.ring
        header = Header(frame_id=self.ego_frame)
        msg = handoff_msg(header, self.calibration.rig, ring, Written(0, 1, ring.event_handles[0]), tuple(out.shape),
                          dtype, backend.name, backend.precision)
        self._template = ring.native.templates.add(CdrTemplate(msg))
        launcher = NativeLauncher(self.lib, context=int(backend.rt.device.ctx), stream=int(backend.rt.stream.handle),
                                  flags_ptr=flags_ptr, grid_ptr=grid_ptr, grid_bytes=grid_bytes, output=ring.native,
                                  template_id=self._template)
        self._ros_copy = self._make_ros_copy(handoff.pub)
        launcher.ros_copy(self._ros_copy)
        with self._lock:
            self.launcher, self.shared = launcher, SharedGraphs(launcher, run)
            self._built_for = (run, dtype)
        self.inputs.reader.unmapping.append(self._unring)
        self.intake.loop.launch_with(launcher, self.gate)
        if INJECTED_STALL == "launch":  # a GPU wait that never ends, for the watchdog's tests
            self.intake.loop.inject_stall(-1)

    def _make_ros_copy(self, publisher):
        """The launcher publishes the grids' ROS copies itself where the core reaches this process's
        rcl; else (None) Python publishes each after its record, said once."""
        from ..handoff.native.ros_copy import NativeRosCopy, RosCopyUnavailable

        try:
            return NativeRosCopy(self.lib, publisher)
        except RosCopyUnavailable as e:
            self.warn("ros_copy_in_python", f"the hand-off core cannot publish the grids' ROS copies ({e}): "
                      "Python publishes them")
            return None

    def _know_rings(self, camera_set) -> None:
        reader = self.inputs.reader
        for streams in camera_set.frames.values():
            for _, view in streams.values():
                ring = view.mapped
                if ring.ring_id not in self._rings:
                    self.launcher.ring(ring.ring_id, ring.control.block.words.ctypes.data, ring.ring_size,
                                       {h: int(e.event) for h, e in ring.events.items()})
                    self._rings[ring.ring_id] = next(
                        (p for p in reader.socket_paths if reader.ring(p) is ring), "")

    def _unring(self, ring) -> None:
        """(reader.unmapping) Before a producer's ring is unmapped: the launcher lets it go, and the
        graphs that read it."""
        launcher = self.launcher
        if launcher is not None and ring.ring_id in self._rings:
            self.shared.forget_ring(ring.ring_id)
            launcher.unring(ring.ring_id)
            self._rings.pop(ring.ring_id, None)

    # --- sets the core pooled --------------------------------------------------------------------
    def _launched(self, rec) -> None:
        """(the set loop's thread, the grid's datagram sent) Its ROS copy, counts, housekeeping."""
        result = Launch.from_buffer_copy(rec.data[:LAUNCH_BYTES])
        head = rec.head
        self.inputs.named(list(self._rings.values()))  # their producers are alive: no unmapping as idle
        self.outputs.launched(None if result.ros_copy else rec.data[LAUNCH_BYTES:],
                              (head.first_arrival, head.last_arrival), result.launched_ns * 1e-9,
                              result.done_ns * 1e-9)
        self.worker.launched_set()

    def status(self) -> dict:
        """For /diagnostics, judged again now (a subscriber came or went)."""
        self.rearm()
        counts = self.intake.loop.counts()
        state = "on" if self.gate[GATE_ARMED] >= 0 else f"off: {self.off_reason}"
        return {"handoff_core_launch": f"{state}; launched {counts.get('intake_launched', 0)}, "
                                       f"pooled by Python for want of a graph {counts.get('intake_launch_misses', 0)}"}

    # --- teardown ----------------------------------------------------------------------------
    def teardown(self) -> None:
        """The launcher goes (a new backend frame, a new dtype, close): no launch runs once it returns."""
        self.gate[GATE_ARMED] = -1
        with self._lock:
            launcher, shared = self.launcher, self.shared
            self.launcher = self.shared = None
            self._built_for = None if self._built_for != ("failed",) else self._built_for
        if launcher is None:
            return
        self.intake.loop.launch_with(None, None)
        launcher.ros_copy(None)
        if self._ros_copy is not None:
            self._ros_copy.close()
            self._ros_copy = None
        shared.close()
        reader = self.inputs.reader
        if reader is not None and self._unring in reader.unmapping:
            reader.unmapping.remove(self._unring)
        launcher.close()
        self._rings.clear()
        handoff = self.outputs.handoff
        if self._template is not None and handoff is not None and handoff.ring.native is not None:
            handoff.ring.native.templates.remove(self._template)
        self._template = None

    def close(self) -> None:
        self.teardown()
        if self._calibration_changed in self.calibration.on_change:
            self.calibration.on_change.remove(self._calibration_changed)
        self.intake.on_launched = None
