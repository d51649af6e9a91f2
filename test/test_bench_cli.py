"""bevpool-bench times CUDA kernels: on a machine without a GPU it says so in one line, exit 2."""
from __future__ import annotations

import subprocess
import sys

from ros_harness import no_gpu_env


def test_bench_without_a_gpu_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bevpool_ros.cli.bench", "--workloads", "canonical",
                        "--json", str(tmp_path / "b.json")],
                       capture_output=True, text=True, timeout=120, env=no_gpu_env())
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("bevpool-bench: ") and "no usable GPU" in line, line
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "b.json").exists()
