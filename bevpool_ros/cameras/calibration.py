"""Live calibration: the rig YAML as a baseline, updated by CameraInfo, TF and parameters.

Every accepted change bumps :attr:`LiveCalibration.version`; the pooling thread compares
versions and re-prepares the backend with the scatter map of the new rig (cached by the rig's
digest, so switching back to a known calibration costs nothing). A CameraInfo of another image
size keeps the camera's field of view: the rig scales its input transform to the new size. A
camera whose latest CameraInfo does not fit the network's input transform even so is marked
invalid: sets are dropped until a consistent CameraInfo arrives, because pooling with a stale or
impossible calibration would publish a wrong BEV grid.
"""
from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np

from ..rig import Camera, Rig, RigError, quaternion_to_matrix


class LiveCalibration:
    def __init__(self, rig: Rig, camera_names=()):
        names = list(camera_names) or [c.name for c in rig.cameras]
        by_name = {c.name: c for c in rig.cameras}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise RigError(f"camera_names: {unknown} not in rig {rig.name} ({list(by_name)})")
        # keep rig order: tensor index n must match the rig's camera n
        self._rig = rig.with_cameras([c for c in rig.cameras if c.name in names])
        self.invalid: dict[str, str] = {}
        self.version = 0
        self._lock = threading.Lock()
        # callables run (under the lock) right after a change of the version or of ``invalid``: the
        # hand-off core's launcher stops before the next set (node/handoff_launch.py)
        self.on_change: list = []

    def _changed(self) -> None:
        for hook in self.on_change:
            hook()

    @property
    def rig(self) -> Rig:
        return self._rig

    @property
    def camera_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self._rig.cameras)

    def status(self) -> dict:
        """What /diagnostics says of the calibration: the rig's digest, each invalid camera's why."""
        return {"calibration": self.rig.digest(),
                **{f"invalid_calibration_{cam}": why for cam, why in list(self.invalid.items())}}

    def camera(self, name: str) -> Camera:
        return next(c for c in self._rig.cameras if c.name == name)

    def _swap(self, name: str, new: Camera) -> bool:
        """Replace one camera; the Rig constructor re-validates the whole geometry."""
        old = self.camera(name)
        rig = self._rig.with_cameras([new if c.name == name else c for c in self._rig.cameras])
        was_invalid = self.invalid.pop(name, None) is not None
        if new == old:
            if was_invalid:
                self._changed()
            return False
        self._rig = rig
        self.version += 1
        self._changed()
        return True

    def update_intrinsics(self, name: str, k, width: int, height: int) -> bool:
        """From CameraInfo. True when the calibration changed; RigError marks the camera invalid."""
        with self._lock:
            cur = self.camera(name)
            try:
                T = np.eye(4)
                T[:3, :3] = cur.rotation
                T[:3, 3] = cur.translation
                # a camera's own input transform stays with it; the rig scales it (or the rig's)
                # to the new image size: same field of view (rig.transform_of)
                new = Camera.from_camera_info(name, list(k), int(width), int(height),
                                              camera_to_ego=T, transform=cur.transform)
                return self._swap(name, new)
            except RigError as e:
                self.invalid[name] = str(e)
                self._changed()
                raise

    def update_extrinsics(self, name: str, rotation: np.ndarray, translation) -> bool:
        """camera->ego rotation (3x3) and translation (metres). True when it changed."""
        with self._lock:
            cur = self.camera(name)
            R = np.asarray(rotation, dtype=np.float64)
            t = np.asarray(translation, dtype=np.float64)
            # sub-micrometre / micro-radian jitter from TF is not a calibration change
            if np.allclose(R, cur.rotation, atol=1e-7) and np.allclose(t, cur.translation, atol=1e-7):
                return False
            new = replace(cur, rotation=R, translation=t)  # validated by Camera.__post_init__
            return self._swap(name, new)

    def update_extrinsics_vector(self, name: str, values) -> bool:
        """[tx, ty, tz, qw, qx, qy, qz] as the ``extrinsics.<camera>`` parameter holds it."""
        v = [float(x) for x in values]
        if len(v) != 7:
            raise RigError(f"extrinsics.{name}: expected 7 values [tx, ty, tz, qw, qx, qy, qz], got {len(v)}")
        return self.update_extrinsics(name, quaternion_to_matrix(v[3:], f"extrinsics.{name}"), v[:3])

    def check_only_extrinsics_vector(self, name: str, values) -> str | None:
        """Validation for the parameter callback: None when acceptable."""
        try:
            v = [float(x) for x in values]
            if len(v) != 7:
                return f"extrinsics.{name}: expected 7 values [tx, ty, tz, qw, qx, qy, qz], got {len(v)}"
            if not np.all(np.isfinite(v)):
                return f"extrinsics.{name}: values must be finite"
            quaternion_to_matrix(v[3:], f"extrinsics.{name}")
        except (RigError, TypeError, ValueError) as e:
            return str(e)
        return None
