"""The cuda backend: the V3 launch, through the driver, as the GPU frame's pooling step.

prepare(map) (GpuBackend) uploads the map and its V3 schedule (runtime.MapOnDevice) and picks the
launch (autotuned per GPU and map unless a kernel is forced); every frame replays one graph.
"""
from __future__ import annotations

import logging

from ...kernels.planning import FP8_KERNEL_OUT_SCALE, LaunchChoice
from ...kernels.table import PRECISION_INPUT
from ..cuda.runtime import MapOnDevice
from .base import GpuBackend
from .choices import ChoiceStore

log = logging.getLogger(__name__)


class CudaBackend(GpuBackend):
    name = "cuda"

    def __init__(self, precision: str = "fp16", device: int = 0, accumulate: str = "f32",
                 kernel: str | None = None, k_min: int = 16, threads: int = 256, autotune: bool = True,
                 check_finite: bool = True, host_memory: str = "auto", fp8_scales=(1.0, 1.0),
                 choice_store: ChoiceStore | None = None, **_ignored):
        super().__init__(precision, device, autotune=autotune and kernel is None, check_finite=check_finite,
                         host_memory=host_memory, fp8_scales=fp8_scales, choice_store=choice_store)
        self.accumulate, self.kernel_override, self.k_min, self.threads = accumulate, kernel, k_min, threads
        self.md: MapOnDevice | None = None

    # --- calibration ------------------------------------------------------------------------
    def _adopt_map(self) -> None:
        self.md = MapOnDevice(self.rt, self.smap, k_min=self.k_min, threads=self.threads)

    def _prepared(self) -> None:
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
        return self._new_frame(precision, lambda s, b: md.enqueue(plan, b, s)), plan, choice

    # --- measurement -------------------------------------------------------------------------
    def kernel_time_us(self, reps: int = 100) -> float:
        """Graph-replay median of the prepared kernel alone (no copies): the frame's GPU floor."""
        from ..cuda.timing import time_graph

        self._require_map()
        f = self.frame
        bindings = {"depth": f._kin["depth"], "feat": f._kin["feat"], "out": f._kout}
        return time_graph(self.rt.stream, lambda i, s: self.md.enqueue(self.plan, bindings, s), reps=reps)["median_us"]

    def _measure_launch(self, precision: str) -> LaunchChoice:
        from ..cuda.autotune import tune_v3

        best, _ = tune_v3(self.md, precision)
        return LaunchChoice(best.kernel, best.k_min, best.threads, best.median_us)

    # --- description, teardown ------------------------------------------------------------------
    def describe(self) -> dict:
        d = super().describe()
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
        return d

    def _release(self) -> None:
        super()._release()
        if self.md is not None:
            self.md.free()
        self.md = None
