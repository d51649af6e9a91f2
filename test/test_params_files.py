"""Params files and parameter names checked like rigs, without ROS (bevpool_ros/params/files.py,
names.py, check.py): every refusal is one line naming the file and the nearest valid parameter.
The nodes and the bag tools all call these; test_params_at_start.py checks their wiring."""
from __future__ import annotations

import pytest

from bevpool_ros.params import occupancy
from bevpool_ros.params import table as P
from bevpool_ros.params.check import node_parameters
from bevpool_ros.params.files import (
    ParamsFileError,
    key_matches,
    parameters_for,
    read_params_file,
    ros_params_files,
)
from bevpool_ros.params.names import ParameterError, nearest, unknown_reason

TYPO = "/**:\n  ros__parameters:\n    backend: cpu\n    precison: fp16\n    sync:\n      slopp_s: 0.05\n"


def write(tmp_path, text: str, name: str = "p.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def one_line(e) -> str:
    text = str(e.value)
    assert "\n" not in text and text, text
    return text


def test_a_typo_in_a_params_file_names_the_nearest_parameters(tmp_path):
    path = write(tmp_path, TYPO)
    with pytest.raises(ParameterError) as e:
        node_parameters(str(path))
    text = one_line(e)
    assert f"'precison' ({path}; did you mean 'precision'?)" in text
    assert f"'sync.slopp_s' ({path}; did you mean 'sync.slop_s'?)" in text


def test_a_typo_in_an_override_names_the_nearest_parameter():
    with pytest.raises(ParameterError) as e:
        node_parameters(None, {"precison": "fp16"})
    assert one_line(e) == "unknown parameter 'precison' (-p; did you mean 'precision'?)"
    with pytest.raises(ParameterError) as e:
        node_parameters(None, {"sync.slop_s": -1.0})  # values too, as the node checks them
    assert "sync.slop_s" in one_line(e)


def test_occupancy_names_are_checked_against_its_own_table():
    reason = unknown_reason({"treshold": "-p"}, occupancy.BY_NAME)
    assert reason == "unknown parameter 'treshold' (-p; did you mean 'threshold'?)"
    assert nearest("slop_s", P.BY_NAME) == "sync.slop_s"  # a group left out
    assert unknown_reason({"extrinsics.CAM_X": "-p"}, P.BY_NAME, prefixes=("extrinsics.",)) is None


def test_nested_and_dotted_names_are_one_name(tmp_path):
    path = write(tmp_path, "/**:\n  ros__parameters:\n    sync:\n      slop_s: 0.03\n"
                           "    sync.min_cameras: 2\n    output: {bev_dtype: float16}\n")
    assert parameters_for(path, "/bevpool_node") == {"sync.slop_s": 0.03, "sync.min_cameras": 2,
                                                     "output.bev_dtype": "float16"}


@pytest.mark.parametrize("key, fqn, applies", [
    ("/**", "/rig_a/bevpool_node", True),
    ("bevpool_node", "/bevpool_node", True),
    ("/bevpool_node", "/bevpool_node", True),
    ("bevpool_node", "/rig_a/bevpool_node", False),   # a bare name is the root namespace's
    ("/rig_a/bevpool_node", "/rig_a/bevpool_node", True),
    ("rig_a/bevpool_node", "/rig_a/bevpool_node", True),
    ("/rig_a/bevpool_node", "/bevpool_node", False),
    ("/*/bevpool_node", "/rig_a/bevpool_node", True),
    ("/**/bevpool_node", "/bevpool_node", True),
    ("/rig_a/*", "/rig_a/bevpool_node", True),
    ("/rig_b/*", "/rig_a/bevpool_node", False),
    ("bevpool", "/bevpool_node", False),
])
def test_node_keys_match_as_rcl_matches_them(key, fqn, applies):
    """The cases tried against rclpy (kilted): which sections reached the node's overrides."""
    assert key_matches(key, fqn) is applies


def test_a_namespaced_key_and_nested_namespaces(tmp_path):
    flat = write(tmp_path, "/rig_a/bevpool_node:\n  ros__parameters:\n    backend: cpu\n", "flat.yaml")
    nested = write(tmp_path, "rig_a:\n  bevpool_node:\n    ros__parameters:\n      backend: cpu\n", "nested.yaml")
    for path in (flat, nested):
        assert parameters_for(path, "/rig_a/bevpool_node") == {"backend": "cpu"}
        with pytest.raises(ParamsFileError) as e:
            parameters_for(path, "/bevpool_node")
        assert "matches node /bevpool_node" in one_line(e)


def test_a_file_for_no_node_of_this_name_says_so(tmp_path):
    path = write(tmp_path, "bevpool:\n  ros__parameters:\n    backend: cpu\n")
    with pytest.raises(ParamsFileError) as e:
        node_parameters(str(path))
    assert one_line(e) == (f"{path}: none of its top-level keys (bevpool) matches node /bevpool_node; "
                           "use /** or bevpool_node")


@pytest.mark.parametrize("text, expect", [
    (None, "no such file"),
    ("/**:\n  ros__parameters:\n    backend: cpu\n   bad: [\n", "not valid YAML (line 4:"),
    ("", "empty"),
    ("- a\n- b\n", "expected a mapping of node names to ros__parameters, got a YAML list"),
    ("precision: fp16\n", "'precision' holds a value, not ros__parameters"),
    ("/**:\n  precision: fp16\n", "'/**/precision' holds a value, not ros__parameters"),
    ("ros__parameters:\n  precision: fp16\n", "ros__parameters must sit under a node name"),
    ("/**:\n  ros__parameters: [1]\n", "ros__parameters must be a mapping"),
])
def test_files_that_cannot_be_used_are_one_line(tmp_path, text, expect):
    path = tmp_path / "p.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ParamsFileError) as e:
        read_params_file(path)
    assert one_line(e).startswith(f"{path}: ") and expect in str(e.value), str(e.value)


def test_a_directory_or_unreadable_file(tmp_path):
    with pytest.raises(ParamsFileError) as e:
        read_params_file(tmp_path)
    assert "is a directory" in one_line(e)
    binary = write(tmp_path, "", "b.yaml")
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ParamsFileError) as e:
        read_params_file(binary)
    assert one_line(e).startswith(f"{binary}: ")


def test_params_files_of_a_command_line():
    argv = ["bevpool_node", "--params-file", "not_ros.yaml", "--ros-args", "-p", "a:=1",
            "--params-file", "one.yaml", "-r", "__ns:=/x", "--", "--params-file", "app.yaml",
            "--ros-args", "--params-file", "two.yaml"]
    assert ros_params_files(argv) == ["one.yaml", "two.yaml"]
    assert ros_params_files(None) == []
