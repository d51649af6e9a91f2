"""The one small interface every backend (cpu, cuda, tensorrt) implements."""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ..metric_depth import MetricDepth
from ..scatter_map import ScatterMap

PRECISIONS = ("fp32", "fp16", "fp8", "auto")
PRECISION_DTYPE = {"fp32": "float32", "fp16": "float16", "fp8": "float8_e4m3"}


def all_finite(arr: np.ndarray) -> bool:
    """``np.isfinite(arr).all()``, fast for float16 too.

    numpy's float16 isfinite runs scalar code (1.5 ms per canonical frame); the exponent-bit
    test on the raw codes is ten times faster: all-ones exponent = Inf or NaN.
    """
    if arr.dtype == np.float16:
        return not np.any((arr.view(np.uint16) & 0x7C00) == 0x7C00)
    return bool(np.isfinite(arr).all())


class BackendUnavailable(RuntimeError):
    """The backend cannot run here (no GPU, library missing); the caller may fall back."""


class InputError(ValueError):
    """A frame's tensors do not fit the prepared scatter map; the frame must be dropped."""


class NonFiniteInput(InputError):
    """An input holds NaN/Inf (or, for FP16 kernels, a value beyond FP16): the node's ``non_finite``
    drop, whether its host check or a backend's device check found it."""


class NonFiniteOutput(RuntimeError):
    """The pooled grid holds NaN/Inf (e.g. an FP16 overflow); the frame must not be published."""


OUTPUT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16))


def check_out(smap: ScatterMap, out: np.ndarray) -> np.ndarray:
    """``out`` must be where a BEV can land: the map's grid shape, a published dtype, writable, contiguous."""
    if not isinstance(out, np.ndarray) or tuple(out.shape) != tuple(smap.bev_shape) \
            or out.dtype not in OUTPUT_DTYPES or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"out: expected a writable contiguous float32/float16 array of shape {smap.bev_shape}")
    return out


def check_inputs(smap: ScatterMap, depth: np.ndarray, feat: np.ndarray,
                 allowed_dtypes=(np.float32, np.float16), check_finite: bool = True) -> None:
    """Raise InputError unless depth/feat have the map's shapes, an allowed dtype (and finite values)."""
    for name, arr, shape in (("depth", depth, smap.depth_shape), ("feat", feat, smap.feat_shape)):
        if not isinstance(arr, np.ndarray):
            raise InputError(f"{name}: expected a numpy array, got {type(arr).__name__}")
        if arr.dtype not in allowed_dtypes:
            raise InputError(f"{name}: dtype {arr.dtype} not in {[np.dtype(d).name for d in allowed_dtypes]}")
        if tuple(arr.shape) != tuple(shape):
            raise InputError(f"{name}: shape {tuple(arr.shape)} != expected {tuple(shape)}")
        if check_finite and not all_finite(arr):
            raise NonFiniteInput(f"{name}: contains NaN or Inf")


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

    def pool_cameras(self, cameras, out: np.ndarray | None = None) -> np.ndarray:
        """Per-camera (depth [D,H,W] | MetricDepth | None, feat [H,W,C] | None) -> BEV: each payload
        copied once into its slot of the staging buffer (staging.CameraStaging), then pooled. Here,
        with no device, a MetricDepth (a depth camera's image) is expanded on the host."""
        from .staging import CameraStaging

        smap = self._require_map()
        if self._host_staging is None:
            self._host_staging = CameraStaging(smap.depth_shape, smap.feat_shape, allowed=self.wire_dtypes)
        st = self._host_staging
        cameras = [(d.distribution() if isinstance(d, MetricDepth) else d, f) for d, f in cameras]
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
