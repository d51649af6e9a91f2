"""Camera rig: everything the scatter map depends on, validated on construction.

A rig is pure geometry (no ROS import): per-camera intrinsics and camera->ego extrinsics,
the network's input transform (resize, crop: the rig's, scaled to each camera's image size, or
the camera's own) and feature stride, the depth bins, the BEV grid and the channel count. It
loads from YAML (``config/rigs/*.yaml``, read by rig_yaml.py) or is built from
sensor_msgs/CameraInfo-like data. Every invalid value raises :class:`RigError` naming the
field, because a silently wrong rig means a silently wrong BEV tensor.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from .input_transform import InputTransform


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


def _crop_offset(name: str, value: Any) -> int:
    v = _finite(name, value)
    if v < 0 or not float(v).is_integer():
        raise RigError(f"{name}: must be a non-negative integer, got {v}")
    return int(v)


def checked_transform(where: str, t: InputTransform) -> InputTransform:
    """``t`` with every value checked (RigError naming ``where``) and normalised to float/int."""
    return InputTransform(_positive(f"{where}.resize", t.resize),
                          _crop_offset(f"{where}.crop_left", t.crop_left),
                          _crop_offset(f"{where}.crop_top", t.crop_top),
                          _positive_int(f"{where}.image_width", t.image_width),
                          _positive_int(f"{where}.image_height", t.image_height))


MAX_PINHOLE_FOV_DEG = 170.0  # wider is no pinhole camera (a fisheye needs another model)


def intrinsics_problem(K, width: int, height: int) -> str | None:
    """Why K cannot belong to a ``width`` x ``height`` pinhole image (None when it can): the
    principal point must lie in the middle half of the image (real lenses sit within a few per
    cent of the centre; K of a 1600x900 camera sent with 640x480, or with an absurd size such as
    2^31-1, does not), and each field of view must be below MAX_PINHOLE_FOV_DEG."""
    fx, fy, cx, cy = K[0][0], K[1][1], K[0][2], K[1][2]
    for axis, c, size in (("cx", cx, width), ("cy", cy, height)):
        if not size / 4 <= c <= 3 * size / 4:
            return (f"principal point {axis}={c:g} is not in the middle half of a {width}x{height} image "
                    f"([{size / 4:g}, {3 * size / 4:g}]): K and the image size do not belong together")
    for axis, f, size in (("horizontal", fx, width), ("vertical", fy, height)):
        fov = np.degrees(2 * np.arctan(size / (2 * f)))
        if fov >= MAX_PINHOLE_FOV_DEG:
            return (f"{axis} field of view {fov:.1f} deg (f={f:g}, {size} px) is not a pinhole camera's "
                    f"(< {MAX_PINHOLE_FOV_DEG:g} deg): K and the image size do not belong together")
    return None


@dataclass(frozen=True)
class Camera:
    """One camera: source image size, intrinsics K (source pixels) and camera->ego pose."""

    name: str
    width: int
    height: int
    K: tuple[tuple[float, ...], ...]
    rotation: tuple[tuple[float, ...], ...]  # camera -> ego, 3x3
    translation: tuple[float, float, float]  # camera origin in ego, metres
    # its own resize + crop (for the size it names), or None: the rig's, scaled to this camera
    transform: InputTransform | None = None

    def __post_init__(self) -> None:
        pre = f"cameras[{self.name}]"
        if not self.name:
            raise RigError("cameras[].name: must be a non-empty string")
        object.__setattr__(self, "width", _positive_int(f"{pre}.width", self.width))
        object.__setattr__(self, "height", _positive_int(f"{pre}.height", self.height))
        if self.transform is not None:
            object.__setattr__(self, "transform", checked_transform(f"{pre}.input", self.transform))
        K = np.asarray(self.K, dtype=np.float64)
        if K.shape != (3, 3):
            raise RigError(f"{pre}.K: expected 3x3, got shape {K.shape}")
        if not np.all(np.isfinite(K)):
            raise RigError(f"{pre}.K: must be finite")
        if abs(np.linalg.det(K)) < 1e-9 or K[0, 0] <= 0 or K[1, 1] <= 0:
            raise RigError(f"{pre}.K: singular or non-positive focal length (fx={K[0, 0]}, fy={K[1, 1]})")
        if not np.allclose(K[2], [0.0, 0.0, 1.0]):
            raise RigError(f"{pre}.K: last row must be [0, 0, 1], got {K[2].tolist()}")
        why = intrinsics_problem(K, self.width, self.height)
        if why:
            raise RigError(f"{pre}: {why}")
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
                         camera_to_ego: Sequence[Sequence[float]] | None = None,
                         transform: InputTransform | None = None) -> "Camera":
        """From CameraInfo fields (row-major ``k`` of 9, width, height) plus extrinsics.

        Extrinsics are either a quaternion + translation or a 4x4 camera->ego matrix;
        ``transform`` is the camera's own input transform, if it has one.
        """
        k = list(k)
        if len(k) != 9:
            raise RigError(f"cameras[{name}].K: CameraInfo.k must hold 9 values, got {len(k)}")
        K = [k[0:3], k[3:6], k[6:9]]
        if camera_to_ego is not None:
            T = np.asarray(camera_to_ego, dtype=np.float64)
            if T.shape != (4, 4):
                raise RigError(f"cameras[{name}].camera_to_ego: expected 4x4, got {T.shape}")
            return cls(name, width, height, K, T[:3, :3], T[:3, 3], transform)
        if rotation_wxyz is None:
            raise RigError(f"cameras[{name}]: extrinsics missing (rotation_wxyz or camera_to_ego)")
        R = quaternion_to_matrix(rotation_wxyz, f"cameras[{name}].rotation_wxyz")
        return cls(name, width, height, K, R, translation, transform)


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
    # source size resize/crop are written for; None: the size of the cameras that use them
    image_size: tuple[int, int] | None = None
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
            object.__setattr__(self, f, _crop_offset(f"input.{f}", getattr(self, f)))
        object.__setattr__(self, "image_size", self._resolved_image_size())
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
        for cam, t in zip(self.cameras, self.camera_transforms):
            rw, rh = t.resized_size()
            if t.crop_left + self.input_width > rw or t.crop_top + self.input_height > rh:
                whose = f"cameras[{cam.name}].input" if cam.transform else "input"
                raise RigError(
                    f"{whose}.crop: window {self.input_width}x{self.input_height} at "
                    f"({t.crop_left}, {t.crop_top}) lies outside camera {cam.name}'s resized "
                    f"image {rw}x{rh} ({cam.width}x{cam.height} x {t.resize:.6g})")

    def _resolved_image_size(self) -> tuple[int, int]:
        if self.image_size is not None:
            if isinstance(self.image_size, (str, bytes)) or len(self.image_size) != 2:
                raise RigError(f"image_size: expected [width, height], got {self.image_size!r}")
            return (_positive_int("image_size[0]", self.image_size[0]),
                    _positive_int("image_size[1]", self.image_size[1]))
        sizes = {(c.width, c.height): c.name for c in self.cameras if c.transform is None}
        if len(sizes) > 1:
            listed = ", ".join(f"{name} {w}x{h}" for (w, h), name in sizes.items())
            raise RigError(f"image_size: missing, and the cameras differ in size ({listed}): give "
                           f"image_size, the source size input.resize and input.crop are written "
                           f"for, or a camera its own input")
        return next(iter(sizes), (self.cameras[0].width, self.cameras[0].height))

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

    @property
    def transform(self) -> InputTransform:
        """The rig's own input transform, for an ``image_size`` source image."""
        return InputTransform(self.resize, self.crop_left, self.crop_top, *self.image_size)

    def transform_of(self, camera: Camera) -> InputTransform:
        """The transform ``camera``'s image goes through: its own or the rig's, scaled to it."""
        own = camera.transform or self.transform
        return own.for_image(camera.width, camera.height, self.input_width, self.input_height)

    @property
    def camera_transforms(self) -> tuple[InputTransform, ...]:
        return tuple(self.transform_of(c) for c in self.cameras)

    def with_cameras(self, cameras: Sequence[Camera]) -> "Rig":
        return replace(self, cameras=tuple(cameras))

    # --- identity ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("extra", None)
        return d

    def digest(self) -> str:
        """Stable hash of everything the scatter map depends on (channels excluded); computed
        once per rig (frozen: /diagnostics asks every period, and asdict is milliseconds)."""
        cached = self.__dict__.get("_digest")
        if cached is None:
            d = self.to_dict()
            d.pop("name")
            d.pop("channels")
            blob = json.dumps(d, sort_keys=True, default=float).encode()
            cached = hashlib.sha256(blob).hexdigest()[:16]
            object.__setattr__(self, "_digest", cached)
        return cached



__all__ = ["Axis", "Camera", "InputTransform", "Rig", "RigError", "checked_transform", "quaternion_to_matrix"]
