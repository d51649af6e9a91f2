"""Host staging of one camera set: each camera's payload straight into its slot, as it arrived.

A ``CameraStaging`` owns two byte regions (depth, features) sized for float32, allocated once
per map (pinned, or mapped pinned, for the GPU backends; plain numpy for the cpu backend). Per
frame every camera's array, in its wire dtype (float32, float16, or E4M3 codes as uint8), is
copied once into its slot of a view of that dtype: no stacked intermediate, no cast, no new
allocation. A missing camera's slot is zeroed (zero weights add nothing to the grid).

A depth camera's slot may instead hold a ``MetricDepth`` (metres at the feature grid: an
[H, W] float32, 1/D of the bytes): it goes to a third region, ``metric``, and the GPU frame
expands it into the depth slot on the device (``metric_dtype`` says the slot's dtype when no
distribution camera in the set decides it). Staging without ``metric_dtype`` refuses them.

Everything checked here is a header check (type, dtype, shape), so bad input is refused before
any device work; value checks (NaN/Inf, FP16 range) run on the device (gpu/frame.py) or in the
cpu backend.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Sequence

import numpy as np

from ..errors import InputError
from ..metric_depth import DepthSpec, MetricDepth

FLOAT_WIRE = (np.dtype(np.float32), np.dtype(np.float16))
E4M3_WIRE = np.dtype(np.uint8)  # raw E4M3 codes
ALL_WIRE = (*FLOAT_WIRE, E4M3_WIRE)
STREAMS = ("depth", "feat")

Camera = tuple[np.ndarray | MetricDepth | None, np.ndarray | None]  # (depth [D,H,W], feat [H,W,C]); None = missing


class Staged(NamedTuple):
    """What one staged set holds: the streams' dtypes, and which depth slots await expansion."""

    depth: np.dtype
    feat: np.dtype
    image_cameras: tuple[int, ...] = ()   # slots whose depth is in the metric region
    spec: DepthSpec | None = None         # their (shared) distribution rule


def frame_dtype(arrays: Sequence[np.ndarray], allowed=ALL_WIRE, stream: str = "") -> np.dtype:
    """The one dtype a stream is staged in: the arrays' own when they agree; float16 and float32
    mixed stage as float32 (exact); E4M3 codes mixed with floats are refused."""
    dtypes = {a.dtype for a in arrays}
    bad = [d.name for d in dtypes if d not in allowed]
    if bad:
        raise InputError(f"{stream}: dtype {bad[0]} not in {[np.dtype(d).name for d in allowed]}")
    if not dtypes:
        return np.dtype(allowed[0])
    if len(dtypes) == 1:
        return dtypes.pop()
    if E4M3_WIRE in dtypes:
        raise InputError(f"{stream}: E4M3 codes and float tensors mixed in one set")
    return np.dtype(np.float32)


class CameraStaging:
    def __init__(self, depth_shape, feat_shape, alloc: Callable[[int], np.ndarray] | None = None,
                 allowed=ALL_WIRE, metric_dtype=None):
        """``alloc(nbytes)`` returns a writable uint8 array (default: numpy); called once per region,
        in the order of ``regions`` (depth, feat, then metric when ``metric_dtype`` is given)."""
        alloc = alloc or (lambda n: np.empty(n, np.uint8))
        self.shapes = {"depth": tuple(depth_shape), "feat": tuple(feat_shape)}
        self.allowed = tuple(np.dtype(d) for d in allowed)
        widest = max(d.itemsize for d in self.allowed)
        self.regions = {s: alloc(int(np.prod(shape)) * widest) for s, shape in self.shapes.items()}
        self.metric_dtype = None if metric_dtype is None else np.dtype(metric_dtype)
        if self.metric_dtype is not None:
            n, _, h, w = self.shapes["depth"]
            self.shapes["metric"] = (n, h, w)
            self.regions["metric"] = alloc(n * h * w * 4)
        self._views: dict = {}

    @property
    def cameras(self) -> int:
        return self.shapes["depth"][0]

    def slots(self, stream: str, dtype) -> np.ndarray:
        """[N, ...] view of ``stream``'s region in ``dtype`` (built once per dtype)."""
        key = (stream, np.dtype(dtype))
        view = self._views.get(key)
        if view is None:
            shape = self.shapes[stream]
            n = int(np.prod(shape)) * key[1].itemsize
            view = self._views[key] = self.regions[stream][:n].view(key[1]).reshape(shape)
        return view

    def nbytes(self, stream: str, dtype) -> int:
        return int(np.prod(self.shapes[stream])) * np.dtype(dtype).itemsize

    def stage(self, cameras: Sequence[Camera]) -> Staged:
        """Check every header, then copy each payload into its slot."""
        if len(cameras) != self.cameras:
            raise InputError(f"{len(cameras)} cameras in the set, the map has {self.cameras}")
        image = tuple(n for n, c in enumerate(cameras) if isinstance(c[0], MetricDepth))
        spec = self._check_metric([cameras[n][0] for n in image])
        dtypes = []
        for i, stream in enumerate(STREAMS):
            present = [c[i] for n, c in enumerate(cameras) if c[i] is not None and not (i == 0 and n in image)]
            for a in present:
                if not isinstance(a, np.ndarray):
                    raise InputError(f"{stream}: expected a numpy array, got {type(a).__name__}")
                if a.shape != self.shapes[stream][1:]:
                    raise InputError(f"{stream}: shape {tuple(a.shape)} != expected {self.shapes[stream][1:]}")
            # depth images alone: their slots take metric_dtype; with distributions, the distributions' dtype
            images_decide = i == 0 and image and not present
            dtypes.append(self.metric_dtype if images_decide else frame_dtype(present, self.allowed, stream))
        for i, stream in enumerate(STREAMS):
            slots = self.slots(stream, dtypes[i])
            for n, cam in enumerate(cameras):
                if i == 0 and n in image:
                    np.copyto(self.slots("metric", np.float32)[n], cam[0].metres, casting="same_kind")
                elif cam[i] is None:
                    slots[n].fill(0)
                else:
                    np.copyto(slots[n], cam[i], casting="same_kind")
        return Staged(dtypes[0], dtypes[1], image, spec)

    def _check_metric(self, metric: list) -> DepthSpec | None:
        """The one spec of a set's depth images (header checks only)."""
        if not metric:
            return None
        if self.metric_dtype is None:
            raise InputError("depth images (MetricDepth) need a staging that expands them on the device")
        hw = self.shapes["metric"][1:]
        for m in metric:
            if not isinstance(m.metres, np.ndarray) or m.metres.shape != hw or m.metres.dtype.kind != "f":
                raise InputError(f"depth image: expected float metres of shape {hw}, got "
                                 f"{getattr(m.metres, 'shape', None)} {getattr(m.metres, 'dtype', None)}")
            if m.spec.bins.count != self.shapes["depth"][1]:
                raise InputError(f"depth image: {m.spec.bins.count} depth bins, the map has {self.shapes['depth'][1]}")
        specs = {m.spec for m in metric}
        if len(specs) > 1:
            raise InputError("depth images with different distribution rules in one set")
        return specs.pop()


def split_cameras(depth: np.ndarray, feat: np.ndarray) -> list[Camera]:
    """Stacked [N, ...] tensors as per-camera views (no copy), for ``pool`` callers."""
    for name, arr in (("depth", depth), ("feat", feat)):
        if not isinstance(arr, np.ndarray) or arr.ndim < 1:
            raise InputError(f"{name}: expected a stacked numpy array, got {type(arr).__name__}")
    if depth.shape[0] != feat.shape[0]:
        raise InputError(f"depth has {depth.shape[0]} cameras, feat {feat.shape[0]}")
    return [(depth[n], feat[n]) for n in range(depth.shape[0])]

