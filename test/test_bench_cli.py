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


def test_cold_path_times_every_step_warm_and_paced(tmp_path):
    """bench/cold_path.py: each per-set step timed back to back and paced; ``--pool`` adds the
    in-process call (run here over test/fake_cuda.py's counting driver: the real Python path)."""
    import gc
    import json
    from pathlib import Path

    import pytest

    pytest.importorskip("bevpool_msgs.msg")
    sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "bench")]
    import cold_path
    from fake_cuda import fake_gpu

    out = tmp_path / "cold.json"
    with fake_gpu() as fake:
        assert cold_path.main(["--calls", "3", "--rate", "200", "--pool", "--json", str(out)]) == 0
        gc.collect()  # whatever the bench left is freed by the stand-in, never by a real libcuda
    result = json.loads(out.read_text())
    rows = {r["step"]: r for r in result["rows"]}
    # the stand-in's handles never reach libcuda or PyTorch (a GPU machine has both: it crashed there)
    assert result["pool_on_device_us"] is None
    assert set(rows) == {"python_call", "deserialize_tensor_handoff", "deserialize_bev_handoff",
                         "serialize_bev_handoff", "patch_template", "encode_bev_template",
                         "decode_tensor_template", "decode_bev_template", "bevpool_pool", "graph_launch"}
    for r in rows.values():
        assert r["warm"]["p50_us"] > 0 and r["paced_200hz"]["p50_us"] > 0
    assert fake.calls["cuGraphLaunch"] >= 30  # the steady pool call is a graph replay
