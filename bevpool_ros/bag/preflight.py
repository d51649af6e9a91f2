"""Checks that a bag suits the node's parameters and rig, made before any node starts or output is
written.

A mismatch would otherwise cost a long wait for a node that never subscribes, a replay in which no
set can form, or one in which the node drops every set (``bad_shape``: a 32-channel rig against a
64-channel bag); each is one line naming what differs and the option or parameter that fits. The
shapes are read from the first message of each camera stream.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cameras.calibration import LiveCalibration
from ..io.depth_image import DEPTH_ENCODINGS
from ..rig import Rig, RigError
from .io import BagError, read_bag

IMAGE = "sensor_msgs/msg/Image"
USE_THE_BAGS_RIG = "evaluate with the bag's rig (--rig RIG.yaml, or rig_file in --params-file)"


@dataclass(frozen=True)
class NodeView:
    """What the node will subscribe: its cameras, their topics and depth modes, its slop."""

    cameras: tuple[str, ...]
    depth_topics: dict[str, str]     # camera -> absolute topic
    feat_topics: dict[str, str]
    depth_modes: dict[str, str]      # camera -> distribution | image
    slop_s: float
    rig: Rig | None = None           # the node's cameras of the rig: the shapes it expects
    info_topics: dict[str, str] | None = None
    feature_layout: str = "HWC"      # input.feature_layout: a feature tensor naming none
    use_camera_info: bool = True

    @classmethod
    def of(cls, rig: Rig, parameter) -> "NodeView":
        """``parameter(name)``: the node's value of a parameter (evaluate.node_parameter)."""
        try:
            cameras = LiveCalibration(rig, parameter("camera_names")).camera_names
        except RigError as e:
            raise BagError(str(e)) from None
        modes = list(parameter("input.depth_mode"))
        if len(modes) not in (1, len(cameras)):
            raise BagError(f"input.depth_mode: {len(modes)} values for {len(cameras)} cameras "
                           f"(give 1 or {len(cameras)})")
        modes = modes * len(cameras) if len(modes) == 1 else modes

        def topics(name: str) -> dict[str, str]:
            return {c: "/" + parameter(name).format(camera=c).lstrip("/") for c in cameras}

        return cls(cameras, topics("input.depth_topic"), topics("input.feat_topic"),
                   dict(zip(cameras, modes)), float(parameter("sync.slop_s")),
                   LiveCalibration(rig, cameras).rig, topics("input.camera_info_topic"),
                   str(parameter("input.feature_layout")), bool(parameter("calibration.use_camera_info")))


def check_bag_fits(bag, topics: dict[str, dict], node: NodeView) -> None:
    """``topics``: bag_summary's topic table. BagError (one line) when the node cannot use it."""
    wanted = [t for c in node.cameras for t in (node.depth_topics[c], node.feat_topics[c])]
    missing = [t for t in wanted if t not in topics]
    if missing:
        held = sorted(t for t in topics if t.endswith(("/depth", "/feat")))
        rig = f" for rig {node.rig.name}" if node.rig is not None else ""
        raise BagError(f"{bag}: no {_few(missing, 3)} in the bag, which the node subscribes{rig} (bag "
                       f"holds {_few(held, 4) or 'no camera topics'}): {USE_THE_BAGS_RIG}, or set "
                       "camera_names / input.depth_topic / input.feat_topic to match it")
    held = {c: topics[node.depth_topics[c]]["type"] for c in node.cameras}
    fits = ["image" if held[c] == IMAGE else "distribution" for c in node.cameras]
    wrong = [c for c, want in zip(node.cameras, fits) if node.depth_modes[c] != want]
    if wrong:
        c = wrong[0]
        value = fits[0] if len(set(fits)) == 1 else "[" + ", ".join(fits) + "]"
        expected = "an Image" if node.depth_modes[c] == "image" else "a CameraTensor"
        raise BagError(f"{bag}: {node.depth_topics[c]} holds {held[c]}, but input.depth_mode makes "
                       f"the node expect {expected} there ({len(wrong)} camera(s) so): evaluate "
                       f"with -p input.depth_mode:={value}")
    if node.rig is not None:
        why = rig_mismatch(bag, topics, node)
        if why:
            raise BagError(f"{bag}: rig {node.rig.name} does not fit the bag: {why}")


def rig_mismatch(bag, topics: dict[str, dict], node: NodeView) -> str | None:
    """The first way the bag's camera streams differ from what the rig makes the node expect
    (tensor shapes: depth bins D, feature map HxW, channels C; depth Image encodings; CameraInfo
    image sizes), from the first message of each stream; None when they fit."""
    rig = node.rig
    wanted = {t: (c, s) for c in node.cameras for s, t in (("depth", node.depth_topics[c]),
                                                           ("feat", node.feat_topics[c]),
                                                           ("camera_info", (node.info_topics or {}).get(c)))
              if t in topics}
    if not wanted:  # read_bag would read every topic
        return None
    first: dict[str, object] = {}
    for m in read_bag(bag, topics=set(wanted)):
        if m.topic not in first:
            first[m.topic] = m.decode()
            if len(first) == len(wanted):
                break
    _, D, H, W = rig.depth_shape
    calib = LiveCalibration(rig)
    for topic, (cam, stream) in wanted.items():  # camera by camera, depth, feat, CameraInfo
        msg = first.get(topic)
        if msg is None:
            continue
        if stream == "camera_info":
            why = _camera_info_mismatch(calib, node, cam, msg)
        elif topics[topic]["type"] == IMAGE:
            why = None if msg.encoding in DEPTH_ENCODINGS else (
                f"depth encoding {msg.encoding!r}, expected one of {sorted(DEPTH_ENCODINGS)}")
        elif stream == "depth":
            why = _shape_mismatch(msg, msg.layout or "DHW", {"D": D, "H": H, "W": W}, ("DHW",))
        else:
            why = _shape_mismatch(msg, msg.layout or node.feature_layout,
                                  {"H": H, "W": W, "C": rig.channels}, ("HWC", "CHW"))
        if why:
            refused = stream == "camera_info" and node.use_camera_info  # the bag's own fault
            return f"{topic} {why}" + ("" if refused else f"; {USE_THE_BAGS_RIG}")
    return None


# a tensor dimension -> (what it counts, the rig entries that set it)
DIMENSIONS = {"C": ("channels", "channels"), "D": ("depth bins", "depth_bins"),
              "H": ("feature rows", "input.height / feature_stride"),
              "W": ("feature columns", "input.width / feature_stride")}


def _shape_mismatch(msg, layout: str, want: dict[str, int], layouts) -> str | None:
    shape = [int(v) for v in msg.shape]
    if layout not in layouts:
        return f"has layout {layout!r}, the node takes {' or '.join(layouts)}"
    expected = [want[d] for d in layout]
    if shape == expected:
        return None
    if len(shape) != len(layout):
        return f"holds shape {shape}, the rig expects {layout} {expected}"
    differ = [f"{got} {DIMENSIONS[d][0]} in the bag, {w} in the rig ({DIMENSIONS[d][1]})"
              for d, got, w in zip(layout, shape, expected) if got != w]
    return f"holds {layout} {shape}, the rig expects {expected}: " + ", ".join(differ)


def _camera_info_mismatch(calib: LiveCalibration, node: NodeView, cam: str, msg) -> str | None:
    size = f"{msg.width}x{msg.height}"
    if node.use_camera_info:  # the node takes the bag's intrinsics, if the rig's input fits them
        try:
            calib.update_intrinsics(cam, list(msg.k), msg.width, msg.height)
        except RigError as e:
            return (f"(a {size} camera) does not fit: {e}; the node would refuse it and drop that "
                    "camera's sets (-p calibration.use_camera_info:=false keeps the rig's intrinsics)")
        return None
    rig_cam = calib.camera(cam)
    if (msg.width, msg.height) != (rig_cam.width, rig_cam.height):
        return (f"is a {size} camera, the rig's {cam} {rig_cam.width}x{rig_cam.height}, and "
                "calibration.use_camera_info is false (the node keeps the rig's intrinsics; "
                "-p calibration.use_camera_info:=true takes the bag's)")
    return None


def _few(items, n: int) -> str:
    return ", ".join(items[:n]) + (" ..." if len(items) > n else "")
