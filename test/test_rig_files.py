"""A bad rig file is one line and exit 2, everywhere: the loader names the field (typed values,
unknown keys with the nearest valid one), and bevpool-inspect, bevpool_node, bevpool-bag,
bevpool-demo, bevpool-trt-build, bevpool-onnx-insert and bevpool_occupancy print that line and exit 2
without a traceback: their main(argv) in-process (test/in_process.py), bevpool_node and bevpool-bag
also as real processes (every console script runs as one in test/test_console_scripts.py)."""
from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import yaml
from conftest import NUSCENES_RIG

from bevpool_ros.rig import RigError
from bevpool_ros.rig_yaml import load_rig, rig_from_dict

FRONT = "cameras[CAM_FRONT]"


def edited(path: tuple, value) -> dict:
    d = yaml.safe_load(NUSCENES_RIG.read_text())
    node = d
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        node.pop(path[-1])
    else:
        node[path[-1]] = copy.deepcopy(value)
    return d


# (what, edit path, value, the message's essence): every case the loader must name
BAD = [
    ("fx_words", ("cameras", 0, "intrinsics", "fx"), "seven hundred",
     f"{FRONT}.intrinsics.fx: expected a number, got 'seven hundred'"),
    ("fx_numeric_string", ("cameras", 0, "intrinsics", "fx"), "700",
     f"{FRONT}.intrinsics.fx: expected a number, got '700'"),
    ("translation_strings", ("cameras", 0, "extrinsics", "translation"), ["1.7", "zero", 1.5],
     f"{FRONT}.extrinsics.translation[0]: expected a number, got '1.7'"),
    ("rotation_words", ("cameras", 0, "extrinsics", "rotation_wxyz"), "yaw 180",
     f"{FRONT}.extrinsics.rotation_wxyz: expected a list of 4 numbers [w, x, y, z], got 'yaw 180'"),
    ("rotation_three", ("cameras", 0, "extrinsics", "rotation_wxyz"), [1, 0, 0],
     f"{FRONT}.extrinsics.rotation_wxyz: expected 4 numbers [w, x, y, z], got 3"),
    ("yaw_key", ("cameras", 0, "extrinsics", "yaw"), 180,
     f"{FRONT}.extrinsics.yaw: unknown key (nearest valid key: 'rotation_wxyz'; "
     f"valid: rotation_wxyz, translation, camera_to_ego); give the rotation as "
     f"extrinsics.rotation_wxyz"),
    ("distortion_key", ("cameras", 0, "distortion"), [0.1, 0.0, 0.0, 0.0, 0.0],
     f"{FRONT}.distortion: unknown key (nearest valid key: 'extrinsics'; "
     f"valid: name, image_size, intrinsics, extrinsics, input); distortion is not modelled"),
    ("distortion_in_intrinsics", ("cameras", 0, "intrinsics", "distortion"), [0.1],
     f"{FRONT}.intrinsics.distortion: unknown key"),
    ("typo_top", ("bev_gird",), {"x": [0, 1, 1]},
     "bev_gird: unknown key (nearest valid key: 'bev_grid'"),
    ("typo_input", ("input", "crop_top"), 140,
     "input.crop_top: unknown key (nearest valid key: 'crop'"),
    ("image_size_text", ("image_size",), "1600x900",
     "image_size: expected a list of 2 numbers [width, height], got '1600x900'"),
    ("K_text", ("cameras", 0, "intrinsics"), {"K": [[1266, 0, 816], [0, "f", 491], [0, 0, 1]]},
     f"{FRONT}.intrinsics.K[1][1]: expected a number, got 'f'"),
    ("K_and_fx", ("cameras", 0, "intrinsics"),
     {"K": [[1266, 0, 816], [0, 1266, 491], [0, 0, 1]], "fx": 1},
     f"{FRONT}.intrinsics: give K or fx/fy/cx/cy, not both"),
    ("axis_text", ("bev_grid", "x"), "-51.2 .. 51.2",
     "bev_grid.x: expected a list of 3 numbers [lower, upper, step], got '-51.2 .. 51.2'"),
    ("bins_bool", ("depth_bins", "step"), True, "depth_bins.step: expected a number, got True"),
    ("camera_not_mapping", ("cameras", 1), "CAM_FRONT_RIGHT",
     "cameras[1]: expected a mapping, got 'CAM_FRONT_RIGHT'"),
    ("cameras_mapping", ("cameras",), {"CAM_FRONT": {}}, "cameras: expected a list, got a dict"),
    ("fx_missing", ("cameras", 0, "intrinsics", "fx"), KeyError, f"{FRONT}.intrinsics.fx: missing"),
]


@pytest.mark.parametrize("what, path, value, message", BAD, ids=[b[0] for b in BAD])
def test_the_loader_names_the_field_in_one_line(what, path, value, message):
    with pytest.raises(RigError) as e:
        rig_from_dict(edited(path, value))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("content, message", [
    (b"", "rig: expected a mapping, got None"),
    (b"- a\n- b\n", "rig: expected a mapping, got a list"),
    (b"cameras: [unclosed\n", "not valid YAML"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "cannot read the rig file (UnicodeDecodeError"),
])
def test_unreadable_files_are_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "rig.yaml"
    path.write_bytes(content)
    with pytest.raises(RigError) as e:
        load_rig(path)
    text = str(e.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text
    with pytest.raises(RigError, match="cannot read the rig file"):
        load_rig(tmp_path)  # a folder


# --- through the tools: main(argv) in-process, and one real process ------------------------------
def write_bad(tmp_path, what: str):
    (_, path, value, message), = [b for b in BAD if b[0] == what]
    f = tmp_path / f"{what}.yaml"
    f.write_text(yaml.safe_dump(edited(path, value), sort_keys=False))
    return f, message


def run_tool(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    from ros_harness import isolate_ros_env, no_gpu_env

    isolate_ros_env()  # the node and the demo would join a DDS domain: our own
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=timeout, env=no_gpu_env())


def assert_one_line_exit_2(rc: int, stdout: str, stderr: str, prog: str, path, message: str) -> None:
    from ros_harness import message_lines

    out = stdout + stderr
    assert rc == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    lines = message_lines(stderr)
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith(f"{prog}: ") and f"{path}: " in line and message in line, line


def refused_in_process(target: str, argv: list[str], capfd, monkeypatch, prog: str, path, message: str,
                       ros: bool = False) -> None:
    """``target``'s main(argv) in this process (test/in_process.py) prints the one line, returns 2."""
    from in_process import run_main

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # as no_gpu_env: the refusal comes before any device
    r = run_main(target, argv, capfd, monkeypatch, ros=ros)
    assert_one_line_exit_2(r.rc, r.stdout, r.stderr, prog, path, message)


ISSUE_CASES = ["fx_words", "translation_strings", "rotation_words", "yaw_key", "distortion_key"]


@pytest.mark.parametrize("what", ISSUE_CASES)
def test_bevpool_inspect(tmp_path, capfd, monkeypatch, what):
    path, message = write_bad(tmp_path, what)
    refused_in_process("bevpool_ros.cli.inspect", [str(path)], capfd, monkeypatch, "bevpool-inspect", path,
                       message)


@pytest.mark.ros
@pytest.mark.parametrize("what", ISSUE_CASES)
def test_bevpool_node(tmp_path, capfd, monkeypatch, what):
    path, message = write_bad(tmp_path, what)
    refused_in_process("bevpool_ros.node.main", ["bevpool_node", "--ros-args", "-p", f"rig_file:={path}"],
                       capfd, monkeypatch, "bevpool_node: invalid configuration: rig_file", path, message,
                       ros=True)


@pytest.mark.ros
def test_bevpool_node_as_a_process(tmp_path):
    """As installed: the real process prints the line and exits 2 (the rest runs main in-process)."""
    path, message = write_bad(tmp_path, "rotation_words")
    r = run_tool(["bevpool_ros.node.main", "--ros-args", "-p", f"rig_file:={path}"])
    assert_one_line_exit_2(r.returncode, r.stdout, r.stderr, "bevpool_node: invalid configuration: rig_file",
                           path, message)


@pytest.mark.parametrize("what", ["fx_words", "rotation_words", "distortion_key"])
def test_bevpool_bag(tmp_path, capfd, monkeypatch, what):
    """record-synthetic, eval and eval-many refuse the rig before a node, a bag or Ray starts."""
    path, message = write_bad(tmp_path, what)
    for cmd in (["record-synthetic", str(tmp_path / "rec"), "--frames", "2"],
                ["eval", str(tmp_path / "no_bag"), "--out", str(tmp_path / "eval_out")],
                ["eval-many", str(tmp_path / "no_bag"), "--out", str(tmp_path / "many_out")]):
        refused_in_process("bevpool_ros.cli.bag", [*cmd, "--rig", str(path)], capfd, monkeypatch,
                           f"bevpool-bag {cmd[0]}", path, message)
    assert not any(tmp_path.glob("*out")) and not (tmp_path / "rec").exists()  # nothing left behind


def test_bevpool_bag_as_a_process(tmp_path):
    path, message = write_bad(tmp_path, "yaw_key")
    r = run_tool(["bevpool_ros.cli.bag", "eval", str(tmp_path / "no_bag"), "--out", str(tmp_path / "out"),
                  "--rig", str(path)])
    assert_one_line_exit_2(r.returncode, r.stdout, r.stderr, "bevpool-bag eval", path, message)
    assert not (tmp_path / "out").exists()


@pytest.mark.ros
@pytest.mark.parametrize("what", ["fx_words", "yaw_key"])
def test_bevpool_demo(tmp_path, capfd, monkeypatch, what):
    path, message = write_bad(tmp_path, what)
    refused_in_process("bevpool_ros.cli.demo", ["--rig", str(path), "--frames", "2", "--png",
                                                str(tmp_path / "d.png")], capfd, monkeypatch, "bevpool-demo",
                       path, message, ros=True)
    assert not (tmp_path / "d.png").exists()


def test_bevpool_trt_build(tmp_path, capfd, monkeypatch):
    path, message = write_bad(tmp_path, "rotation_words")
    refused_in_process("bevpool_ros.backends.tensorrt.prebuild", ["--rig", str(path), "--arch", "sm_89"], capfd,
                       monkeypatch, "bevpool-trt-build", path, message)


def test_bevpool_onnx_insert(tmp_path, capfd, monkeypatch):
    path, message = write_bad(tmp_path, "distortion_key")
    refused_in_process("bevpool_ros.backends.tensorrt.onnx_insert",
                       [str(tmp_path / "user.onnx"), str(tmp_path / "joined.onnx"), "--rig", str(path), "--depth",
                        "d", "--feat", "f", "--bev", "b"], capfd, monkeypatch, "bevpool-onnx-insert", path, message)


@pytest.mark.ros
def test_bevpool_occupancy(tmp_path, capfd, monkeypatch):
    """It needs no rig, but one it is given must be a good one."""
    path, message = write_bad(tmp_path, "yaw_key")
    refused_in_process("bevpool_ros.occupancy.node", ["bevpool_occupancy", "--ros-args", "-p",
                                                      f"rig_file:={path}"], capfd, monkeypatch,
                       "bevpool_occupancy: invalid configuration: rig_file", path, message, ros=True)
