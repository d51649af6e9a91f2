"""The cuda backend: the V3 launch inside the shared GPU frame path (backends/gpu_frame.py).

prepare(map) (once per calibration, from any thread): validate the map, upload it and its V3
schedule, choose the precision (``auto``: measured on whole frames) and the launch (measured
per GPU and map, cached as typed records), and set up the frame: pinned per-camera staging,
device buffers and the frame graph (captured on the first frame of a wire dtype).
pool_cameras(cameras, out) (per frame, from any thread): each payload copied once into its slot,
one graph replay (H2D, conversion and checks on the device, kernel, epilogue, D2H into ``out``),
one sync, one flag read.
"""
from __future__ import annotations

import logging

import numpy as np

from ..base import Backend, BackendUnavailable
from ..choices import ChoiceStore, LaunchChoice, PrecisionChoice, choice_key
from ..gpu_frame import DeviceOutput, GpuFrame
from ..planning import FP8_KERNEL_OUT_SCALE
from ..staging import ALL_WIRE, split_cameras
from ...scatter_map import ScatterMap
from .launch import PRECISION_INPUT
from .precision_select import decide, fp8_within_tolerance
from .runtime import MapOnDevice, get_runtime

log = logging.getLogger(__name__)


class CudaBackend(Backend):
    name = "cuda"
    wire_dtypes = ALL_WIRE
    checks_values_on_device = True  # NaN/Inf and range checks are flag bits of the frame graph

    def __init__(self, precision: str = "fp16", device: int = 0, accumulate: str = "f32",
                 kernel: str | None = None, k_min: int = 16, threads: int = 256, autotune: bool = True,
                 check_finite: bool = True, host_memory: str = "auto", fp8_scales=(1.0, 1.0),
                 choice_store: ChoiceStore | None = None, **_ignored):
        super().__init__(precision, check_finite)
        if precision == "fp32":
            raise BackendUnavailable("cuda backend runs fp16 or fp8 (or auto); fp32 is the cpu backend's")
        self.rt = get_runtime(int(device))  # raises BackendUnavailable without a GPU
        self.accumulate, self.kernel_override, self.k_min, self.threads = accumulate, kernel, k_min, threads
        self.autotune = autotune and kernel is None
        self.host_memory = host_memory
        self._fp8_scales = tuple(fp8_scales)
        self.store = choice_store or ChoiceStore()
        self.launch_choice: LaunchChoice | None = None
        self.auto_record: PrecisionChoice | None = None
        self.md: MapOnDevice | None = None
        self.plan = None
        self.frame: GpuFrame | None = None
        self._hooks: list = []

    # --- calibration ------------------------------------------------------------------------
    def prepare(self, smap: ScatterMap) -> None:
        super().prepare(smap)
        self.rt.device.make_current()
        self._release()
        self.md = MapOnDevice(self.rt, smap, k_min=self.k_min, threads=self.threads)
        self.auto_record = None
        if self.requested_precision == "auto":
            self.precision = self._auto_precision()
        else:
            self.precision = self.requested_precision
            self.frame, self.plan, self.launch_choice = self._frame_for(self.precision)
        log.info("cuda backend: %s, %s, kernel %s grid %s block %s, %s host memory", self.precision,
                 self.md.regime(self.precision), self.plan.kernel, self.plan.grid, self.plan.block,
                 self.frame.host_memory)

    def _frame_for(self, precision: str):
        """(GpuFrame, plan, launch choice) of ``precision`` on the prepared map."""
        choice = self._tuned_launch(precision) if self.autotune else None
        out_scale = FP8_KERNEL_OUT_SCALE if precision == "fp8" else 1.0
        plan = self.md.plan("v3", precision, choice=choice, acc=self.accumulate, kernel=self.kernel_override,
                            out_scale=out_scale)
        md = self.md
        self.rt.module.function(plan.kernel)  # resolved here: not while the frame graph is captured
        frame = GpuFrame(self.rt, self.smap, precision, lambda s, b: md.enqueue(plan, b, s),
                         check_finite=self.check_finite, host_memory=self.host_memory, fp8_scales=self._fp8_scales)
        frame.after_frame = self._hooks
        return frame, plan, choice

    # --- per frame --------------------------------------------------------------------------
    def pool_cameras(self, cameras, out: np.ndarray | None = None) -> np.ndarray:
        self._require_map()
        return self.frame.run(cameras, out)

    def pool(self, depth: np.ndarray, feat: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return self.pool_cameras(split_cameras(depth, feat), out)

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
        ``output.stream`` there, and they run right after the frame's own work (a copy made after
        ``pool_cameras`` returns, from ``device_output()``, is as correct, one sync later)."""
        self._hooks.append(hook)

    def remove_frame_hook(self, hook) -> None:
        self._hooks.remove(hook)

    def kernel_time_us(self, reps: int = 100) -> float:
        """Graph-replay median of the prepared kernel alone (no copies): the frame's GPU floor."""
        from .timing import time_graph

        self._require_map()
        f = self.frame
        bindings = {"depth": f._kin["depth"], "feat": f._kin["feat"], "out": f._kout}
        return time_graph(self.rt.stream, lambda i, s: self.md.enqueue(self.plan, bindings, s), reps=reps)["median_us"]

    # --- measured choices ---------------------------------------------------------------------
    def _tuned_launch(self, precision: str) -> LaunchChoice:
        from .autotune import tune_v3

        key = choice_key(LaunchChoice, backend=self.name, device=self.rt.device.name, smap=self.smap,
                         precision=precision)
        cached = self.store.load(key, LaunchChoice)
        if cached:
            return cached
        best, _ = tune_v3(self.md, precision)
        choice = LaunchChoice(best.kernel, best.k_min, best.threads, best.median_us)
        self.store.store(key, choice)
        return choice

    def _auto_precision(self) -> str:
        """FP8 only when its whole frame (staging, conversion, kernel, epilogue, copies) is measured
        faster than FP16's and its grid is within the FP8 tolerance of the FP64 reference."""
        from ...reference import pool_reference

        smap = self.smap
        key = choice_key(PrecisionChoice, backend=self.name, device=self.rt.device.name, smap=smap)
        cached = self.store.load(key, PrecisionChoice)
        if cached is None:
            rng = np.random.default_rng(0)
            depth = rng.random(smap.depth_shape)
            feat = rng.uniform(-1, 1, smap.feat_shape)
            wire = split_cameras(depth.astype(np.float16), feat.astype(np.float16))
            frames = {p: self._frame_for(p) for p in ("fp16", "fp8")}
            times = {p: f[0].frame_time_us(wire) for p, f in frames.items()}
            out8 = frames["fp8"][0].run(split_cameras(depth.astype(np.float32), feat.astype(np.float32)))
            ok, err = fp8_within_tolerance(out8, pool_reference(depth, feat, smap),
                                           pool_reference(np.abs(depth), np.abs(feat), smap))
            cached = self.auto_record = PrecisionChoice(decide(times["fp16"], times["fp8"], ok), times["fp16"],
                                                        times["fp8"], err, ok)
            log.info("precision auto: %s (frame fp16 %.1f us, fp8 %.1f us, fp8 max err %.4f, within tol %s)",
                     cached.precision, times["fp16"], times["fp8"], err, ok)
            self.store.store(key, cached)
            for p, (frame, plan, choice) in frames.items():
                if p == cached.precision:
                    self.frame, self.plan, self.launch_choice = frame, plan, choice
                else:
                    frame.close()
        else:
            log.info("precision auto: %s (cached for %s)", cached.precision, key)
            self.frame, self.plan, self.launch_choice = self._frame_for(cached.precision)
        return cached.precision

    # --- misc ---------------------------------------------------------------------------------
    def describe(self) -> dict:
        d = {"backend": self.name, "precision": self.precision, "device": self.rt.device.name,
             "arch": self.rt.device.arch, "l2_bytes": self.rt.device.l2_bytes}
        # one read of each: the pooling thread may be re-preparing (a calibration change) meanwhile
        md, plan, frame, choice = self.md, self.plan, self.frame, self.launch_choice
        if md is not None and plan is not None and frame is not None:
            sched = md.sched_for(plan.kernel, plan.block[0], choice.k_min if choice else None)
            d.update(regime=md.regime(self.precision), kernel=plan.kernel,
                     grid=list(plan.grid), block=list(plan.block),
                     points_per_slot=sched.points_per_slot, teams=sched.num_teams,
                     launch_choice=[choice.kernel, choice.k_min, choice.threads] if choice else None,
                     input_dtype=PRECISION_INPUT[self.precision], output_dtype=plan.out_dtype,
                     host_memory=frame.host_memory, check_finite=self.check_finite)
        if self.auto_record:
            d["auto"] = dict(vars(self.auto_record))
        return d

    def _release(self) -> None:
        if self.frame is not None:
            self.frame.close()
        self.frame = None
        if self.md is not None:
            self.md.free()
        self.md = None

    def close(self) -> None:
        self._release()
