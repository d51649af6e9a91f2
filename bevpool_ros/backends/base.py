"""The one small interface every backend (cpu, cuda, tensorrt) implements."""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..device.device_payloads import download
from ..metric_depth import MetricDepth
from ..scatter_map import ScatterMap
from .staging import CameraStaging

PRECISIONS = ("fp32", "fp16", "fp8", "auto")


class Backend(ABC):
    """prepare() once per calibration, then pool_cameras() (or pool()) per frame.

    ``check_finite`` (input.check_finite): refuse inputs holding NaN/Inf; off, they are pooled
    and a non-finite grid is still refused (NonFiniteOutput).
    """

    name = "base"
    # dtypes pool_cameras takes as they arrive on the wire (uint8 = E4M3 codes, GPU backends only)
    wire_dtypes = (np.dtype(np.float32), np.dtype(np.float16))

    def __init__(self, precision: str = "fp32", check_finite: bool = True):
        if precision not in PRECISIONS:
            raise ValueError(f"precision: expected one of {PRECISIONS}, got {precision!r}")
        self.requested_precision = precision
        self.precision = precision
        self.check_finite = bool(check_finite)
        self.smap: ScatterMap | None = None
        self._host_staging = None

    def prepare(self, smap: ScatterMap) -> None:
        """Adopt a new scatter map (validated here: a bad index never reaches a kernel)."""
        self.smap = smap.validate()
        self._host_staging = None

    @abstractmethod
    def pool(self, depth: np.ndarray, feat: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """depth [N,D,H,W], feat [N,H,W,C] -> BEV [Z,Y,X,C], written into ``out`` when given
        (float32 or float16: the published dtype). Raises InputError on bad input,
        NonFiniteOutput on a non-finite grid."""

    def pool_cameras(self, cameras, out: np.ndarray | None = None, host_copy: bool = True) -> np.ndarray | None:
        """Per-camera (depth [D,H,W] | MetricDepth | None, feat [H,W,C] | None) -> BEV: each payload
        copied once into its slot of the staging buffer (staging.CameraStaging), then pooled. Here,
        with no device, a MetricDepth (a depth camera's image) is expanded on the host and a
        device payload (a hand-off view) is downloaded (device_payloads.download).
        ``host_copy=False`` says nobody needs the grid on the host (hand-off consumers only): a
        backend that can keep it on its device returns None; this one returns it anyway."""
        smap = self._require_map()
        if self._host_staging is None:
            self._host_staging = CameraStaging(smap.depth_shape, smap.feat_shape, allowed=self.wire_dtypes)
        st = self._host_staging
        cameras = [(d.distribution() if isinstance(d, MetricDepth) else download(d, "depth"),
                    download(f, "feat")) for d, f in cameras]
        staged = st.stage(cameras)
        return self.pool(st.slots("depth", staged.depth), st.slots("feat", staged.feat), out=out)

    def describe(self) -> dict:
        return {"backend": self.name, "precision": self.precision, "device": "cpu", "regime": "n/a"}

    def close(self) -> None:
        pass

    def _require_map(self) -> ScatterMap:
        if self.smap is None:
            raise RuntimeError(f"{self.name} backend: prepare(scatter_map) was not called")
        return self.smap
