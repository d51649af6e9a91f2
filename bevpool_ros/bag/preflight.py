"""Checks that a bag suits the node's parameters, made before any node starts or output is written.

A mismatch would otherwise cost a long wait for a node that never subscribes, or a replay in
which no set can form; each is one line naming the parameter to set and the value that fits.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cameras.calibration import LiveCalibration
from ..rig import Rig, RigError
from .io import BagError

IMAGE = "sensor_msgs/msg/Image"
TENSOR_TYPES = ("bevpool_msgs/msg/CameraTensor", "bevpool_msgs/msg/Tensor")


@dataclass(frozen=True)
class NodeView:
    """What the node will subscribe: its cameras, their topics and depth modes, its slop."""

    cameras: tuple[str, ...]
    depth_topics: dict[str, str]     # camera -> absolute topic
    feat_topics: dict[str, str]
    depth_modes: dict[str, str]      # camera -> distribution | image
    slop_s: float

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
                   dict(zip(cameras, modes)), float(parameter("sync.slop_s")))


def check_bag_fits(bag, topics: dict[str, dict], node: NodeView) -> None:
    """``topics``: bag_summary's topic table. BagError (one line) when the node cannot use it."""
    wanted = [t for c in node.cameras for t in (node.depth_topics[c], node.feat_topics[c])]
    missing = [t for t in wanted if t not in topics]
    if missing:
        held = sorted(t for t in topics if t.endswith(("/depth", "/feat")))
        raise BagError(f"{bag}: no {_few(missing, 3)} in the bag, which the node subscribes (bag "
                       f"holds {_few(held, 4) or 'no camera topics'}): set camera_names / "
                       "input.depth_topic / input.feat_topic to match it")
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


def _few(items, n: int) -> str:
    return ", ".join(items[:n]) + (" ..." if len(items) > n else "")
