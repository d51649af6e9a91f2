"""What part of each camera's image reaches the network, and how much field of view it loses.

A camera's view is its input transform's window in source pixels, as a fraction of its image
and as angles (from K). The loss is measured against the rig's own transform on the rig's
``image_size``: a camera keeping 83 % of its width where the rig's transform keeps 100 % loses
17 % of the horizontal field of view the network was meant to see.
"""
from __future__ import annotations

import math

from .rig import Camera, Rig

DEFAULT_WARN_LOSS = 0.03  # "a few percent"


def _angle_deg(lo: float, hi: float, centre: float, focal: float) -> float:
    return math.degrees(math.atan((hi - centre) / focal) - math.atan((lo - centre) / focal))


def camera_view(rig: Rig, camera: Camera, warn_loss: float = DEFAULT_WARN_LOSS) -> dict:
    """One camera's window, kept fractions, angles and field-of-view loss; a warning or None."""
    t = rig.transform_of(camera)
    iw, ih = rig.input_width, rig.input_height
    left, top, right, bottom = t.source_window(iw, ih)
    kept = t.kept_fraction(iw, ih)
    reference = rig.transform.kept_fraction(iw, ih)
    loss = [max(0.0, 1.0 - k / r) for k, r in zip(kept, reference)]
    (fx, _, cx), (_, fy, cy), _ = camera.K
    w, h = camera.width, camera.height
    view = {
        "image_size": [w, h],
        "transform": "own" if camera.transform else "rig" if (w, h) == rig.image_size
        else "rig, scaled",
        "resize": t.resize, "crop": [t.crop_left, t.crop_top],
        "source_window": [left, top, right, bottom],
        "kept_fraction": list(kept),
        "fov_deg": {  # [kept, whole], degrees
            "horizontal": [_angle_deg(left, right, cx, fx), _angle_deg(0, w, cx, fx)],
            "vertical": [_angle_deg(top, bottom, cy, fy), _angle_deg(0, h, cy, fy)]},
        "fov_loss": loss,
        "warning": None,
    }
    lost = [(axis, v) for axis, v in zip(("horizontal", "vertical"), loss) if v > warn_loss]
    if lost:
        axis, v = max(lost, key=lambda a: a[1])
        view["warning"] = (
            f"{camera.name} loses {100 * v:.0f}% of the {axis} field of view the rig's input "
            f"transform keeps (source window x {left:.0f}-{right:.0f}, y {top:.0f}-{bottom:.0f} "
            f"of {w}x{h}): " + _why_lost(rig, camera, axis))
    return view


def _why_lost(rig: Rig, camera: Camera, axis: str) -> str:
    """What makes a camera lose field of view: another aspect ratio than the image the rig's
    transform is written for (its shape, nothing to fix), or its own transform."""
    w, h = camera.width, camera.height
    rw, rh = rig.image_size
    if camera.transform:
        return (f"its own input (resize {camera.transform.resize:g}, crop {camera.transform.crop_left},"
                f"{camera.transform.crop_top}) keeps less than the rig's; check that it is written for "
                f"its {w}x{h} image")
    fitted = "width" if axis == "vertical" else "height"
    return (f"its {w}x{h} image ({w / h:.2f}:1) is another shape than the {rw}x{rh} ({rw / rh:.2f}:1) "
            f"the rig's transform is written for, which is scaled to fit its {fitted}, so the rest of "
            f"its {'height' if fitted == 'width' else 'width'} does not reach the network. Expected "
            "for a camera of this shape; give it its own cameras[].input to choose another part")


def camera_views(rig: Rig, warn_loss: float = DEFAULT_WARN_LOSS) -> dict[str, dict]:
    return {c.name: camera_view(rig, c, warn_loss) for c in rig.cameras}
