"""What a steady ``BevPooler.pool`` call asks of the CUDA driver (bench/inprocess_host_cost.py's
scenarios over test/fake_cuda.py's counting driver): on the H200 each driver call is microseconds
of latency, so the count is the contract. The time is the bench's to report, not a test's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bevpool_ros.workloads import get_workload

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import inprocess_host_cost as bench  # noqa: E402

ONE_REPLAY = {"cuGraphLaunch": 1}
RELEASED = {"cuEventRecord": 1}  # the buffer's release, for the next call's ordering


@pytest.mark.parametrize(
    "scenario, per_call, per_release",
    [
        ("torch", ONE_REPLAY, RELEASED),
        ("cai", ONE_REPLAY, RELEASED),
        ("out", ONE_REPLAY, {}),  # the caller's grid: nothing to give back
        ("held", ONE_REPLAY, RELEASED),
        # the stream changes every call: it waits for the previous call and for the buffer
        ("two_streams", dict(ONE_REPLAY, cuStreamWaitEvent=2), RELEASED),
        # no DLPack device: the driver is asked where each input lives
        ("driver", dict(ONE_REPLAY, cuPointerGetAttribute=2), RELEASED),
    ],
)
def test_a_steady_call_is_one_graph_launch(scenario, per_call, per_release):
    row = bench.measure(scenario, 24, get_workload("small"))
    assert row["driver_per_call"] == per_call
    assert row["driver_per_release"] == per_release


def test_torch_tensors_never_touch_their_protocols():
    row = bench.measure("torch", 8, get_workload("small"))
    assert row["protocol_reads"] == 0  # nor the stream: PyTorch's raw current stream


def test_the_bench_reports_a_table():
    row = bench.measure("cai", 4, get_workload("small"))
    assert row["pool_us"] > 0 and row["release_us"] > 0
    assert "| cai |" in bench.table([row])
