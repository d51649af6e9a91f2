"""Dead Fast DDS segments: real rclpy processes under the shipped 64 MiB profile, one killed with
SIGKILL (its segment stays in /dev/shm) and one alive (its segment must survive the clean-up)."""
from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bevpool_ros.paths import config_dir
from bevpool_ros.ros.dds_shm import SHM_DIR, dead_segments, remove_dead_segments

# alone: it frees segments of any age (another worker's participant may not have locked its own yet)
pytestmark = [pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm"), pytest.mark.alone]

PARTICIPANT = """
import rclpy, sys
from std_msgs.msg import String
rclpy.init()
node = rclpy.create_node("shm_probe")
node.create_publisher(String, "shm_probe", 1)
print("up", flush=True)
sys.stdin.read()  # until the test closes stdin or kills us
"""


def segments() -> set[str]:
    return {p.name for p in SHM_DIR.glob("fastdds_*") if not p.name.endswith("_el") and "port" not in p.name}


def start_participant(ros_env) -> tuple[subprocess.Popen, str]:
    before = segments()
    env = dict(ros_env, FASTDDS_DEFAULT_PROFILES_FILE=str(config_dir() / "dds" / "fastdds_large_data.xml"))
    proc = subprocess.Popen([sys.executable, "-c", PARTICIPANT], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    # its own: new since, and mapped by it (other processes on the machine make segments too)
    new = (segments() - before) & mapped_segments(proc.pid)
    assert len(new) >= 1, "the participant mapped no segment"
    return proc, new


def mapped_segments(pid: int) -> set[str]:
    """The Fast DDS segments process ``pid`` maps (/proc/<pid>/maps)."""
    with open(f"/proc/{pid}/maps") as f:
        paths = {line.split(maxsplit=5)[-1].strip() for line in f if str(SHM_DIR) in line}
    return {Path(p).name for p in paths} & segments()


@pytest.fixture
def ros_env():
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    return dict(os.environ)


def test_a_killed_participant_segment_is_freed_and_a_live_one_kept(ros_env):
    live, live_segs = start_participant(ros_env)
    killed, killed_segs = start_participant(ros_env)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        assert killed_segs <= segments()  # Fast DDS never reclaims it by itself
        dead = {p.name for p in dead_segments(min_age_s=0.0)}
        assert killed_segs <= dead
        assert not (live_segs & dead)
        count, freed = remove_dead_segments(min_age_s=0.0)
        assert count >= len(killed_segs) and freed > 0
        assert not (killed_segs & segments())
        assert all((SHM_DIR / (s + "_el")).exists() is False for s in killed_segs)
        assert live_segs <= segments() and live.poll() is None
    finally:
        live.stdin.close()
        live.wait(20)
    assert not (live_segs & segments())  # a clean exit unlinks its own


def test_locked_and_young_segments_are_left_alone(tmp_path: Path):
    names = {"dead": "fastdds_00000000000000aa", "held": "fastdds_00000000000000bb",
             "young": "fastdds_00000000000000cc", "port": "fastdds_port7400"}
    for n in names.values():
        (tmp_path / n).write_bytes(b"x" * 4096)
        (tmp_path / (n + "_el")).touch()
    old = time.time() - 60
    for key in ("dead", "held", "port"):
        os.utime(tmp_path / names[key], (old, old))
    (tmp_path / "fastdds_00000000000000dd").write_bytes(b"x")  # no lock file: not a segment we judge
    os.utime(tmp_path / "fastdds_00000000000000dd", (old, old))
    fd = os.open(tmp_path / (names["held"] + "_el"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held by this very process: still counts as alive
    try:
        assert [p.name for p in dead_segments(tmp_path)] == [names["dead"]]
        assert remove_dead_segments(tmp_path) == (1, 4096)
    finally:
        os.close(fd)
    left = {p.name for p in tmp_path.iterdir()}
    assert names["dead"] not in left and names["dead"] + "_el" not in left
    assert {names["held"], names["young"], names["port"], "fastdds_00000000000000dd"} <= left


def test_a_missing_shm_dir_is_nothing_to_clean(tmp_path: Path):
    assert dead_segments(tmp_path / "absent") == []
    assert remove_dead_segments(tmp_path / "absent") == (0, 0)
