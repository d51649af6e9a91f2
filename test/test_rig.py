"""Rig model: YAML loading, CameraInfo construction, and every invalid value named."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml
from conftest import NUSCENES_RIG

from bevpool_ros.rig import Camera, RigError, quaternion_to_matrix
from bevpool_ros.rig_yaml import load_rig, rig_from_dict


@pytest.fixture()
def rig_dict():
    return yaml.safe_load(NUSCENES_RIG.read_text())


def test_shipped_rig_geometry(nuscenes_rig):
    r = nuscenes_rig
    assert r.num_cameras == 6
    assert (r.feature_width, r.feature_height) == (44, 16)
    assert r.num_depth_bins == 59 and r.depth_values[0] == 1.0 and r.depth_values[-1] == 59.0
    assert r.grid_shape == (1, 128, 128)
    assert r.depth_shape == (6, 59, 16, 44)
    assert r.channels == 80


def test_front_camera_looks_forward(nuscenes_rig):
    cam = nuscenes_rig.cameras[0]
    optical_axis_in_ego = np.asarray(cam.rotation) @ np.array([0.0, 0.0, 1.0])
    assert optical_axis_in_ego[0] > 0.99  # camera z -> ego +x


def test_quaternion_identity_and_normalisation():
    np.testing.assert_allclose(quaternion_to_matrix([2, 0, 0, 0]), np.eye(3))
    R = quaternion_to_matrix([0.5, -0.5, 0.5, -0.5])
    np.testing.assert_allclose(R @ R.T, np.eye(3), atol=1e-12)


def test_from_camera_info_matrix_and_quaternion_agree():
    k = [1000.0, 0, 640, 0, 1000.0, 360, 0, 0, 1]
    q = [0.5, -0.5, 0.5, -0.5]
    a = Camera.from_camera_info("a", k, 1280, 720, rotation_wxyz=q, translation=[1, 2, 3])
    T = np.eye(4)
    T[:3, :3] = quaternion_to_matrix(q)
    T[:3, 3] = [1, 2, 3]
    b = Camera.from_camera_info("a", k, 1280, 720, camera_to_ego=T)
    assert a == b


def test_digest_tracks_geometry_not_channels(nuscenes_rig):
    from dataclasses import replace

    assert nuscenes_rig.digest() == replace(nuscenes_rig, channels=256).digest()
    assert nuscenes_rig.digest() != replace(nuscenes_rig, depth_step=0.5).digest()


def _mutate(d, path, value):
    d = copy.deepcopy(d)
    node = d
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return d


@pytest.mark.parametrize("path, value, field", [
    (("cameras", 0, "intrinsics", "fx"), float("nan"), "K"),
    (("cameras", 0, "intrinsics", "fx"), 0.0, "K"),
    (("cameras", 0, "extrinsics", "rotation_wxyz"), [0, 0, 0, 0], "rotation_wxyz"),
    (("cameras", 0, "extrinsics", "translation"), [0, float("inf"), 0], "translation"),
    (("depth_bins", "step"), 0.0, "depth_bins.step"),
    (("depth_bins", "step"), -1.0, "depth_bins.step"),
    (("depth_bins", "stop"), 0.5, "depth_bins"),
    (("depth_bins", "start"), float("inf"), "depth_bins.start"),
    (("bev_grid", "x"), [10.0, -10.0, 0.8], "bev_grid.x"),
    (("bev_grid", "y"), [-51.2, 51.2, 0.0], "bev_grid.y.step"),
    (("bev_grid", "z"), [-5.0, 3.0], "bev_grid.z"),
    (("input", "crop"), [0, 200], "input.crop"),
    (("input", "crop"), [-1, 0], "input.crop_left"),
    (("input", "resize"), 0.0, "input.resize"),
    (("feature_stride",), 15, "feature_stride"),
    (("channels",), 0, "channels"),
    (("channels",), 2.5, "channels"),
    (("cameras",), [], "cameras"),
    (("frustum_sampling",), "random", "frustum_sampling"),
])
def test_invalid_values_name_the_field(rig_dict, path, value, field):
    with pytest.raises(RigError, match=field.replace(".", r"\.").replace("[", r"\[")):
        rig_from_dict(_mutate(rig_dict, path, value))


def test_missing_key_and_duplicate_camera(rig_dict):
    d = copy.deepcopy(rig_dict)
    del d["depth_bins"]
    with pytest.raises(RigError, match="depth_bins"):
        rig_from_dict(d)
    d = copy.deepcopy(rig_dict)
    d["cameras"][1]["name"] = d["cameras"][0]["name"]
    with pytest.raises(RigError, match="duplicate"):
        rig_from_dict(d)


def test_camera_info_wrong_k_length():
    with pytest.raises(RigError, match="9 values"):
        Camera.from_camera_info("c", [1.0] * 8, 100, 100, rotation_wxyz=[1, 0, 0, 0])


def test_non_rotation_matrix_rejected():
    T = np.eye(4)
    T[0, 0] = 2.0
    with pytest.raises(RigError, match="rotation"):
        Camera.from_camera_info("c", [100, 0, 50, 0, 100, 50, 0, 0, 1], 100, 100, camera_to_ego=T)


def test_bad_yaml_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("cameras: [unclosed\n")
    with pytest.raises(RigError, match="not valid YAML"):
        load_rig(p)
    p.write_text("- just a list\n")
    with pytest.raises(RigError, match="mapping"):
        load_rig(p)


def test_intrinsics_that_cannot_belong_to_the_image_size_are_named():
    from bevpool_ros.rig import intrinsics_problem

    K = [[1266.4, 0.0, 816.3], [0.0, 1266.4, 491.5], [0.0, 0.0, 1.0]]  # a 1600x900 camera
    assert intrinsics_problem(K, 1600, 900) is None
    assert intrinsics_problem([[633.2, 0, 408.1], [0, 633.2, 245.7], [0, 0, 1]], 800, 450) is None  # K / 2
    assert "cx=816.3 is not in the middle half of a 640x480 image" in intrinsics_problem(K, 640, 480)
    assert "not in the middle half" in intrinsics_problem(K, 2**31 - 1, 2**31 - 1)
    assert "cy=491.5 is not in the middle half of a 1600x10000 image" in intrinsics_problem(K, 1600, 10000)
    wide = [[10.0, 0.0, 800.0], [0.0, 10.0, 450.0], [0.0, 0.0, 1.0]]  # f = 10 px: a 178 deg "pinhole"
    assert "horizontal field of view 178.6 deg" in intrinsics_problem(wide, 1600, 900)
