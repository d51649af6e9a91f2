"""Parameters: the table, the shipped configs, start-up validation (clear error, exit code 2)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bevpool_ros.params import table as P

REPO = Path(__file__).resolve().parent.parent
CONFIGS = ["cpu.yaml", "desktop_rtx.yaml", "drive_thor.yaml"]


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_params(name: str) -> dict:
    data = yaml.safe_load((REPO / "config" / name).read_text())
    return flatten(data["/**"]["ros__parameters"])


def test_table_is_complete_and_self_consistent():
    assert len({p.name for p in P.PARAMS}) == len(P.PARAMS)
    for p in P.PARAMS:
        assert p.description.strip(), p.name
        assert p.check(p.default) is None, (p.name, p.check(p.default))
        if p.low is not None:
            assert p.check(p.low) is None and p.check(p.high) is None
            assert p.check(p.low - 1) and p.check(p.high + 1)
    assert P.check_all(P.defaults(), num_cameras=6) == []


@pytest.mark.parametrize("name, value", [
    ("sync.slop_s", -0.1), ("sync.slop_s", float("nan")), ("sync.slop_s", "0.1"), ("sync.slop_s", True),
    ("sync.camera_timeout_s", 0.0), ("sync.missing_camera_policy", "wait"), ("backend", "gpu"),
    ("precision", "int8"), ("input.max_tensor_bytes", 10), ("output.image_every_n", 0), ("camera_names", "CAM"),
])
def test_check_rejects(name, value):
    assert P.check(name, value)


def test_cross_parameter_rules():
    v = P.defaults() | {"sync.min_cameras": 7}
    assert any("min_cameras" in e for e in P.check_all(v, num_cameras=6))
    v = P.defaults() | {"input.depth_topic": "cameras/depth"}
    assert any("{camera}" in e for e in P.check_all(v))


@pytest.mark.parametrize("config", CONFIGS)
def test_shipped_configs_are_valid(config):
    values = config_params(config)
    unknown = set(values) - set(P.BY_NAME)
    assert not unknown, f"{config}: unknown parameters {unknown}"
    assert P.check_all(P.defaults() | values, num_cameras=6) == []


def test_thor_and_desktop_default_to_fp16():
    assert config_params("drive_thor.yaml")["precision"] == "fp16"
    assert config_params("desktop_rtx.yaml")["precision"] == "fp16"
    assert config_params("cpu.yaml")["backend"] == "cpu"


def test_every_parameter_is_documented():
    doc = (REPO / "docs" / "parameters.md").read_text()  # the configuration reference
    missing = [p.name for p in P.PARAMS if f"`{p.name}`" not in doc]
    assert not missing, f"undocumented in docs/parameters.md: {missing}"


# --- start-up validation: main(argv) in-process (test/in_process.py), one real process ----------
def start_node(*ros_args, timeout=60):
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    return subprocess.run([sys.executable, "-m", "bevpool_ros.node.main", "--ros-args", *ros_args],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


BAD_AT_START = [
    (["-p", "sync.slop_s:=-1.0"], "sync.slop_s"),
    (["-p", "sync.slop_s:=1"], "sync.slop_s"),                              # integer for a double
    (["-p", "backend:=gpu"], "backend"),
    (["-p", "sync.missing_camera_policy:=wait"], "sync.missing_camera_policy"),
    (["-p", "sync.min_cameras:=7"], "sync.min_cameras"),
    (["-p", "rig_file:=/nonexistent/rig.yaml"], "rig_file"),
    (["-p", "camera_names:=[CAM_NOSE]"], "CAM_NOSE"),
    (["-p", "input.depth_topic:=depth"], "input.depth_topic"),
    (["-p", "extrinsics.CAM_FRONT:=[1.0,2.0]"], "extrinsics.CAM_FRONT"),
]


@pytest.mark.ros
@pytest.mark.parametrize("args, expect", BAD_AT_START)
def test_bad_parameters_at_start_up_exit_non_zero_with_a_clear_error(args, expect, capfd, monkeypatch):
    from in_process import run_main

    r = run_main("bevpool_ros.node.main", ["bevpool_node", "--ros-args", *args], capfd, monkeypatch, ros=True)
    assert r.rc == 2, r.stdout + r.stderr
    assert "invalid configuration" in r.stderr and expect in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.ros
def test_bad_parameter_at_start_up_as_a_process():
    """As installed: a real process says it and exits 2 (the cases above run main in-process)."""
    r = start_node("-p", "sync.slop_s:=-1.0")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "invalid configuration" in r.stderr and "sync.slop_s" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def run_until_ready(*ros_args, env=None) -> tuple[int, str]:
    """Start the node, read its output until it is ready (or refuses), stop it with SIGINT."""
    import signal

    from ros_harness import isolate_ros_env

    isolate_ros_env()
    proc = subprocess.Popen([sys.executable, "-m", "bevpool_ros.node.main", "--ros-args", *ros_args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env=env)
    lines = []
    for line in proc.stdout:  # wait for the ready line, not a fixed time
        lines.append(line)
        if "ready:" in line or "invalid configuration" in line:
            break
    if lines and "ready:" in lines[-1]:
        proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, "".join(lines) + out


@pytest.mark.ros
def test_unavailable_backend_falls_back_with_exactly_one_warning():
    from ros_harness import no_gpu_env

    rc, text = run_until_ready("-p", "backend:=cuda", env=no_gpu_env())  # unavailable on any machine
    assert rc == 0 and "backend cpu" in text, text
    warnings = [line for line in text.splitlines() if "WARN" in line or "Warning" in line]
    assert len(warnings) == 1 and "'cuda'" in warnings[0] and "running 'cpu'" in warnings[0], text
    rc, text = run_until_ready("-p", "backend:=cuda", "-p", "backend_fallback:=false", env=no_gpu_env())
    assert rc == 2 and "backend 'cuda'" in text, text


@pytest.mark.ros
def test_a_shipped_rig_by_its_bare_name_as_the_launch_file_takes_it():
    for name in ("nuscenes_bevdet_r50", "nuscenes_bevdet_r50.yaml"):
        rc, text = run_until_ready("-p", f"rig_file:={name}", "-p", "backend:=cpu")
        assert rc == 0 and "ready:" in text and "rig nuscenes_bevdet_r50," in text, text


@pytest.mark.ros
def test_node_starts_with_every_shipped_config_then_exits_cleanly():
    """Each config through rcl's YAML parser; here tensorrt/cuda fall back to cpu with a warning."""
    for config in CONFIGS:
        rc, text = run_until_ready("--params-file", str(REPO / "config" / config))
        assert rc == 0 and "ready:" in text, f"{config}:\n{text}"
        requested = config_params(config)["backend"]
        if f"backend {requested} " not in text:  # it fell back: one warning must say so
            assert "unavailable here" in text or "failed to start" in text, text


@pytest.mark.ros
def test_camera_subset_and_extrinsics_from_parameters_at_start_up():
    rc, text = run_until_ready("-p", "camera_names:=[CAM_BACK,CAM_FRONT]",
                               "-p", "extrinsics.CAM_FRONT:=[1.7,0.0,1.5,0.5,-0.5,0.5,-0.5]")
    # rig order is kept whatever order the parameter lists
    assert rc == 0 and "ready: 2 cameras ['CAM_FRONT', 'CAM_BACK']" in text, text
