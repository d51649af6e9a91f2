"""The hand-off core itself (bevpool_ros/handoff/native), no GPU needed: how it is found, built and
refused (BEVPOOL_NATIVE, a missing or stale library, no compiler: one line saying why, the Python
path runs), and the producer ring's seqlock claims, the core against the Python twin on a real
shared control block another process maps read-only."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from contextlib import contextmanager

import pytest

from bevpool_ros.handoff.native import build, core

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lib_or_skip():
    if core.library() is None:
        pytest.skip(f"the hand-off core is not available here: {core.unavailable_reason()}")
    return core.library()


@pytest.mark.parametrize("value, mode", [("0", "off"), ("off", "off"), ("1", "on"), ("ON", "on"), ("", "auto"),
                                         ("auto", "auto")])
def test_the_variable_picks_the_implementation(monkeypatch, value, mode):
    monkeypatch.setenv(core.ENV, value)
    assert core.mode() == mode


def test_unset_uses_the_core_where_it_loads(monkeypatch):
    monkeypatch.delenv(core.ENV, raising=False)
    assert core.mode() == "auto" and core.use_native() is core.library()


def test_off_runs_python_and_an_explicit_argument_wins(monkeypatch):
    monkeypatch.setenv(core.ENV, "0")
    assert core.use_native() is None and core.use_native(False) is None
    if core.library() is not None:
        assert core.use_native(True) is core.library()


def test_a_missing_library_is_said_in_one_line_and_on_refuses(monkeypatch, tmp_path, caplog):
    for f in build.sources() + sorted(build.HERE.glob("*.h")):
        shutil.copy(f, tmp_path)
    lib, why = core.load(tmp_path)
    assert lib is None and "not built" in why and "python -m bevpool_ros.handoff.native.build" in why
    monkeypatch.setattr(core, "_state", {"lib": None, "why": why})
    monkeypatch.setenv(core.ENV, "on")
    with pytest.raises(core.NativeUnavailable, match="not built"):
        core.use_native()
    monkeypatch.setenv(core.ENV, "auto")
    with caplog.at_level(logging.WARNING, logger=core.__name__):
        assert core.use_native() is None and core.use_native() is None
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "\n" not in said[0] and "the Python path runs" in said[0], said


def test_a_library_built_from_other_sources_is_refused(tmp_path):
    try:
        build.compiler()
    except build.BuildError as e:
        pytest.skip(str(e))
    for f in build.sources() + sorted(build.HERE.glob("*.h")):
        shutil.copy(f, tmp_path)
    build.build(tmp_path, tmp_path)
    lib, why = core.load(tmp_path)
    assert lib is not None and why == ""
    with open(tmp_path / "error.cpp", "a") as f:
        f.write("// edited after the build\n")
    lib, why = core.load(tmp_path)
    assert lib is None and "built from other sources" in why


def test_without_a_compiler_the_build_says_so_in_one_line(tmp_path):
    env = dict(os.environ, CXX="/nonexistent/c++", PATH=os.path.dirname(sys.executable))
    proc = subprocess.run([sys.executable, "-m", "bevpool_ros.handoff.native.build", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, env=dict(env, PYTHONPATH=REPO))
    assert proc.returncode == 1 and not list(tmp_path.iterdir())
    assert proc.stderr.strip() == "the hand-off core was not built: no C++ compiler (c++, g++ or $CXX) on PATH"


def test_the_structs_are_laid_out_as_the_library_lays_them():
    lib = lib_or_skip()
    assert [lib.bp_sizeof(i) for i in range(6)] == [88, 56, 120, 80, 128, 48]
    assert lib.bp_abi_version() == core.ABI_VERSION and lib.bp_source_digest().decode() == build.digest()


READER = textwrap.dedent("""
    import os, sys
    from bevpool_ros.handoff.ring import SharedControlBlock
    block = SharedControlBlock.attach(os.open(sys.argv[1], os.O_RDONLY)).block
    print(" ".join(str(int(w)) for w in block.words), flush=True)
""")


def test_the_cores_claims_are_the_python_twins_seen_from_another_process(tmp_path):
    """The producer's seqlock: sequence s claims slot (s - 1) % ring_size in the control block
    before its copy; the core and the Python twin (RingCursor + ControlBlock.claim) leave the
    same words, which a consumer process maps read-only."""
    from bevpool_ros.handoff.native.ring import NativeRing
    from bevpool_ros.handoff.ring import RingCursor, SharedControlBlock

    lib = lib_or_skip()
    size = 3
    twin, native = SharedControlBlock.create(5, size), SharedControlBlock.create(5, size)
    ring = NativeRing(lib, native.block.words.ctypes.data, size, [0] * size, 1 << 20, [0] * size,
                      [bytes([i]) * 64 for i in range(size)])
    cursor = RingCursor(size)
    try:
        for _ in range(7):
            slot, seq = cursor.next()
            twin.block.claim(slot, seq)
            assert ring.claim() == (slot, seq)
            assert list(native.block.words) == list(twin.block.words)
            assert native.block.holds(slot, seq) and not native.block.holds(slot, seq - size)
        words = []
        for block in (twin, native):
            path = f"/proc/{os.getpid()}/fd/{block.fd}"
            out = subprocess.run([sys.executable, "-c", READER, path], capture_output=True, text=True, cwd=REPO,
                                 env=dict(os.environ, PYTHONPATH=REPO), timeout=60)
            assert out.returncode == 0, out.stderr
            words.append(out.stdout.split())
        assert words[0] == words[1] and words[1][4:] == ["7", "5", "6"]
    finally:
        ring.close()
        twin.close()
        native.close()


def test_without_a_driver_a_copy_is_refused_with_why():
    """No GPU here: the core loads (sockets, templates) and a device copy says what is missing."""
    from bevpool_ros.device.driver import CudaError
    from bevpool_ros.handoff.native.ring import NativeRing
    from bevpool_ros.handoff.ring import SharedControlBlock

    lib = lib_or_skip()
    if lib.bp_driver_available():
        pytest.skip("a CUDA driver is here: test_handoff_native_gpu.py copies for real")
    block = SharedControlBlock.create(5, 2)
    ring = NativeRing(lib, block.block.words.ctypes.data, 2, [0, 0], 64, [0, 0], [bytes(64)] * 2)
    try:
        with pytest.raises(ValueError, match="do not fit a 64-byte hand-off slot"):
            ring.write(0, 65, 0)
        with pytest.raises(CudaError, match="no CUDA driver"):
            ring.write(0, 64, 0)
        assert block.block.published == 0
    finally:
        ring.close()
        block.close()


@contextmanager
def driverless_launcher(lib):
    """A launcher (launcher.cpp) on a 2-slot output ring whose memory and events are made-up addresses:
    everything before its first driver call runs (no GPU here)."""
    from bevpool_ros.handoff.native.launcher import NativeLauncher
    from bevpool_ros.handoff.native.ring import NativeRing
    from bevpool_ros.handoff.ring import SharedControlBlock

    output = SharedControlBlock.create(5, 2)
    ring = NativeRing(lib, output.block.words.ctypes.data, 2, [0, 0], 64, [0, 0], [bytes([i]) * 64 for i in range(2)])
    launcher = NativeLauncher(lib, context=0, stream=0, flags_ptr=0, grid_ptr=0, grid_bytes=64, output=ring,
                              template_id=-1)
    try:
        yield launcher, output
    finally:
        launcher.close()
        ring.close()
        output.close()


def test_a_set_the_launcher_has_no_graph_or_ring_for_is_a_miss_with_nothing_enqueued():
    """The launcher (launcher.cpp) takes only a set whose producer rings it knows and whose slots the
    backend left a graph for; any other set is Python's, before a driver call (none here)."""
    from bevpool_ros.handoff.native.core import Member, Values
    from bevpool_ros.handoff.native.launcher import MISS
    from bevpool_ros.handoff.ring import SharedControlBlock

    lib = lib_or_skip()
    producer = SharedControlBlock.create(6, 4)
    members = [Member(camera=0, stream=k, ring_id=6, values=Values(slot=k, sequence=k + 1)) for k in range(2)]
    for k, m in enumerate(members):
        m.values.event_handle[:] = bytes([10 + k]) * 64
    try:
        with driverless_launcher(lib) as (launcher, output):
            assert launcher.launch(members, 1)[0].result == MISS  # a ring it does not know
            launcher.ring(6, producer.block.words.ctypes.data, 4,
                          {bytes([10 + k]) * 64: 0x1000 + k for k in range(4)})
            assert launcher.launch(members, 1)[0].result == MISS  # no graph for slots (6, 0), (6, 1)
            launcher.remember([(6, 0), (6, 1)], 0x2000)
            launcher.forget([(6, 0), (6, 1)])  # the backend destroyed it
            result, data = launcher.launch(members, 1)
            assert result.result == MISS and data == b"" and output.block.published == 0
    finally:
        producer.close()


def test_a_ring_unmapped_takes_its_graphs_from_the_launcher():
    """The backend keeps a graph by its binding's addresses; the launcher finds it by (ring id, slot).
    A producer's ring unmapped (and perhaps mapped again elsewhere) must leave the launcher no graph
    of its slots: SharedGraphs.forget_ring takes them back, the other rings' graphs stay."""
    from types import SimpleNamespace

    from bevpool_ros.device.driver import CudaError
    from bevpool_ros.handoff.native.core import Member, Values
    from bevpool_ros.handoff.native.launcher import MISS
    from bevpool_ros.handoff.ring import SharedControlBlock
    from bevpool_ros.node.handoff_launch import SharedGraphs

    lib = lib_or_skip()
    if lib.bp_driver_available():
        pytest.skip("a launch with a graph would hand made-up events to a real driver")
    rings = {rid: SharedControlBlock.create(rid, 4) for rid in (6, 7)}
    frame = SimpleNamespace(on_destroy=[], last_graph=None, last_key=None)
    try:
        with driverless_launcher(lib) as (launcher, _):
            shared = SharedGraphs(launcher, SimpleNamespace(device=frame))
            for rid, block in rings.items():
                launcher.ring(rid, block.block.words.ctypes.data, 4, {bytes([rid]) * 64: 0x1000 + rid})
                frame.last_graph, frame.last_key = SimpleNamespace(exec=0x2000 + rid), ("binding", rid)
                shared.after_set(((rid, 0), (rid, 1)))

            def launched(rid):
                members = [Member(camera=0, stream=k, ring_id=rid, values=Values(slot=k, sequence=k + 1))
                           for k in range(2)]
                for m in members:
                    m.values.event_handle[:] = bytes([rid]) * 64
                try:
                    return launcher.launch(members, 1)[0].result
                except CudaError:
                    return "driver"  # it had a graph: it went on to the driver (none here)

            assert launched(6) == launched(7) == "driver"
            shared.forget_ring(6)
            assert launched(6) == MISS and launched(7) == "driver"
            shared.close()
    finally:
        for block in rings.values():
            block.close()


def test_the_core_publishes_a_serialised_message_through_the_process_rcl():
    """The launcher's ROS copy (ros_copy.cpp): bytes published by the core on an rclpy publisher reach a
    real subscriber over DDS as the message they serialise."""
    import time

    from bevpool_msgs.msg import BevHandoff
    from rclpy.serialization import serialize_message
    from ros_harness import private_node

    from bevpool_ros.handoff.native.ros_copy import NativeRosCopy

    lib = lib_or_skip()
    with private_node("native_ros_copy") as (node, executor):
        got = []
        pub = node.create_publisher(BevHandoff, "ros_copy_test", 10)
        node.create_subscription(BevHandoff, "ros_copy_test", got.append, 10)
        copy = NativeRosCopy(lib, pub)
        try:
            msg = BevHandoff()
            msg.header.frame_id, msg.ring_id, msg.slot, msg.sequence = "ego", 77, 3, 9
            msg.event_handle = list(range(64))
            deadline = time.monotonic() + 10
            while not got and time.monotonic() < deadline:  # resent until matched (discovery)
                copy.publish(serialize_message(msg))
                executor.spin_once(timeout_sec=0.1)
            assert got and got[0] == msg
        finally:
            copy.close()
