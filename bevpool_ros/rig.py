"""Camera rig: everything the scatter map depends on, validated on construction.

A rig is pure geometry (no ROS import): per-camera intrinsics and camera->ego extrinsics,
the network's input transform (resize, crop) and feature stride, the depth bins, the BEV
grid and the channel count. It loads from YAML (``config/rigs/*.yaml``) or is built from
sensor_msgs/CameraInfo-like data. Every invalid value raises :class:`RigError` naming the
field, because a silently wrong rig means a silently wrong BEV tensor.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np


class RigError(ValueError):
    """An invalid rig value; the message names the offending field."""


def _finite(name: str, value: Any) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise RigError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(v):
        raise RigError(f"{name}: must be finite, got {v}")
    return v


def _positive(name: str, value: Any) -> float:
    v = _finite(name, value)
    if v <= 0:
        raise RigError(f"{name}: must be > 0, got {v}")
    return v


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not float(_finite(name, value)).is_integer():
        raise RigError(f"{name}: expected a positive integer, got {value!r}")
    v = int(value)
    if v <= 0:
        raise RigError(f"{name}: must be > 0, got {v}")
    return v


def quaternion_to_matrix(wxyz: Sequence[float], name: str = "rotation_wxyz") -> np.ndarray:
    """Unit quaternion (w, x, y, z) -> 3x3 rotation matrix; normalises, rejects ~zero norm."""
    q = np.array([_finite(f"{name}[{i}]", v) for i, v in enumerate(wxyz)], dtype=np.float64)
    if q.shape != (4,):
        raise RigError(f"{name}: expected 4 values (w, x, y, z), got {len(q)}")
    norm = np.linalg.norm(q)
    if norm < 1e-6:
        raise RigError(f"{name}: quaternion has zero norm")
    w, x, y, z = q / norm
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ])


@dataclass(frozen=True)
class Camera:
    """One camera: source image size, intrinsics K (source pixels) and camera->ego pose."""

    name: str
    width: int
    height: int
    K: tuple[tuple[float, ...], ...]
    rotation: tuple[tuple[float, ...], ...]  # camera -> ego, 3x3
    translation: tuple[float, float, float]  # camera origin in ego, metres

    def __post_init__(self) -> None:
        pre = f"cameras[{self.name}]"
        if not self.name:
            raise RigError("cameras[].name: must be a non-empty string")
        object.__setattr__(self, "width", _positive_int(f"{pre}.width", self.width))
        object.__setattr__(self, "height", _positive_int(f"{pre}.height", self.height))
        K = np.asarray(self.K, dtype=np.float64)
        if K.shape != (3, 3):
            raise RigError(f"{pre}.K: expected 3x3, got shape {K.shape}")
        if not np.all(np.isfinite(K)):
            raise RigError(f"{pre}.K: must be finite")
        if abs(np.linalg.det(K)) < 1e-9 or K[0, 0] <= 0 or K[1, 1] <= 0:
            raise RigError(f"{pre}.K: singular or non-positive focal length (fx={K[0, 0]}, fy={K[1, 1]})")
        if not np.allclose(K[2], [0.0, 0.0, 1.0]):
            raise RigError(f"{pre}.K: last row must be [0, 0, 1], got {K[2].tolist()}")
        R = np.asarray(self.rotation, dtype=np.float64)
        if R.shape != (3, 3) or not np.all(np.isfinite(R)):
            raise RigError(f"{pre}.rotation: expected a finite 3x3 matrix")
        if not np.allclose(R @ R.T, np.eye(3), atol=1e-4) or np.linalg.det(R) < 0:
            raise RigError(f"{pre}.rotation: not a proper rotation matrix")
        t = np.asarray(self.translation, dtype=np.float64)
        if t.shape != (3,) or not np.all(np.isfinite(t)):
            raise RigError(f"{pre}.translation: expected 3 finite values")
        object.__setattr__(self, "K", tuple(map(tuple, K.tolist())))
        object.__setattr__(self, "rotation", tuple(map(tuple, R.tolist())))
        object.__setattr__(self, "translation", tuple(t.tolist()))

    @classmethod
    def from_camera_info(cls, name: str, k: Sequence[float], width: int, height: int,
                         rotation_wxyz: Sequence[float] | None = None,
                         translation: Sequence[float] = (0.0, 0.0, 0.0),
                         camera_to_ego: Sequence[Sequence[float]] | None = None) -> "Camera":
        """From CameraInfo fields (row-major ``k`` of 9, width, height) plus extrinsics.

        Extrinsics are either a quaternion + translation or a 4x4 camera->ego matrix.
        """
        k = list(k)
        if len(k) != 9:
            raise RigError(f"cameras[{name}].K: CameraInfo.k must hold 9 values, got {len(k)}")
        K = [k[0:3], k[3:6], k[6:9]]
        if camera_to_ego is not None:
            T = np.asarray(camera_to_ego, dtype=np.float64)
            if T.shape != (4, 4):
                raise RigError(f"cameras[{name}].camera_to_ego: expected 4x4, got {T.shape}")
            return cls(name, width, height, K, T[:3, :3], T[:3, 3])
        if rotation_wxyz is None:
            raise RigError(f"cameras[{name}]: extrinsics missing (rotation_wxyz or camera_to_ego)")
        R = quaternion_to_matrix(rotation_wxyz, f"cameras[{name}].rotation_wxyz")
        return cls(name, width, height, K, R, translation)


@dataclass(frozen=True)
class Axis:
    """One BEV axis: [lower, upper) in metres split into cells of ``step``."""

    name: str
    lower: float
    upper: float
    step: float

    def __post_init__(self) -> None:
        pre = f"bev_grid.{self.name}"
        object.__setattr__(self, "lower", _finite(f"{pre}.lower", self.lower))
        object.__setattr__(self, "upper", _finite(f"{pre}.upper", self.upper))
        object.__setattr__(self, "step", _positive(f"{pre}.step", self.step))
        if self.upper <= self.lower:
            raise RigError(f"{pre}: empty range [{self.lower}, {self.upper})")

    @property
    def cells(self) -> int:
        # round() guards against 102.4 / 0.8 = 127.99999
        return max(1, int(round((self.upper - self.lower) / self.step)))


@dataclass(frozen=True)
class Rig:
    """Complete geometry of one BEV pooling problem."""

    name: str
    cameras: tuple[Camera, ...]
    input_width: int            # network input after resize + crop, pixels
    input_height: int
    resize: float               # source -> resized image scale
    crop_left: int              # crop offset in the resized image, pixels
    crop_top: int
    feature_stride: int         # input pixels per feature-map cell
    depth_start: float          # depth bins: start + i*step for start + i*step < stop
    depth_stop: float
    depth_step: float
    x: Axis
    y: Axis
    z: Axis
    channels: int
    frustum_sampling: str = "bevdet"  # "bevdet": linspace(0, in-1, n); "centers": cell centres
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.cameras:
            raise RigError("cameras: at least one camera is required")
        names = [c.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise RigError(f"cameras: duplicate names {names}")
        for f in ("input_width", "input_height", "feature_stride", "channels"):
            object.__setattr__(self, f, _positive_int(f, getattr(self, f)))
        object.__setattr__(self, "resize", _positive("input.resize", self.resize))
        for f in ("crop_left", "crop_top"):
            v = _finite(f"input.{f}", getattr(self, f))
            if v < 0 or not float(v).is_integer():
                raise RigError(f"input.{f}: must be a non-negative integer, got {v}")
            object.__setattr__(self, f, int(v))
        object.__setattr__(self, "depth_start", _finite("depth_bins.start", self.depth_start))
        object.__setattr__(self, "depth_stop", _finite("depth_bins.stop", self.depth_stop))
        object.__setattr__(self, "depth_step", _positive("depth_bins.step", self.depth_step))
        if self.depth_start <= 0:
            raise RigError(f"depth_bins.start: must be > 0 (depth in front of the camera), got {self.depth_start}")
        if self.depth_stop <= self.depth_start:
            raise RigError(f"depth_bins: empty range [{self.depth_start}, {self.depth_stop})")
        if self.input_width % self.feature_stride or self.input_height % self.feature_stride:
            raise RigError(f"feature_stride: {self.feature_stride} must divide the input size "
                           f"{self.input_width}x{self.input_height}")
        if self.frustum_sampling not in ("bevdet", "centers"):
            raise RigError(f"frustum_sampling: expected 'bevdet' or 'centers', got {self.frustum_sampling!r}")
        for cam in self.cameras:
            rw, rh = int(round(cam.width * self.resize)), int(round(cam.height * self.resize))
            if self.crop_left + self.input_width > rw or self.crop_top + self.input_height > rh:
                raise RigError(
                    f"input.crop: window {self.input_width}x{self.input_height} at "
                    f"({self.crop_left}, {self.crop_top}) lies outside camera {cam.name}'s resized "
                    f"image {rw}x{rh}")

    # --- derived sizes -------------------------------------------------------------------
    @property
    def num_cameras(self) -> int:
        return len(self.cameras)

    @property
    def feature_width(self) -> int:
        return self.input_width // self.feature_stride

    @property
    def feature_height(self) -> int:
        return self.input_height // self.feature_stride

    @property
    def depth_values(self) -> np.ndarray:
        n = int(math.ceil((self.depth_stop - self.depth_start) / self.depth_step - 1e-9))
        return self.depth_start + self.depth_step * np.arange(n, dtype=np.float64)

    @property
    def num_depth_bins(self) -> int:
        return len(self.depth_values)

    @property
    def depth_shape(self) -> tuple[int, int, int, int]:
        return (self.num_cameras, self.num_depth_bins, self.feature_height, self.feature_width)

    @property
    def grid_shape(self) -> tuple[int, int, int]:
        """(Z, Y, X): the BEV tensor is [Z, Y, X, C], x fastest."""
        return (self.z.cells, self.y.cells, self.x.cells)

    def with_cameras(self, cameras: Sequence[Camera]) -> "Rig":
        return replace(self, cameras=tuple(cameras))

    # --- identity ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra", None)
        return d

    def digest(self) -> str:
        """Stable hash of everything the scatter map depends on (channels excluded)."""
        d = self.to_dict()
        d.pop("name")
        d.pop("channels")
        blob = json.dumps(d, sort_keys=True, default=float).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# --- YAML ---------------------------------------------------------------------------------
def _require(d: Mapping, key: str, where: str) -> Any:
    if not isinstance(d, Mapping) or key not in d:
        raise RigError(f"{where}{key}: missing")
    return d[key]


def _camera_from_dict(c: Mapping, default_size: Sequence[int] | None) -> Camera:
    name = str(_require(c, "name", "cameras[]."))
    pre = f"cameras[{name}]."
    size = c.get("image_size", default_size)
    if size is None or len(size) != 2:
        raise RigError(f"{pre}image_size: expected [width, height]")
    intr = _require(c, "intrinsics", pre)
    if "K" in intr:
        k = np.asarray(intr["K"], dtype=np.float64).reshape(-1).tolist()
    else:
        fx = _require(intr, "fx", pre + "intrinsics.")
        fy = intr.get("fy", fx)
        k = [fx, 0.0, _require(intr, "cx", pre + "intrinsics."), 0.0, fy,
             _require(intr, "cy", pre + "intrinsics."), 0.0, 0.0, 1.0]
    ext = _require(c, "extrinsics", pre)
    if "camera_to_ego" in ext:
        return Camera.from_camera_info(name, k, size[0], size[1], camera_to_ego=ext["camera_to_ego"])
    return Camera.from_camera_info(name, k, size[0], size[1],
                                   rotation_wxyz=_require(ext, "rotation_wxyz", pre + "extrinsics."),
                                   translation=_require(ext, "translation", pre + "extrinsics."))


def _axis(grid: Mapping, name: str) -> Axis:
    v = _require(grid, name, "bev_grid.")
    if not isinstance(v, Sequence) or len(v) != 3:
        raise RigError(f"bev_grid.{name}: expected [lower, upper, step]")
    return Axis(name, *v)


def rig_from_dict(d: Mapping) -> Rig:
    """Build a rig from the YAML schema documented in docs/configuration.md."""
    if not isinstance(d, Mapping):
        raise RigError("rig: expected a mapping at the top level")
    inp = _require(d, "input", "")
    crop = inp.get("crop", [0, 0])
    if not isinstance(crop, Sequence) or len(crop) != 2:
        raise RigError("input.crop: expected [left, top]")
    bins = _require(d, "depth_bins", "")
    grid = _require(d, "bev_grid", "")
    cams_raw = _require(d, "cameras", "")
    if not isinstance(cams_raw, Sequence) or isinstance(cams_raw, (str, bytes)):
        raise RigError("cameras: expected a list")
    cams = tuple(_camera_from_dict(c, d.get("image_size")) for c in cams_raw)
    return Rig(
        name=str(d.get("name", "rig")),
        cameras=cams,
        input_width=_require(inp, "width", "input."),
        input_height=_require(inp, "height", "input."),
        resize=_require(inp, "resize", "input."),
        crop_left=crop[0], crop_top=crop[1],
        feature_stride=_require(d, "feature_stride", ""),
        depth_start=_require(bins, "start", "depth_bins."),
        depth_stop=_require(bins, "stop", "depth_bins."),
        depth_step=_require(bins, "step", "depth_bins."),
        x=_axis(grid, "x"), y=_axis(grid, "y"), z=_axis(grid, "z"),
        channels=_require(d, "channels", ""),
        frustum_sampling=str(d.get("frustum_sampling", "bevdet")),
    )


def load_rig(path: str | Path) -> Rig:
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise RigError(f"{path}: not valid YAML ({e})") from None
    return rig_from_dict(data)

