"""Every camera keeps its field of view: a camera whose image size differs from the rig's gets the
rig's resize and crop scaled to its size (or its own), in the scatter map, in live calibration
from CameraInfo, and in what the cpu backend and the FP64 reference pool."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import rig_variants as V
import yaml
from conftest import NUSCENES_RIG

from bevpool_ros.backends import CpuBackend
from bevpool_ros.cameras.calibration import LiveCalibration
from bevpool_ros.input_transform import InputTransform
from bevpool_ros.reference import pool_reference
from bevpool_ros.rig import RigError
from bevpool_ros.rig_yaml import rig_from_dict
from bevpool_ros.scatter_map import build_scatter_map, frustum_points_ego, frustum_rays

SCALE = 1.2  # 1600x900 -> 1920x1080


@pytest.fixture()
def rig_dict():
    return yaml.safe_load(NUSCENES_RIG.read_text())


def front_at_1920(d: dict) -> dict:
    """CAM_FRONT as a 1920x1080 camera with the same field of view (intrinsics x 1.2)."""
    d = copy.deepcopy(d)
    front = d["cameras"][0]
    assert front["name"] == "CAM_FRONT"
    front["image_size"] = [1920, 1080]
    front["intrinsics"] = {k: v * SCALE for k, v in front["intrinsics"].items()}
    return d


def cells_of(rig, camera: str) -> set[int]:
    smap = build_scatter_map(rig)
    n = [c.name for c in rig.cameras].index(camera)
    _, d, h, w = smap.depth_shape
    return set(smap.ranks_bev[smap.ranks_depth // (d * h * w) == n].tolist())


def overlap(a: set, b: set) -> float:
    return len(a & b) / len(a | b)


def test_a_larger_camera_with_the_same_field_of_view_covers_the_same_cells(rig_dict, nuscenes_rig):
    big = rig_from_dict(front_at_1920(rig_dict))
    t = big.transform_of(big.cameras[0])
    assert t.resize == pytest.approx(0.44 / SCALE) and (t.crop_left, t.crop_top) == (0, 140)
    assert t.resized_size() == (704, 396)  # the same resized image, so the same network input
    np.testing.assert_allclose(frustum_points_ego(big), frustum_points_ego(nuscenes_rig), atol=1e-9)
    assert overlap(cells_of(big, "CAM_FRONT"), cells_of(nuscenes_rig, "CAM_FRONT")) > 0.999
    # the other cameras did not move
    assert big.transform_of(big.cameras[1]) == nuscenes_rig.transform_of(nuscenes_rig.cameras[1])


def test_the_same_inputs_pool_to_the_same_grid(rig_dict, nuscenes_rig):
    """cpu backend and FP64 reference: the 1920x1080 camera's features land where the 1600x900
    camera's did."""
    big = rig_from_dict(front_at_1920(rig_dict))
    d, f = (a.astype(np.float32) for a in V.random_inputs(nuscenes_rig, seed=5))
    want = pool_reference(d, f, build_scatter_map(nuscenes_rig))
    smap = build_scatter_map(big)
    ref = pool_reference(d, f, smap)
    np.testing.assert_allclose(ref, want, atol=1e-9 * max(1.0, np.abs(want).max()))
    be = CpuBackend()
    be.prepare(smap)
    np.testing.assert_allclose(be.pool(d, f), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


def test_another_aspect_ratio_keeps_the_window_in_place(rig_dict):
    """A 4:3 camera on a 16:9 rig: the smaller size ratio, the window at the same angle from the
    image centre; the network input size stays the rig's."""
    d = copy.deepcopy(rig_dict)
    d["cameras"][3].update(image_size=[1280, 960])
    r = rig_from_dict(d)
    t = r.transform_of(r.cameras[3])
    assert t.resize == pytest.approx(0.55) and t.resized_size() == (704, 528)
    # rig: the window centre lies 70 resized pixels below the image centre (140 + 128 - 198)
    assert (t.crop_left, t.crop_top) == (0, 264 + 70 - 128)
    assert t.kept_fraction(704, 256) == pytest.approx((1.0, 256 / 528))
    assert build_scatter_map(r).depth_shape == (6, 59, 16, 44)


def test_a_camera_may_have_its_own_resize_and_crop(rig_dict):
    d = copy.deepcopy(rig_dict)
    d["cameras"][4]["input"] = {"resize": 0.5, "crop": [48, 190]}
    r = rig_from_dict(d)
    cam = r.cameras[4]
    assert r.transform_of(cam) == InputTransform(0.5, 48, 190, 1600, 900)
    # the top-left feature cell's ray leaves the source pixel (48, 190) / 0.5
    _, rays = frustum_rays(r)
    K, R = np.asarray(cam.K), np.asarray(cam.rotation)
    pix = R.T @ rays[4, 0, 0]
    np.testing.assert_allclose((K @ pix)[:2] / (K @ pix)[2], (96.0, 380.0), atol=1e-9)
    # the others keep the rig's
    assert r.transform_of(r.cameras[0]) == r.transform


def test_own_transform_follows_its_camera_to_another_size(rig_dict):
    """Written for the camera's own 1600x900: a 1920x1080 CameraInfo scales it like the rig's."""
    d = copy.deepcopy(rig_dict)
    d["cameras"][0]["input"] = {"resize": 0.5, "crop": [48, 190]}
    calib = LiveCalibration(rig_from_dict(d))
    before = calib.rig
    K = np.asarray(before.cameras[0].K) * np.array([[SCALE], [SCALE], [1.0]])
    assert calib.update_intrinsics("CAM_FRONT", K.reshape(-1).tolist(), 1920, 1080)
    t = calib.rig.transform_of(calib.rig.cameras[0])
    assert t.resize == pytest.approx(0.5 / SCALE) and (t.crop_left, t.crop_top) == (48, 190)
    np.testing.assert_allclose(frustum_points_ego(calib.rig), frustum_points_ego(before), atol=1e-9)


def test_camera_info_of_another_size_follows_the_same_rule(nuscenes_rig):
    """CameraInfo mid-stream: CAM_FRONT, now 1920x1080 with the same view, covers its cells."""
    calib = LiveCalibration(nuscenes_rig)
    K = np.asarray(nuscenes_rig.cameras[0].K) * np.array([[SCALE], [SCALE], [1.0]])
    assert calib.update_intrinsics("CAM_FRONT", K.reshape(-1).tolist(), 1920, 1080)
    assert calib.version == 1 and calib.rig.cameras[0].width == 1920
    assert overlap(cells_of(calib.rig, "CAM_FRONT"), cells_of(nuscenes_rig, "CAM_FRONT")) > 0.999
    assert calib.rig.image_size == (1600, 900)  # the rig's transform is still written for 1600x900


def test_cameras_of_different_sizes_need_the_size_the_transform_is_written_for(rig_dict):
    d = copy.deepcopy(rig_dict)
    del d["image_size"]
    for c in d["cameras"]:
        c["image_size"] = [1600, 900]
    assert rig_from_dict(d).image_size == (1600, 900)  # one size: that one
    d["cameras"][0]["image_size"] = [1920, 1080]
    with pytest.raises(RigError, match=r"image_size: missing, and the cameras differ in size "
                                       r"\(CAM_FRONT 1920x1080, .*1600x900\)"):
        rig_from_dict(d)
    d["cameras"][0]["input"] = {"resize": 0.44 / SCALE, "crop": [0, 140]}  # or its own input
    assert rig_from_dict(d).image_size == (1600, 900)


@pytest.mark.parametrize("edit, message", [
    ({"input": {"resize": 0.5, "crop": [48, 250]}},
     r"cameras\[CAM_FRONT\]\.input\.crop: window 704x256 at \(48, 250\) lies outside camera "
     r"CAM_FRONT's resized image 800x450"),
    ({"input": {"resize": 0.0}}, r"cameras\[CAM_FRONT\]\.input\.resize: must be > 0"),
    ({"input": {"resize": 0.5, "crop": [-2, 0]}},
     r"cameras\[CAM_FRONT\]\.input\.crop_left: must be a non-negative"),
    ({"input": {"resize": 0.5, "width": 704}}, r"cameras\[CAM_FRONT\]\.input\.width: unknown key"),
])
def test_bad_own_transforms_are_named(rig_dict, edit, message):
    d = copy.deepcopy(rig_dict)
    d["cameras"][0].update(edit)
    with pytest.raises(RigError, match=message):
        rig_from_dict(d)


def test_the_mixed_sizes_variant_keeps_every_cameras_view():
    """The rig-variant run on every backend: its scaled cameras see what the 1600x900 ones do."""
    r = V.rig("mixed_sizes_nuscenes")
    kept = [r.transform_of(c).kept_fraction(r.input_width, r.input_height) for c in r.cameras]
    reference = r.transform.kept_fraction(r.input_width, r.input_height)
    names = [c.name for c in r.cameras]
    assert kept[names.index("CAM_FRONT")] == pytest.approx(reference)
    assert all(n for n in build_scatter_map(r).points_per_camera())


def test_inspect_reports_each_cameras_view_and_warns_on_a_lost_field_of_view(tmp_path):
    import json
    import subprocess
    import sys

    path = V.write_rig("mixed_sizes_nuscenes", tmp_path)
    def run(*args):
        return subprocess.run([sys.executable, "-m", "bevpool_ros.cli.inspect", str(path), *args],
                              capture_output=True, text=True, timeout=120)
    r = run()
    assert r.returncode == 0, r.stderr
    lines = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("    CAM_")}
    front = "1920x1080 (rig, scaled: x0.3667, crop 0,140)  x 0-1920 (100%)  y 382-1080 (65%)"
    assert front in lines["CAM_FRONT"]
    assert "(own: x0.5, crop 48,190)  x 96-1504 (88%)" in lines["CAM_BACK_LEFT"]
    warnings = [line for line in r.stdout.splitlines() if line.startswith("  warning:")]
    assert len(warnings) == 2
    assert "CAM_BACK loses 25% of the vertical field of view" in warnings[0]
    assert "CAM_BACK_LEFT loses 12% of the horizontal field of view" in warnings[1]
    s = json.loads(run("--json").stdout)
    views = s["camera_views"]
    assert views["CAM_FRONT"]["fov_loss"] == pytest.approx([0.0, 0.0], abs=1e-9)
    assert not views["CAM_FRONT"]["warning"]
    assert views["CAM_FRONT"]["fov_deg"]["horizontal"][0] == pytest.approx(
        views["CAM_FRONT"]["fov_deg"]["horizontal"][1])  # the whole width reaches the network
    assert len(s["warnings"]) == 2
    # the threshold is the user's: at 30 % nothing is worth a warning here
    assert json.loads(run("--json", "--fov-warn", "30").stdout)["warnings"] == []


def test_a_camera_of_another_shape_is_told_why_it_loses_field_of_view(rig_dict):
    """A 16:10 camera on the rig's 16:9 transform: the loss is its shape, not a mistake to look for."""
    from bevpool_ros.camera_view import camera_views

    front = rig_dict["cameras"][0]
    front["image_size"] = [1600, 1000]
    front["intrinsics"]["cy"] += 50
    assert camera_views(rig_from_dict(rig_dict))["CAM_FRONT"]["warning"] == (
        "CAM_FRONT loses 10% of the vertical field of view the rig's input transform keeps (source window "
        "x 0-1600, y 368-950 of 1600x1000): its 1600x1000 image (1.60:1) is another shape than the 1600x900 "
        "(1.78:1) the rig's transform is written for, which is scaled to fit its width, so the rest of its "
        "height does not reach the network. Expected for a camera of this shape; give it its own "
        "cameras[].input to choose another part")


def test_inspect_says_why_float16_writes_as_much_output_as_float32():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.inspect", str(NUSCENES_RIG)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("    float")}
    assert rows["float32"].endswith(" float32") and rows["float16"].endswith(" float32"), rows
    assert rows["float8_e4m3"].endswith(" float16"), rows
    assert ("    (the output is the BEV grid in the dtype the backends write it for each input dtype: float32 "
            "for float32, float32 for float16, float16 for float8_e4m3)") in r.stdout.splitlines()


@pytest.mark.parametrize("fmt", [[], ["--json"]], ids=["text", "json"])
def test_inspect_into_a_closed_pipe_stops_quietly(fmt):
    """``bevpool-inspect rig.yaml | head``: the reader left before the output; no traceback."""
    import os
    import subprocess
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    try:
        r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.inspect", str(NUSCENES_RIG), *fmt],
                           stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert r.returncode == 0 and r.stderr == "", r.stderr


def test_the_docs_example_scales_its_larger_camera():
    """docs/rigs.md's example: front_right (1344x756, K x 1.05): resize 0.5 / 1.05, crop [0, 4]."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "rigs.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    r = rig_from_dict(yaml.safe_load(block))
    left, right = (r.transform_of(c) for c in r.cameras)
    assert (left.resize, left.crop_left, left.crop_top) == (0.5, 0, 4)
    assert right.resize == pytest.approx(0.5 / 1.05) and (right.crop_left, right.crop_top) == (0, 4)
