"""The README's main job: ``bevpool-demo`` (what ./scripts/demo.sh runs after the bootstrap) over
real DDS, on this machine's best backend, ends with every check passed and its PNG written."""
from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.ros


def test_demo_runs_end_to_end(tmp_path):
    from ros_harness import isolate_ros_env

    isolate_ros_env()
    png = tmp_path / "bev.png"
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.demo", "--frames", "8", "--png", str(png)],
                       capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "tolerance: ok" in out and "exited with code 0" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
