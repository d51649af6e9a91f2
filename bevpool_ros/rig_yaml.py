"""The rig file format (docs/rigs.md): a YAML mapping -> :class:`Rig`, strictly checked.

Every value is read with its expected type before any arithmetic, so a wrong value is one
:class:`RigError` naming the field (``cameras[CAM_FRONT].intrinsics.fx: expected a number, got
'seven hundred'``), never a numpy traceback. A key the format does not know is refused with the
nearest valid one, because a silently ignored ``yaw`` or ``distortion`` is a silently wrong grid.
"""
from __future__ import annotations

import difflib
import numbers
from pathlib import Path
from typing import Any, Mapping, Sequence

from .input_transform import InputTransform
from .rig import Axis, Camera, Rig, RigError

TOP_KEYS = ("name", "channels", "image_size", "input", "feature_stride", "frustum_sampling",
            "depth_bins", "bev_grid", "cameras")
INPUT_KEYS = ("width", "height", "resize", "crop")
CAMERA_INPUT_KEYS = ("resize", "crop")  # the network input size is the rig's, for every camera
CAMERA_KEYS = ("name", "image_size", "intrinsics", "extrinsics", "input")
INTRINSICS_KEYS = ("fx", "fy", "cx", "cy", "K")
EXTRINSICS_KEYS = ("rotation_wxyz", "translation", "camera_to_ego")
DEPTH_BINS_KEYS = ("start", "stop", "step")
BEV_GRID_KEYS = ("x", "y", "z")

# what an unknown key most likely meant, beyond its nearest spelling
_HINTS = {
    "distortion": "distortion is not modelled: rectify the images, give the rectified intrinsics",
    "yaw": "give the rotation as extrinsics.rotation_wxyz [w, x, y, z] or extrinsics.camera_to_ego",
}
_HINTS.update({k: _HINTS["distortion"] for k in ("d", "dist", "dist_coeffs", "distortion_model")})
_HINTS.update({k: _HINTS["yaw"] for k in ("pitch", "roll", "rpy", "euler", "rotation")})


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, (str, bytes, numbers.Number)) or value is None \
        else f"a {type(value).__name__}"
    return text if len(text) <= 60 else text[:57] + "..."


def _mapping(where: str, value: Any, keys: Sequence[str]) -> Mapping:
    """``value`` as a mapping whose keys are all in ``keys``."""
    if not isinstance(value, Mapping):
        raise RigError(f"{where or 'rig'}: expected a mapping, got {_shown(value)}")
    for key in value:
        if key not in keys:
            raise RigError(_unknown_key(where, str(key), keys))
    return value


def _unknown_key(where: str, key: str, keys: Sequence[str]) -> str:
    nearest = difflib.get_close_matches(key, keys, n=1, cutoff=0.0)
    text = (f"{_at(where, key)}: unknown key (nearest valid key: {nearest[0]!r}; "
            f"valid: {', '.join(keys)})")
    hint = _HINTS.get(key.lower())
    return f"{text}; {hint}" if hint else text


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _get(where: str, d: Mapping, key: str, default: Any = ...) -> Any:
    if key in d:
        return d[key]
    if default is ...:
        raise RigError(f"{_at(where, key)}: missing")
    return default


def _number(where: str, value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise RigError(f"{where}: expected a number, got {_shown(value)}")
    return value


def _numbers(where: str, value: Any, n: int, what: str) -> list:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise RigError(f"{where}: expected a list of {n} numbers {what}, got {_shown(value)}")
    if len(value) != n:
        raise RigError(f"{where}: expected {n} numbers {what}, got {len(value)}")
    return [_number(f"{where}[{i}]", v) for i, v in enumerate(value)]


def _matrix(where: str, value: Any, n: int) -> list[list]:
    """An n x n matrix: a list of n rows of n numbers, or one flat list of n*n."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == n * n:
        flat = _numbers(where, value, n * n, f"({n}x{n}, row-major)")
        return [flat[r * n:(r + 1) * n] for r in range(n)]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence) \
            or len(value) != n:
        raise RigError(f"{where}: expected a {n}x{n} matrix (a list of {n} rows), "
                       f"got {_shown(value)}")
    return [_numbers(f"{where}[{r}]", row, n, "(one row)") for r, row in enumerate(value)]


def _name(where: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Integral)):
        raise RigError(f"{where}: expected a string, got {_shown(value)}")
    return str(value)


def _size(where: str, value: Any) -> tuple:
    return tuple(_numbers(where, value, 2, "[width, height]"))


def _camera(index: int, c: Any, default_size: tuple | None) -> Camera:
    if not isinstance(c, Mapping):
        raise RigError(f"cameras[{index}]: expected a mapping, got {_shown(c)}")
    name = _name(f"cameras[{index}].name", _get(f"cameras[{index}]", c, "name"))
    pre = f"cameras[{name}]"
    _mapping(pre, c, CAMERA_KEYS)
    size = _size(f"{pre}.image_size", c["image_size"]) if "image_size" in c else default_size
    if size is None:
        raise RigError(f"{pre}.image_size: missing (give it here or at the top level)")
    k = _intrinsics(f"{pre}.intrinsics", _get(pre, c, "intrinsics"))
    transform = _own_transform(f"{pre}.input", c["input"], size) if "input" in c else None
    where = f"{pre}.extrinsics"
    ext = _mapping(where, _get(pre, c, "extrinsics"), EXTRINSICS_KEYS)
    if "camera_to_ego" in ext:
        if "rotation_wxyz" in ext or "translation" in ext:
            raise RigError(f"{where}: give camera_to_ego or rotation_wxyz + translation, not both")
        matrix = _matrix(f"{where}.camera_to_ego", ext["camera_to_ego"], 4)
        return Camera.from_camera_info(name, k, size[0], size[1], transform=transform,
                                       camera_to_ego=matrix)
    rotation = _numbers(f"{where}.rotation_wxyz", _get(where, ext, "rotation_wxyz"), 4,
                        "[w, x, y, z]")
    translation = _numbers(f"{where}.translation", _get(where, ext, "translation"), 3,
                           "[x, y, z] (metres)")
    return Camera.from_camera_info(name, k, size[0], size[1], rotation_wxyz=rotation,
                                   translation=translation, transform=transform)


def _intrinsics(where: str, value: Any) -> list:
    intr = _mapping(where, value, INTRINSICS_KEYS)
    if "K" in intr:
        extra = [k for k in ("fx", "fy", "cx", "cy") if k in intr]
        if extra:
            raise RigError(f"{where}: give K or fx/fy/cx/cy, not both "
                           f"(found K and {', '.join(extra)})")
        return [v for row in _matrix(f"{where}.K", intr["K"], 3) for v in row]
    fx = _number(f"{where}.fx", _get(where, intr, "fx"))
    fy = _number(f"{where}.fy", intr.get("fy", fx))
    cx = _number(f"{where}.cx", _get(where, intr, "cx"))
    cy = _number(f"{where}.cy", _get(where, intr, "cy"))
    return [fx, 0.0, cx, 0.0, fy, cy, 0.0, 0.0, 1.0]


def _crop(where: str, value: Any) -> list:
    return _numbers(where, value, 2, "[left, top]")


def _own_transform(where: str, value: Any, size: tuple) -> InputTransform:
    inp = _mapping(where, value, CAMERA_INPUT_KEYS)
    left, top = _crop(f"{where}.crop", inp.get("crop", [0, 0]))
    return InputTransform(_number(f"{where}.resize", _get(where, inp, "resize")), left, top, *size)


def _axis(grid: Mapping, name: str) -> Axis:
    where = f"bev_grid.{name}"
    lower, upper, step = _numbers(where, _get("bev_grid", grid, name), 3, "[lower, upper, step]")
    return Axis(name, lower, upper, step)


def rig_from_dict(d: Any) -> Rig:
    """Build a rig from the YAML schema documented in docs/rigs.md."""
    _mapping("", d, TOP_KEYS)
    inp = _mapping("input", _get("", d, "input"), INPUT_KEYS)
    left, top = _crop("input.crop", inp.get("crop", [0, 0]))
    bins = _mapping("depth_bins", _get("", d, "depth_bins"), DEPTH_BINS_KEYS)
    grid = _mapping("bev_grid", _get("", d, "bev_grid"), BEV_GRID_KEYS)
    cams_raw = _get("", d, "cameras")
    if isinstance(cams_raw, (str, bytes, Mapping)) or not isinstance(cams_raw, Sequence):
        raise RigError(f"cameras: expected a list, got {_shown(cams_raw)}")
    image_size = _size("image_size", d["image_size"]) if "image_size" in d else None
    cams = tuple(_camera(i, c, image_size) for i, c in enumerate(cams_raw))
    number = lambda where, m, key: _number(_at(where, key), _get(where, m, key))  # noqa: E731
    return Rig(
        name=_name("name", d.get("name", "rig")),
        cameras=cams,
        input_width=number("input", inp, "width"),
        input_height=number("input", inp, "height"),
        resize=number("input", inp, "resize"),
        crop_left=left, crop_top=top,
        feature_stride=number("", d, "feature_stride"),
        depth_start=number("depth_bins", bins, "start"),
        depth_stop=number("depth_bins", bins, "stop"),
        depth_step=number("depth_bins", bins, "step"),
        x=_axis(grid, "x"), y=_axis(grid, "y"), z=_axis(grid, "z"),
        channels=number("", d, "channels"),
        frustum_sampling=_name("frustum_sampling", d.get("frustum_sampling", "bevdet")),
        image_size=image_size,
    )


def load_rig(path: str | Path) -> Rig:
    """The rig in a YAML file; every problem (unreadable, not YAML, any bad value) is one
    RigError line that starts with the path."""
    import yaml

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise RigError(f"{path}: cannot read the rig file ({type(e).__name__}: "
                       f"{getattr(e, 'strerror', None) or e})") from None
    except yaml.YAMLError as e:
        raise RigError(f"{path}: not valid YAML ({' '.join(str(e).split())})") from None
    try:
        return rig_from_dict(data)
    except RigError as e:
        raise RigError(f"{path}: {e}") from None
