"""GpuBackend: what the cuda and tensorrt backends share, around one pooling step each.

prepare(map) (once per calibration, from any thread): make the device current, adopt the map,
choose the precision (``auto``: measured on whole frames, FP8 kept only when faster and within
tolerance) and the launch (measured per GPU and map, cached as typed records), and build the
frame (frame.GpuFrame: pinned per-camera staging, device buffers, one CUDA graph per frame).
pool_cameras(cameras, out) (per frame, from any thread): one frame run.

A subclass says what its pooling step is: ``_adopt_map`` (per-map device state), ``_frame_for``
(the frame, launch plan and launch choice of one precision), ``_launch_key`` and
``_measure_launch`` (what a launch choice is keyed by, and how it is measured).
"""
from __future__ import annotations

import logging
from abc import abstractmethod

import numpy as np

from ...device.device_payloads import any_device
from ...device.runtime import get_runtime
from ...errors import BackendUnavailable
from ...kernels.planning import LaunchChoice
from ...kernels.precision import decide, fp8_within_tolerance
from ...scatter_map import ScatterMap
from ..base import Backend
from ..staging import ALL_WIRE, split_cameras
from .choices import ChoiceStore, PrecisionChoice, choice_key
from .device_frame import DeviceFrame
from .frame import DeviceOutput, GpuFrame

log = logging.getLogger(__name__)


class GpuBackend(Backend):
    wire_dtypes = ALL_WIRE
    checks_values_on_device = True  # NaN/Inf and range checks are flag bits of the frame graph

    def __init__(self, precision: str, device: int = 0, *, autotune: bool = True, check_finite: bool = True,
                 host_memory: str = "auto", fp8_scales=(1.0, 1.0), stream_priority: str = "highest",
                 choice_store: ChoiceStore | None = None):
        super().__init__(precision, check_finite)
        if precision == "fp32":
            raise BackendUnavailable(f"{self.name} backend runs fp16, fp8 or auto (fp32 is the cpu backend's)")
        self.rt = get_runtime(int(device), stream_priority)  # raises BackendUnavailable without a GPU
        self.autotune = autotune
        self.host_memory = host_memory
        self._fp8_scales = (float(fp8_scales[0]), float(fp8_scales[1]))
        self.store = choice_store or ChoiceStore()
        self.launch_choice: LaunchChoice | None = None
        self.auto_record: PrecisionChoice | None = None
        self.plan = None
        self.frame: GpuFrame | None = None
        self._device_run = None  # device_inputs.DeviceInputRun of self.frame, made on first use
        self._hooks: list = []

    @property
    def last_frame_timing(self):
        """The last frame's FrameTiming (device time, wait for the GPU), or None before one."""
        return self.frame.last_timing if self.frame is not None else None

    # --- calibration ------------------------------------------------------------------------
    def prepare(self, smap: ScatterMap) -> None:
        super().prepare(smap)
        self.rt.device.make_current()
        self._release()
        self._adopt_map()
        self.auto_record = None
        if self.requested_precision == "auto" and self._fp8_runs():
            self.precision = self._auto_precision()
        else:
            self.precision = "fp16" if self.requested_precision == "auto" else self.requested_precision
            self.frame, self.plan, self.launch_choice = self._frame_for(self.precision)
        self._prepared()

    def _adopt_map(self) -> None:
        """Per-map device state the pooling step needs (self.smap is validated)."""

    def _prepared(self) -> None:
        """After prepare: the subclass logs what it chose and drops what it no longer needs."""

    def _fp8_runs(self) -> bool:
        return True

    @abstractmethod
    def _frame_for(self, precision: str):
        """(GpuFrame, launch plan, LaunchChoice or None) of ``precision`` on the prepared map."""

    # --- per frame --------------------------------------------------------------------------
    def pool_cameras(self, cameras, out: np.ndarray | None = None, host_copy: bool = True) -> np.ndarray | None:
        """Host payloads: the frame graph (frame.GpuFrame; its D2H is part of the graph). A set
        holding device payloads (hand-off views) is read on the device instead
        (device_inputs.DeviceInputRun), which with ``host_copy=False`` leaves the grid on the
        device (``device_output()``, frame hooks) and returns None."""
        self._require_map()
        if any_device(cameras):
            return self.device_input_run().run(cameras, out, host_copy)
        return self.frame.run(cameras, out)

    def warm_device_inputs(self, out: np.ndarray | None = None) -> None:
        """Run the device-input path once on the prepared map, every camera missing (zeros), no
        host copy, no frame hooks: its buffers, first kernel launches (CUDA loads kernels on first
        use) and eager frame happen now, not in the first hand-off set (at 100 Hz the sets that
        arrive while one takes tens of milliseconds are lost). ``out``: the array the real sets
        will name (its dtype picks the grid's)."""
        self._require_map()
        cameras = [(None, None)] * self.smap.depth_shape[0]
        self.device_input_run().run(cameras, out, host_copy=False, publish=False)

    def device_input_run(self):
        """The device-input path of the prepared frame (device_inputs.DeviceInputRun), made on first use."""
        from .device_inputs import DeviceInputRun

        run = self._device_run
        if run is None or run.frame is not self.frame:  # made per prepared frame
            if run is not None:
                run.close()
            run = self._device_run = DeviceInputRun(self)
        return run

    def pool(self, depth: np.ndarray, feat: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return self.pool_cameras(split_cameras(depth, feat), out)

    def device_frame(self) -> DeviceFrame:
        """A new DeviceFrame (device tensors in, a device grid out, on the caller's stream) around
        this backend's pooling step at the prepared precision; the caller closes it before the
        next ``prepare``. The device-input path and BevPooler run theirs on it."""
        self._require_map()
        return DeviceFrame(self.rt, self.smap, self.frame.precision, self.frame.enqueue_kernel,
                           check_finite=self.check_finite)

    def _new_frame(self, precision: str, enqueue) -> GpuFrame:
        frame = GpuFrame(self.rt, self.smap, precision, enqueue, check_finite=self.check_finite,
                         host_memory=self.host_memory, fp8_scales=self._fp8_scales)
        frame.after_frame = self._hooks
        return frame

    @property
    def check_finite(self) -> bool:
        return self._check_finite

    @check_finite.setter
    def check_finite(self, on: bool) -> None:
        """input.check_finite; may change at run time (the frame graph is re-captured once)."""
        self._check_finite = bool(on)
        if getattr(self, "frame", None) is not None:
            self.frame.check_finite = on

    @property
    def fp8_scales(self) -> tuple[float, float]:
        """Scales raw E4M3 inputs carry (powers of two; default 1, 1): a change needs no re-capture."""
        return self._fp8_scales

    @fp8_scales.setter
    def fp8_scales(self, scales) -> None:
        if self.frame is not None:
            self.frame.fp8_scales = scales
        self._fp8_scales = (float(scales[0]), float(scales[1]))

    # --- zero-copy consumers (same-host hand-off) --------------------------------------------
    def device_output(self) -> DeviceOutput:
        """The last frame's BEV on the device (pointer, bytes, published dtype, shape, CUstream
        handle, Device), valid until the next frame; before the first frame, the kernel's output
        buffer (for sizing). After ``prepare``."""
        self._require_map()
        return self.frame.device_output()

    def add_frame_hook(self, hook) -> None:
        """``hook(DeviceOutput)`` runs in every pool after the frame's graph is launched and before
        the host waits for it: enqueue a device-to-device copy and an event record on
        ``output.stream`` there, and they run right after the frame's own work."""
        self._hooks.append(hook)

    def remove_frame_hook(self, hook) -> None:
        self._hooks.remove(hook)

    def device_copy(self, dst: int, src: int, nbytes: int, stream_handle) -> None:
        """``nbytes`` from ``src`` to ``dst`` (device addresses) by a kernel on ``stream_handle``: a
        frame hook's copy (the grid into a hand-off ring slot) keeps the set's GPU work one run of
        kernels."""
        from ...device.driver import Stream
        from . import kernel_copies

        kernel_copies.copy(self.rt, Stream.wrap(int(stream_handle)), dst, src, nbytes)

    # --- measured choices ---------------------------------------------------------------------
    def _tuned_launch(self, precision: str) -> LaunchChoice:
        key = self._launch_key(precision)
        cached = self.store.load(key, LaunchChoice)
        if cached:
            return cached
        choice = self._measure_launch(precision)
        self.store.store(key, choice)
        return choice

    def _launch_key(self, precision: str) -> str:
        return choice_key(LaunchChoice, backend=self.name, device=self.rt.device.name, smap=self.smap,
                          precision=precision)

    @abstractmethod
    def _measure_launch(self, precision: str) -> LaunchChoice:
        """The fastest V3 launch of ``precision`` on the prepared map, measured on this GPU."""

    def _auto_precision(self) -> str:
        """FP8 only when its whole frame (staging, conversion, kernel, epilogue, copies) is measured
        faster than FP16's and its grid is within the FP8 tolerance of the FP64 reference."""
        from ...reference import pool_reference

        smap = self.smap
        key = choice_key(PrecisionChoice, backend=self.name, device=self.rt.device.name, smap=smap)
        cached = self.store.load(key, PrecisionChoice)
        if cached is not None:
            log.info("precision auto: %s (cached for %s)", cached.precision, key)
            self.frame, self.plan, self.launch_choice = self._frame_for(cached.precision)
            return cached.precision
        rng = np.random.default_rng(0)
        depth = rng.random(smap.depth_shape)
        feat = rng.uniform(-1, 1, smap.feat_shape)
        wire = split_cameras(depth.astype(np.float16), feat.astype(np.float16))
        frames = {p: self._frame_for(p) for p in ("fp16", "fp8")}
        times = {p: f[0].frame_time_us(wire) for p, f in frames.items()}
        out8 = frames["fp8"][0].run(split_cameras(depth.astype(np.float32), feat.astype(np.float32)))
        ok, err = fp8_within_tolerance(out8, pool_reference(depth, feat, smap),
                                       pool_reference(np.abs(depth), np.abs(feat), smap))
        record = self.auto_record = PrecisionChoice(decide(times["fp16"], times["fp8"], ok), times["fp16"],
                                                    times["fp8"], err, ok)
        log.info("precision auto: %s (frame fp16 %.1f us, fp8 %.1f us, fp8 max err %.4f, within tol %s)",
                 record.precision, times["fp16"], times["fp8"], err, ok)
        self.store.store(key, record)
        for p, (frame, plan, choice) in frames.items():
            if p == record.precision:
                self.frame, self.plan, self.launch_choice = frame, plan, choice
            else:
                frame.close()
        return record.precision

    # --- description, teardown ------------------------------------------------------------------
    def describe(self) -> dict:
        dev = self.rt.device
        d = {"backend": self.name, "precision": self.precision, "device": dev.name, "arch": dev.arch,
             "l2_bytes": dev.l2_bytes}
        if self.auto_record:
            d["auto"] = dict(vars(self.auto_record))
        return d

    def _release(self) -> None:
        """Free per-map state (the frame here; subclasses add theirs)."""
        if self._device_run is not None:
            self._device_run.close()
            self._device_run = None
        if self.frame is not None:
            self.frame.close()
        self.frame = None

    def close(self) -> None:
        self._release()
