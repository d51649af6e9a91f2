"""Write a synthetic nuScenes-rig camera bag: what a real recording of the node's inputs holds.

Per camera and frame: depth and feature Tensors plus CameraInfo, stamped like a camera driver
would (one stamp per set, optional per-camera jitter), topics as the node subscribes by default.
``depth_images`` names cameras that record a depth camera's 16UC1 Image (millimetres, a quarter of
the camera's resolution) instead of a distribution: the node takes them with
``input.depth_mode: image``. ``skip`` leaves cameras out of chosen frames, so a bag can carry the
faults a replay must survive.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..demo.synthetic_publisher import camera_info_msg
from ..io.bev_message import ns_to_time
from ..io.tensor_codec import make_camera_tensor
from ..metric_depth import DepthBins, millimetre_image, most_likely_depth
from ..progress import progress_bar
from ..rig import Rig
from ..synthetic import SyntheticScene
from .io import BagWriter

TOPIC = "/cameras/{camera}/{stream}"
START_NS = 1_700_000_000_000_000_000  # a fixed epoch: bags are reproducible byte for byte


def record_synthetic(path: str | Path, rig: Rig, frames: int = 20, rate_hz: float = 20.0,
                     dtype: str = "float16", layout: str = "HWC", seed: int = 0,
                     jitter_ms: float = 0.0, skip: dict[int, set[str]] | None = None,
                     depth_images=(), show_progress: bool = False, storage: str = "mcap") -> dict:
    """Write the bag; returns {frame index: stamp_ns} of the sets it holds."""
    unknown = set(depth_images) - {c.name for c in rig.cameras}
    if unknown:
        raise ValueError(f"depth_images: {sorted(unknown)} not cameras of rig {rig.name}")
    scene = SyntheticScene(rig, seed=seed)
    rng = np.random.default_rng(seed)
    period = int(1e9 / rate_hz)
    stamps = {}
    with (BagWriter(path, storage) as bag,
          progress_bar(frames, "record", "set", enabled=show_progress) as bar):
        for i in range(frames):
            stamp = START_NS + i * period
            stamps[i] = stamp
            depth, feat = scene.frame(i)
            for n, cam in enumerate(rig.cameras):
                if cam.name in (skip or {}).get(i, ()):
                    continue
                # drivers stamp at capture; the log time is the arrival, a few ms later
                offset = int(rng.uniform(-1, 1) * jitter_ms * 1e6)
                st = ns_to_time(stamp + offset)
                frame_id = f"{cam.name.lower()}_optical"
                f = feat[n] if layout == "HWC" else feat[n].transpose(2, 0, 1)
                d = (depth_image_msg(rig, n, depth[n]) if cam.name in depth_images
                     else make_camera_tensor(depth[n], "depth", "DHW", dtype))
                msgs = (("camera_info", camera_info_msg(rig, n, st, frame_id)), ("depth", d),
                        ("feat", make_camera_tensor(f, "feat", layout, dtype)))
                for k, (stream, msg) in enumerate(msgs):
                    msg.header.stamp = st
                    msg.header.frame_id = frame_id
                    bag.write(TOPIC.format(camera=cam.name, stream=stream), msg,
                              stamp + offset + 2_000_000 + 1000 * (n * 3 + k))
            bar.update(1)
    return stamps


def depth_image_msg(rig: Rig, n: int, distribution: np.ndarray):
    """Camera ``n``'s depth as a depth camera would send it: the scene's most likely bin as metres,
    0 (no return) where the scene has nothing, 16UC1 millimetres at a quarter of its resolution."""
    from ..io.image_codec import array_to_image

    metres = most_likely_depth(distribution, DepthBins.of_rig(rig))
    return array_to_image(millimetre_image(metres, rig.cameras[n].height // 4, rig.cameras[n].width // 4), "16UC1")
