"""bevpool-bench times CUDA kernels: on a machine without a GPU it says so in one line, exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ros_harness import no_gpu_env

REPO = Path(__file__).resolve().parent.parent


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

    pytest.importorskip("bevpool_msgs.msg")
    sys.path[:0] = [str(REPO / "bench")]
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


def test_first_set_bench_learns_every_stream_in_both_modes(tmp_path):
    """bench/first_set.py: a fresh process per mode; made at once or after the sets, the templates
    end the same (one per camera stream, every job run), and each set's time is recorded."""
    import json

    pytest.importorskip("bevpool_msgs.msg")
    out = tmp_path / "first.json"
    r = subprocess.run([sys.executable, "bench/first_set.py", "--sets", "14", "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    modes = {m["mode"]: m for m in json.loads(out.read_text())["results"]}
    assert set(modes) == {"now", "after_set"}
    for m in modes.values():
        # each stream learnt once; again when rclpy's uninitialised CDR padding of a later datagram
        # differs from its template's (cdr_template.CdrTemplate._find: a miss, read by rclpy, never wrong)
        assert m["streams"] == 12 and 12 <= m["templates_read"] <= 24 and m["jobs_left"] == 0, m
        assert len(m["set_ms"]) == 14 and min(m["set_ms"]) > 0
    # made at once nothing waits for a set; deferred, the last sets read every stream by template
    assert modes["now"]["after_set_ms"] == []  # 12 read, 1 written, and a stream learnt again
    assert len(modes["after_set"]["after_set_ms"]) == 1 + modes["after_set"]["templates_read"]
    assert modes["after_set"]["reads_by_template"] >= 12


@pytest.mark.ros
def test_latency_bench_splits_a_dds_set_at_the_processes(tmp_path):
    """bench/latency.py --split over real DDS (cpu backend, three processes): every set's time is cut
    at the processes from the node's own timeline; --param reaches the node (its EventsExecutor where
    rclpy has one), --node-env reaches the node's process (here its heap tuning, off, which the node
    reports); --profile-executor gives the node's executor thread by function; --launch-profile, no
    launcher without a GPU, leaves the row's launch phases empty."""
    import json
    import math

    pytest.importorskip("bevpool_msgs.msg")
    out = tmp_path / "lat"
    r = subprocess.run([sys.executable, "bench/latency.py", "--backend", "cpu", "--precision", "fp32",
                        "--bev-dtype", "float16", "--input-dtype", "float16", "--frames", "25", "--warmup", "5",
                        "--rate", "10", "--split", "--consumer-heap", "--param", "executor=events",
                        "--node-env", "BEVPOOL_HEAP_TUNING=0", "--profile-executor", "--launch-profile",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.with_suffix(".json").read_text())
    row, split = res["row"], res["split_ms"]
    assert row["received"] > 0 and row["consumer_heap"] is True
    assert row["node_heap"] == "glibc defaults (BEVPOOL_HEAP_TUNING=0)", row["node_heap"]
    assert row["node_env"] == "BEVPOOL_HEAP_TUNING=0" and row["launch_phases_us"] is None
    try:
        from rclpy.experimental import EventsExecutor  # noqa: F401
        assert row["executor"] == "events"
    except ImportError:
        assert row["executor"] == "single_threaded"
    for part in ("burst", "to_node", "node", "to_consumer", "callback_per_message"):
        assert math.isfinite(split[part]["50"]) and split[part]["50"] >= 0, (part, split)
    # per set the three parts add up to its end-to-end time (one clock): their medians come close
    parts = split["to_node"]["50"] + split["node"]["50"] + split["to_consumer"]["50"]
    assert abs(parts - res["e2e_ms"]["50"]) <= 0.5 * res["e2e_ms"]["50"], (parts, res["e2e_ms"])
    assert "Split per set" in out.with_suffix(".md").read_text()
    # the node's CPU time per set, from /proc: something, and less than a set's period
    assert 0 < row["node_cpu_ms_per_set"] < 100, row["node_cpu_ms_per_set"]
    assert "the node's CPU time per set" in out.with_suffix(".md").read_text()
    # the same while sets flow (the 20 after the warm-up, sampled every 0.2 s), and the node idle before them
    steady, idle = row["node_cpu_steady"], row["node_idle_cpu"]
    assert 0 < steady["ms_per_set"] < 100 and 0 < steady["sets"] <= 20 and steady["seconds"] > 0.5, steady
    assert 0 < idle["ms_per_s"] < 1000 and idle["seconds"] >= 1.5 and idle["by_thread"], idle
    # the executor thread's functions by own CPU time: the node's callbacks run there
    profile = res["executor_profile_ms_per_set"]
    assert profile and all(p["own_ms"] >= 0 and p["calls"] > 0 for p in profile), profile
    assert profile == sorted(profile, key=lambda p: -p["own_ms"])
    assert "executor thread under cProfile" in out.with_suffix(".md").read_text()


def test_the_latency_bench_says_when_the_nodes_drops_came():
    """bench/latency.py keeps, from the node's /diagnostics, when each drop counter grew (drops at a
    run's start, while templates are learnt, are not the same as drops spread over it)."""
    sys.path[:0] = [str(REPO / "bench")]
    from latency import drops_over_time

    s = 1_000_000_000
    statuses = [(5 * s, {"dropped_handoff_overwritten": "0", "sync_late": "0", "cameras": "6"}),
                (6 * s, {"dropped_handoff_overwritten": "3", "sync_late": "0", "cameras": "6"}),
                (7 * s, {"dropped_handoff_overwritten": "3", "sync_late": "0", "cameras": "6"}),
                (9 * s, {"dropped_handoff_overwritten": "4", "sync_late": "2", "device": "cpu"})]
    assert drops_over_time(statuses) == [[1.0, {"dropped_handoff_overwritten": 3}],
                                         [4.0, {"dropped_handoff_overwritten": 1, "sync_late": 2}]]
    assert drops_over_time([]) == []


def test_the_steady_cpu_per_set_leaves_out_the_start_and_the_drain():
    """The node's CPU time per set while sets flow is cut between the samples inside the publisher's
    sends after the warm-up: a start-up second of CPU before them and a drain after do not count."""
    sys.path[:0] = [str(REPO / "bench")]
    from latency import idle_cpu, steady_cpu_per_set

    ms = 1_000_000
    sent = [100 * ms * i for i in range(1, 31)]  # 30 sets at 10 Hz: 0.1 .. 3.0 s
    # 1 s of start-up CPU by 0.5 s, then 2 ms per 100 ms, then another second after the last send
    samples = [(0, 0.0, {"main": 0.0})]
    samples += [(t * ms, 1.0 + 0.02 * (t - 500) / 1000, {"main": 0.5, "loop": 0.5 + 0.02 * (t - 500) / 1000})
                for t in range(500, 3001, 200)]
    samples.append((3500 * ms, 2.5, {"main": 1.5, "loop": 1.0}))
    steady = steady_cpu_per_set(samples, sent, warmup=5)
    # the window 0.6 .. 3.0 s: its first and last samples at 0.7 and 2.9 s, 22 sets sent in (0.7, 2.9]
    assert steady["sets"] == 22 and abs(steady["seconds"] - 2.2) < 1e-9
    assert abs(steady["ms_per_set"] - 2.0) < 1e-9 and steady["by_thread"] == {"loop": 2.0}
    assert steady_cpu_per_set(samples, sent[:5], warmup=5) is None  # no set after the warm-up
    assert steady_cpu_per_set(samples[:1], sent, warmup=5) is None  # no two samples inside
    idle = idle_cpu([(0, 1.0, {"main": 1.0, "dds": 0.0}), (2000 * ms, 1.01, {"main": 1.004, "dds": 0.006})])
    assert abs(idle["ms_per_s"] - 5.0) < 1e-9 and idle["by_thread"] == {"dds": 3.0, "main": 2.0}
    assert idle_cpu([]) is None
