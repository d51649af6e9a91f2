"""The node's memory comes back after every burst (docs/ros_interface.md, "Memory"): floods of
fragmented camera sets from producers that come and go, and oversized tensors, against a live
node over real DDS, with the default settings.

Under rmw_fastrtps's own reader policy (PREALLOCATED_WITH_REALLOC) each flood left hundreds of MiB
allocated in the readers' payload pools for good (16 MiB per payload of the bounded CameraTensor)
and a 200 MB sample left its grown buffer behind; the shipped profile's DYNAMIC readers free a
payload with its sample. The node reports what malloc holds (``memory_heap_in_use_mib``): unlike
the resident size it counts a pool's payloads whether or not their pages were written."""
from __future__ import annotations

import bevpool_msgs.msg  # noqa: F401  (built by scripts/build_msgs.sh; missing = a real failure)
import pytest
from ros_harness import PeakRss, RosGraph, camera_tensor_cdr

from bevpool_ros.demo.flood import run_flood
from bevpool_ros.demo.session import resident_mib
from bevpool_ros.paths import default_rig_path

pytestmark = pytest.mark.ros
MiB = 1 << 20
FLOODS = 3
HEAP_GROWTH_MIB = 64   # over floods 2..3 (the first one warms the pools up)


@pytest.fixture(scope="module")
def graph():
    g = RosGraph({"diagnostics.period_s": 0.2})
    yield g
    assert g.close() == 0


def memory(graph) -> dict:
    """The node's memory_* values from a status published after now."""
    graph.con.diagnostics.clear()
    d = graph.diagnostics_where(lambda d: "memory_heap_in_use_mib" in d)
    assert d is not None, "no status with memory_heap_in_use_mib"
    return {k: float(v) for k, v in d.items() if k.startswith("memory_")}


def test_the_reader_payloads_live_as_long_as_their_samples(graph):
    d = graph.diagnostics_where(lambda d: "dds_reader_memory" in d)
    assert d["dds_reader_memory"] == "dynamic: a payload lives as long as its sample", d


def test_floods_in_a_row_leave_no_memory_behind(graph):
    after = []
    for n in range(FLOODS):
        r = run_flood(graph, str(default_rig_path()), publishers=3, seconds=6.0, valid_sets=2)
        assert r.ok, (n, r, graph.node.output()[-3000:])
        assert r.flood_sets > 300, r  # a flood it was
        after.append(memory(graph))
    grown = after[-1]["memory_heap_in_use_mib"] - after[0]["memory_heap_in_use_mib"]
    print("after each flood:", after)
    renewed = graph.diagnostics_where(lambda d: "input_readers_renewed" in d)
    assert int(renewed["input_readers_renewed"]) >= 12, renewed  # the producers left every tensor topic
    assert grown < HEAP_GROWTH_MIB, after
    for m in after:  # under the ceiling the node states from its parameters (node/memory.py)
        assert m["memory_rss_mib"] <= m["memory_ceiling_mib"] + m["memory_heap_free_mib"], m


def test_200_mb_tensors_never_stop_valid_sets_and_none_stays_once_their_writer_left(graph):
    """Reassembled by Fast DDS (by default no fixed-size pool refuses them before), refused by the
    middleware (over the type's bound) and the node, valid sets published throughout. A sample
    whose reassembly did not finish is kept by its reader after its writer has gone (1 of 3 here
    in 4 of 5 runs on a 2-core machine before the readers were renewed): the node renews the
    reader once the writer has left (node/reader_renewal.py), and that memory comes back."""
    from bevpool_msgs.msg import CameraTensor

    from bevpool_ros.ros.qos import make_qos

    pub = graph.pub.create_publisher(CameraTensor, "cameras/CAM_BACK/feat", make_qos("best_effort", 1))
    assert graph.spin_until(lambda: pub.get_subscription_count() > 0, 20)
    for i in range(3):
        assert graph.publish_and_wait(i) is not None
    pid = graph.node.proc.pid
    baseline = resident_mib(pid)
    before = graph.diagnostics_where(lambda d: "input_readers_renewed" in d)
    in_use = memory(graph)["memory_heap_in_use_mib"]
    raw = camera_tensor_cdr(graph.next_stamp(), "x", "feat", "HWC", (200 * MiB,), 1, bytes(200 * MiB))
    peak = PeakRss(pid)
    try:
        for i in range(6):
            pub.publish(raw)
            assert graph.publish_and_wait(10 + i) is not None, graph.node.output()[-3000:]
        graph.pub.destroy_publisher(pub)
        renewed = graph.diagnostics_where(
            lambda d: int(d.get("input_readers_renewed", 0)) > int(before["input_readers_renewed"]), 30)
        assert renewed is not None, graph.node.output()[-3000:]
        for i in range(3):  # the stream's new reader delivers: no set lost, no twin counted
            assert graph.publish_and_wait(20 + i) is not None
        graph.spin_until(lambda: False, 4.0)  # the old reader retires (reader_renewal.RETIRE_AFTER_S)
        left = memory(graph)
        after = graph.diagnostics_where(lambda d: "input_readers_renewed" in d)
    finally:
        top = peak.stop()
    print(f"RSS {baseline:.0f} -> peak {top:.0f} -> {left['memory_rss_mib']:.0f} MiB; "
          f"heap in use {in_use:.0f} -> {left['memory_heap_in_use_mib']:.0f} MiB")
    assert left["memory_heap_in_use_mib"] - in_use < 32, left   # none of the six held
    assert left["memory_rss_mib"] - baseline < 200 + 48, (baseline, left)
    for key in ("sync_duplicate", "sync_out_of_order"):
        assert int(after.get(key, 0)) == int(before.get(key, 0)), (key, before, after)


def test_the_ceiling_worked_out_once_grows_with_the_writers_as_the_formula_does():
    """node/memory.py: the status adds per_writer_bytes for each further writer, as memory_ceiling
    counts one sample being reassembled per writer; the docs' worked example for nuScenes."""
    from bevpool_ros.node.memory import memory_ceiling, memory_status, per_writer_bytes
    from bevpool_ros.params.table import PARAMS
    from bevpool_ros.rig_yaml import load_rig

    rig, cfg = load_rig(str(default_rig_path())), {p.name: p.default for p in PARAMS}
    once = (memory_ceiling(rig, cfg), per_writer_bytes(rig))
    for writers in (1, 4):
        assert memory_status(*once, writers, 0)["memory_ceiling_mib"] == \
            round(memory_ceiling(rig, cfg, writers).total / 2**20, 1)
    assert memory_status(*once, 1, 0)["memory_ceiling_mib"] == 44.7  # docs/ros_interface.md, "Memory"
    assert memory_status(*once, 4, 0)["memory_ceiling_mib"] == 51.6
    assert memory_status(*once, 1, None) == {}
