"""Output messages: BevFeature (grid geometry + tensor), Image (visualisation)."""
from __future__ import annotations

import numpy as np

from ..rig import Rig
from ..visualize import bev_to_rgb
from .tensor_codec import fill_msg


def stamp_to_ns(stamp) -> int:
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def ns_to_time(ns: int):
    from builtin_interfaces.msg import Time

    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def set_grid_geometry(m, rig: Rig) -> None:
    """origin, resolution_*, width/height/layers/channels and layout of a BevFeature or BevHandoff."""
    Z, Y, X = rig.grid_shape
    m.origin.x, m.origin.y, m.origin.z = float(rig.x.lower), float(rig.y.lower), float(rig.z.lower)
    m.resolution_x, m.resolution_y, m.resolution_z = float(rig.x.step), float(rig.y.step), float(rig.z.step)
    m.width, m.height, m.layers, m.channels = X, Y, Z, rig.channels
    m.layout = "ZYXC"


def bev_feature_msg(bev: np.ndarray, rig: Rig, stamp_ns: int, frame_id: str, cameras, camera_stamps_ns,
                    missing, backend: str, precision: str, dtype: str = "float32", reuse=None):
    """BevFeature for ``bev`` [Z, Y, X, C] pooled on ``rig``'s grid (``reuse``: see fill_msg)."""
    from bevpool_msgs.msg import BevFeature

    Z, Y, X = rig.grid_shape
    if bev.shape != (Z, Y, X, rig.channels):
        raise ValueError(f"bev shape {bev.shape} does not match the rig grid {(Z, Y, X, rig.channels)}")
    m = BevFeature()
    m.header.stamp = ns_to_time(stamp_ns)
    m.header.frame_id = frame_id
    set_grid_geometry(m, rig)
    fill_msg(m.tensor, bev, name="bev", layout="ZYXC", dtype=dtype, reuse=reuse)
    m.tensor.header = m.header
    m.cameras = list(cameras)
    m.camera_stamps = [ns_to_time(s) for s in camera_stamps_ns]
    m.missing_cameras = list(missing)
    m.backend = backend
    m.precision = precision
    return m


def bev_rgb(bev: np.ndarray, rig: Rig) -> np.ndarray:
    return bev_to_rgb(bev, rig.x.lower, rig.y.lower, rig.x.step, rig.y.step)


def image_msg(rgb: np.ndarray, header):
    """sensor_msgs/Image rgb8 from uint8 [rows, cols, 3] (image_codec: cv_bridge when installed)."""
    from .image_codec import array_to_image

    return array_to_image(rgb, "rgb8", header)


def image_to_rgb(img) -> np.ndarray:
    from .image_codec import image_to_array

    return image_to_array(img)
