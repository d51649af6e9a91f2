"""The cuda backend: the V3 launch, through the driver, as the GPU frame's pooling step.

prepare(map) (GpuBackend) picks the launch (autotuned per GPU and map unless a kernel is forced)
and builds its operator (device/operator.V3Operator: schedule, plan, device arrays); every frame
replays one graph around ``V3Operator.enqueue``.
"""
from __future__ import annotations

import logging

from ..device.operator import V3Operator
from ..kernels.planning import FP8_KERNEL_OUT_SCALE, LaunchChoice
from ..kernels.table import PRECISION_DTYPES
from .gpu.base import GpuBackend
from .gpu.choices import ChoiceStore

log = logging.getLogger(__name__)


class CudaBackend(GpuBackend):
    name = "cuda"

    def __init__(self, precision: str = "fp16", device: int = 0, accumulate: str = "f32",
                 kernel: str | None = None, k_min: int = 16, threads: int = 256, autotune: bool = True,
                 check_finite: bool = True, host_memory: str = "auto", fp8_scales=(1.0, 1.0),
                 stream_priority: str = "highest", choice_store: ChoiceStore | None = None, **_ignored):
        super().__init__(precision, device, autotune=autotune and kernel is None, check_finite=check_finite,
                         host_memory=host_memory, fp8_scales=fp8_scales, stream_priority=stream_priority,
                         choice_store=choice_store)
        self.accumulate, self.kernel_override, self.k_min, self.threads = accumulate, kernel, k_min, threads
        self.ops: dict[str, V3Operator] = {}  # per precision: auto builds both, keeps one

    @property
    def op(self) -> V3Operator | None:
        """The operator of the prepared precision (None before prepare)."""
        return self.ops.get(self.precision)

    # --- calibration ------------------------------------------------------------------------
    def _prepared(self) -> None:
        for p in [p for p in self.ops if p != self.precision]:
            self.ops.pop(p).free()
        log.info("cuda backend: %s, %s, kernel %s grid %s block %s, %s host memory", self.precision,
                 self.op.regime, self.plan.kernel, self.plan.grid, self.plan.block, self.frame.host_memory)

    def _frame_for(self, precision: str):
        """(GpuFrame, plan, launch choice) of ``precision`` on the prepared map."""
        choice = self._tuned_launch(precision) if self.autotune else None
        old = self.ops.pop(precision, None)
        if old is not None:
            old.free()
        op = self.ops[precision] = V3Operator.build(
            self.rt, self.smap, precision, choice=choice, acc=self.accumulate, kernel=self.kernel_override,
            k_min=self.k_min, threads=self.threads, out_scale=FP8_KERNEL_OUT_SCALE if precision == "fp8" else 1.0)
        return self._new_frame(precision, op.enqueue), op.plan, choice

    # --- measurement -------------------------------------------------------------------------
    def kernel_time_us(self, reps: int = 100) -> float:
        """Graph-replay median of the prepared kernel alone (no copies): the frame's GPU floor."""
        from ..device.timing import time_graph

        self._require_map()
        f, op = self.frame, self.op
        bindings = {"depth": f._kin["depth"], "feat": f._kin["feat"], "out": f._kout}
        return time_graph(self.rt.stream, lambda i, s: op.enqueue(s, bindings), reps=reps)["median_us"]

    def _measure_launch(self, precision: str) -> LaunchChoice:
        from ..device.autotune import tune_v3

        best, _ = tune_v3(self.rt, self.smap, precision)
        return LaunchChoice(best.kernel, best.k_min, best.threads, best.median_us)

    # --- description, teardown ------------------------------------------------------------------
    def describe(self) -> dict:
        d = super().describe()
        # one read of each: the pooling thread may be re-preparing (a calibration change) meanwhile
        op, frame, choice = self.op, self.frame, self.launch_choice
        if op is not None and frame is not None:
            d.update(regime=op.regime, **op.describe(),
                     launch_choice=[choice.kernel, choice.k_min, choice.threads] if choice else None,
                     input_dtype=PRECISION_DTYPES[self.precision].input_name, output_dtype=op.plan.out_dtype,
                     host_memory=frame.host_memory, check_finite=self.check_finite)
        return d

    def _release(self) -> None:
        super()._release()
        for op in self.ops.values():
            op.free()
        self.ops = {}
