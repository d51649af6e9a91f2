"""What the ``configure`` transition builds from the parameter values, without node state: the
rig and its live calibration, the depth-image converters, the input topics and the backend
(created with the fallback rules). Every refusal is a one-line :class:`StartupError`."""
from __future__ import annotations

import os
from pathlib import Path

from ..backends import BackendUnavailable, create_backend
from ..cameras.calibration import LiveCalibration
from ..logtext import captured_log
from ..params import table as P
from ..paths import rig_path, shipped_rigs
from ..rig import RigError
from ..rig_yaml import load_rig

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


def make_backend(cfg: dict, logger):
    """(backend, requested name): the requested backend, or the fallback with one warning."""
    requested, fallback = cfg["backend"], cfg["backend_fallback"]
    from ..device import driver

    driver.default_stream_priority = cfg["gpu.stream_priority"]  # before the runtime's stream exists
    with captured_log("bevpool_ros.backends") as reasons:  # re-said once below, via ROS
        try:
            backend = create_backend(requested, cfg["precision"], fallback=fallback,
                                     check_finite=cfg["input.check_finite"],
                                     host_memory=cfg["gpu.host_memory"],
                                     trt_plugin=cfg["tensorrt.plugin"],
                                     trt_plugin_library=cfg["tensorrt.plugin_library"])
        except (BackendUnavailable, ValueError) as e:
            raise StartupError(f"backend {requested!r}: {e}") from None
        except Exception as e:  # a backend that breaks while probing must not take the node down
            if not fallback:
                raise StartupError(f"backend {requested!r} failed to start: "
                                   f"{type(e).__name__}: {e}") from None
            logger.warning(f"backend {requested!r} failed to start ({type(e).__name__}: {e}); "
                           "falling back to 'cpu'")
            return create_backend("cpu", cfg["precision"]), requested
    if requested not in ("best", backend.name):
        why = "; ".join(reasons) or "unavailable"
        logger.warning(f"backend {requested!r} unavailable here, running {backend.name!r} "
                       f"(precision {backend.precision}) instead: {why}")
    return backend, requested


def cpu_instead(cfg: dict, logger, backend, error: Exception, rig):
    """A GPU backend that cannot run ``rig`` hands over to the cpu backend with one warning that
    names the rig's sizes; with backend_fallback off (or on the cpu backend) the error stands."""
    what = (f"rig {rig.name} (C = {rig.channels}, depth {list(rig.depth_shape)}, grid "
            f"{list(rig.grid_shape)}): {type(error).__name__}: {error}")
    if backend.name == "cpu" or not cfg["backend_fallback"]:
        raise StartupError(f"backend {backend.name!r} cannot run {what}") from None
    logger.warning(f"backend {backend.name!r} cannot run {what}; falling back to 'cpu'")
    try:
        backend.close()
    except Exception as e:  # a half-prepared backend: whatever it holds goes with the process
        logger.warning(f"closing backend {backend.name!r}: {type(e).__name__}: {e}")
    return create_backend("cpu", cfg["precision"], check_finite=cfg["input.check_finite"])
