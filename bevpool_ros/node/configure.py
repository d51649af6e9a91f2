"""What the ``configure`` transition builds from the parameter values, without node state: the
rig and its live calibration, the depth-image converters, the input topics and the backend
(created with the fallback rules). Every refusal is a one-line :class:`StartupError`."""
from __future__ import annotations

import os
from pathlib import Path

from .. import backends
from ..backends import BackendUnavailable, create_backend
from ..cameras.calibration import LiveCalibration
from ..logtext import captured_log
from ..params import table as P
from ..paths import rig_path, shipped_rigs
from ..rig import RigError
from ..rig_yaml import load_rig
from ..scatter_map import scatter_map_for

STREAMS = ("depth", "feat")


class StartupError(RuntimeError):
    """Invalid configuration: the transition fails with it (bevpool_node prints it, exit 2)."""


def rig_file_problem(value: str) -> str | None:
    """Why ``rig_file`` names no file (paths.rig_path): relative to what it was looked for, and the
    shipped rigs a bare name may name; None when it does."""
    path = rig_path(value)
    if path.is_file():
        return None
    if path.is_absolute():
        return f"rig_file: {value} does not exist"
    bare = path.parent == Path(".")
    return (f"rig_file: {value} does not exist relative to the node's working directory {os.getcwd()}"
            + (" and is not a shipped rig" if bare else "")
            + f" (shipped rigs, by name: {', '.join(shipped_rigs())}; or give an absolute path)")


def load_calibration(cfg: dict) -> LiveCalibration:
    problem = rig_file_problem(cfg["rig_file"])
    if problem:
        raise StartupError(problem)
    path = str(rig_path(cfg["rig_file"]))
    try:
        calib = LiveCalibration(load_rig(path), cfg["camera_names"])
    except RigError as e:
        raise StartupError(f"rig_file: {e}") from None  # e starts with the path
    errors = P.check_all(cfg, num_cameras=len(calib.camera_names))  # the rules that need the rig
    if errors:
        raise StartupError("; ".join(errors))
    return calib


def depth_image_inputs(cfg: dict, calibration: LiveCalibration) -> dict:
    """input.depth_mode 'image' cameras: their metric depth Image -> distribution
    (io/depth_image.py)."""
    from ..io.depth_image import converters_for

    try:
        return converters_for(calibration.camera_names, cfg["input.depth_mode"], calibration.rig,
                              cfg["input.depth_image_distribution"],
                              cfg["input.depth_image_sigma_m"], cfg["input.max_tensor_bytes"])
    except ValueError as e:
        raise StartupError(str(e)) from None


def tensor_topics(cfg: dict, cameras) -> dict[tuple[str, str], str]:
    """(camera, stream) -> input tensor topic (relative), in subscription order."""
    return {(cam, stream): cfg[f"input.{stream}_topic"].format(camera=cam)
            for cam in cameras for stream in STREAMS}


def camera_tensor_topics(cfg: dict, cameras, depth_images: dict) -> list[str]:
    """The topics that carry CameraTensor (a depth camera's Image topic is not one)."""
    return [t for (cam, stream), t in tensor_topics(cfg, cameras).items()
            if not (stream == "depth" and cam in depth_images)]


def backend_options(cfg: dict) -> dict:
    """What every backend of the node is made with (the cpu backend ignores the GPU's)."""
    return dict(check_finite=cfg["input.check_finite"], host_memory=cfg["gpu.host_memory"],
                stream_priority=cfg["gpu.stream_priority"], trt_plugin=cfg["tensorrt.plugin"],
                trt_plugin_library=cfg["tensorrt.plugin_library"])


def make_backend(cfg: dict, logger):
    """(backend, requested name): what ``create_backend`` decides, its warning said via ROS."""
    requested = cfg["backend"]
    with captured_log("bevpool_ros.backends") as reasons:  # re-said once below, via ROS
        try:
            backend = create_backend(requested, cfg["precision"], fallback=cfg["backend_fallback"],
                                     **backend_options(cfg))
        except (BackendUnavailable, ValueError) as e:
            raise StartupError(f"backend {requested!r}: {e}") from None
    if requested not in ("best", backend.name):
        why = "; ".join(reasons) or "unavailable"
        logger.warning(f"backend {requested!r} unavailable here, running {backend.name!r} "
                       f"(precision {backend.precision}) instead: {why}")
    return backend, requested


def cpu_instead(cfg: dict, logger, backend, error: Exception, rig):
    """A GPU backend that cannot run ``rig`` hands over to the cpu backend (backends.cpu_instead
    decides, its warning said via ROS); a refusal is a StartupError."""
    with captured_log("bevpool_ros.backends") as said:
        try:
            cpu = backends.cpu_instead(backend, error, scatter_map_for(rig), cfg["backend_fallback"],
                                       f"rig {rig.name}", **backend_options(cfg))
        except BackendUnavailable as e:
            raise StartupError(str(e)) from None
    for line in said:
        logger.warning(line)
    return cpu
