"""What Fast DDS commits for the bounded input type: a few 16 MiB payloads per endpoint, not 100.

Fast DDS preallocates ``allocated_samples`` (default 100) max-size payloads per reader of a
bounded type; with CameraTensor that was 1.6 GiB per input topic, and the in-process node's 12
topics took the test suite past 19 GiB. The shipped profile sets allocated_samples to 1. Measured
in a fresh process under MALLOC_PERTURB_, where every preallocated byte counts
(test/dds_memory_probe.py says why).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bevpool_ros.ros.dds_guard import TENSOR_BOUND_BYTES

pytestmark = pytest.mark.ros
PROBE = Path(__file__).resolve().parent / "dds_memory_probe.py"
PAYLOAD_MIB = TENSOR_BOUND_BYTES / (1 << 20)
PAYLOADS_PER_ENDPOINT = 2          # allocated_samples 1 + Fast DDS's extra_samples 1
SLACK_MIB = 16


@pytest.fixture(scope="module")
def measured() -> dict:
    env = dict(os.environ, MALLOC_PERTURB_="85")
    env.pop("BEVPOOL_TEST_DOMAIN", None)  # the probe picks its own domain
    proc = subprocess.run([sys.executable, str(PROBE)], env=env, capture_output=True, text=True, timeout=180)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"probe printed no report (rc {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    report = json.loads(lines[-1])
    report["rc"] = proc.returncode
    return report


def test_a_camera_tensor_reader_commits_two_payloads(measured):
    assert measured["reader_mib"] <= PAYLOADS_PER_ENDPOINT * PAYLOAD_MIB + SLACK_MIB, measured


def test_a_camera_tensor_writer_commits_two_payloads(measured):
    assert measured["writer_mib"] <= PAYLOADS_PER_ENDPOINT * PAYLOAD_MIB + SLACK_MIB, measured


def test_the_in_process_node_subscriptions_stay_bounded(measured):
    assert measured["rc"] == 0 and "aborted_at_mib" not in measured, measured
    assert measured["node_tensor_subscriptions"] == 12
    budget = 12 * PAYLOADS_PER_ENDPOINT * PAYLOAD_MIB + 64  # + the node's own arrays
    assert measured["node_mib"] <= budget, measured
