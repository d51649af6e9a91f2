"""The robot install path: the workspace built with colcon (PyPI colcon-common-extensions against
the venv's ament packages) into an install space without symlinks, sourced, and run from there.

Checks, all from the install space (never the checkout, never the editable install): the Python
packages are imported from it; the one resolver finds configs, rigs, kernel sources and message
definitions under install/; NVRTC compiles the installed kernel sources; bevpool_node starts on a
config from install/share and bevpool_occupancy on the installed rig, both over DDS; a cuda-backend
start without a GPU fails for the missing GPU/driver, not for a missing file.
The shell lines in BUILD are the README's colcon steps, as run here.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV = Path(sys.prefix)
# README "Real ROS 2 install (colcon)": the same lines ($VENV = the bootstrapped .venv, $WS = the workspace)
BUILD = """
export PATH=$VENV/bin:$PATH AMENT_PREFIX_PATH=$VENV CMAKE_PREFIX_PATH=$VENV
cd $WS
colcon build --base-paths src src/bevpool_ros/msg --cmake-args -DPython3_EXECUTABLE=$VENV/bin/python -DBUILD_TESTING=OFF
"""
pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    if shutil.which("colcon", path=str(VENV / "bin")) is None:
        pytest.fail("colcon is missing from the venv: requirements.txt pins colcon-common-extensions")
    ws = tmp_path_factory.mktemp("ws")
    src = ws / "src" / "bevpool_ros"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.split(b"\0")
    for f in filter(None, files):  # a clean checkout of the working tree (no build/, no .venv)
        rel = Path(f.decode())
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    # a build, not a wait for an event: ~3 min idle, over 10 min on two busy cores (seen with two CPU hogs)
    r = subprocess.run(["bash", "-euc", BUILD], env=dict(os.environ, VENV=str(VENV), WS=str(ws)),
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    return ws


def in_install(ws: Path, command: str, timeout=120, **kw) -> subprocess.CompletedProcess:
    """Run ``command`` in a shell that sourced install/setup.bash, outside the checkout."""
    return subprocess.run(["bash", "-c", f"source {ws}/install/setup.bash && {command}"], cwd=ws,
                          capture_output=True, text=True, timeout=timeout, env=_clean_env(), **kw)


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH")}
    env["PATH"] = f"{VENV / 'bin'}:{env.get('PATH', '')}"
    return env


def test_install_space_has_no_symlinks_and_holds_the_shipped_data(install):
    prefix = install / "install" / "bevpool_ros"
    links = [p for p in prefix.rglob("*") if p.is_symlink()]
    assert not links, links[:5]
    share = prefix / "share" / "bevpool_ros"
    for f in ("config/cpu.yaml", "config/rigs/nuscenes_bevdet_r50.yaml", "plugin/bevpool_kernels.cu",
              "launch/bevpool.launch.py"):
        assert (share / f).is_file(), f
    for exe in ("bevpool_node", "bevpool_occupancy", "bevpool-bag", "bevpool-synthetic"):
        assert os.access(prefix / "lib" / "bevpool_ros" / exe, os.X_OK), exe  # where `ros2 run` looks


def test_resolver_finds_everything_in_the_install_space(install):
    r = in_install(install, f"{VENV}/bin/python -c 'import json, bevpool_ros, bevpool_msgs; "
                            "from bevpool_ros import paths; "
                            "print(json.dumps(dict(paths.shipped_data(), pkg=bevpool_ros.__file__, "
                            "msgs=bevpool_msgs.__file__)))'")
    assert r.returncode == 0, r.stderr[-3000:]
    import json

    found = json.loads(r.stdout.strip().splitlines()[-1])
    root = str(install / "install")
    for key, value in found.items():
        assert value.startswith(root), f"{key} resolved outside the install space: {value}"


def test_installed_kernel_sources_compile_with_nvrtc(install):
    r = in_install(install, f"{VENV}/bin/python -c 'from bevpool_ros.device import nvrtc_build as b; "
                            "print(b.plugin_dir()); print(len(b.compile_source(\"sm_90\")[0]))'", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith(str(install / "install")) and int(lines[-1]) > 1000


def test_the_hand_off_core_is_built_into_the_install_space_and_loads_from_it(install):
    r = in_install(install, f"BEVPOOL_NATIVE=on {VENV}/bin/python -c 'from bevpool_ros.handoff.native import core; "
                            "print(core.use_native()._name)'")
    assert r.returncode == 0, r.stderr[-3000:]
    library = r.stdout.strip().splitlines()[-1]
    assert library.startswith(str(install / "install")) and library.endswith("libbevpool_handoff.so"), library


def _start(install, exe: str, args: str) -> tuple[subprocess.Popen, Path]:
    log = install / f"{exe}_{time.time_ns()}.log"
    cmd = f"source {install}/install/setup.bash && exec {install}/install/bevpool_ros/lib/bevpool_ros/{exe} {args}"
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    env = _clean_env()
    env.update({k: os.environ[k] for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")})
    env.pop("FASTDDS_DEFAULT_PROFILES_FILE", None)  # let the installed node find its own profile
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=install, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            env=env)
    return proc, log


def _wait_for(log: Path, proc, text: str, timeout=60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in log.read_text():
            return True
        if proc.poll() is not None:
            return text in log.read_text()
        time.sleep(0.1)  # polling a log file: the condition, not a fixed wait
    return False


def test_node_and_occupancy_start_from_the_install_space(install):
    share = install / "install" / "bevpool_ros" / "share" / "bevpool_ros"
    node, node_log = _start(install, "bevpool_node", f"--ros-args --params-file {share}/config/cpu.yaml")
    # it needs no rig; given the installed one it takes its coverage from it
    occ, occ_log = _start(install, "bevpool_occupancy",
                          f"--ros-args -p rig_file:={share}/config/rigs/nuscenes_bevdet_r50.yaml")
    try:
        assert _wait_for(node_log, node, "ready:"), node_log.read_text()[-3000:]
        assert _wait_for(occ_log, occ, "ready:"), occ_log.read_text()[-3000:]
        assert "rig nuscenes_bevdet_r50" in node_log.read_text()
        assert "coverage from rig nuscenes_bevdet_r50" in occ_log.read_text()
    finally:
        for p in (node, occ):
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        rcs = [p.wait(30) for p in (node, occ)]
    assert rcs == [0, 0], node_log.read_text()[-2000:] + occ_log.read_text()[-2000:]


def test_cuda_start_without_a_gpu_fails_for_the_gpu_not_a_file(install):
    from bevpool_ros.device.driver import live_l2_bytes

    if live_l2_bytes() is not None:
        pytest.skip("this machine has a GPU: the cuda backend starts")
    node, log = _start(install, "bevpool_node", "--ros-args -p backend:=cuda -p backend_fallback:=false")
    rc = node.wait(120)
    out = log.read_text()
    assert rc == 2, out[-3000:]
    assert "backend 'cuda' unavailable" in out
    assert any(w in out for w in ("CUDA driver", "no CUDA", "GPU")), out[-2000:]
    for missing in ("not found", "No such file", "FileNotFoundError", "does not exist"):
        assert missing not in out, out[-2000:]
