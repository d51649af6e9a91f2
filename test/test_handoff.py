"""The GPU hand-off's host-side parts, no GPU needed: ring order, the seqlock control block shared
with another process through SCM_RIGHTS, the refusal message, the DLPack export, the message,
and the node refusing the hand-off where it cannot work (cpu backend) while BevFeature flows."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from bevpool_ros.device.dlpack import KDL_CPU, to_capsule
from bevpool_ros.handoff import ControlBlock, RingCursor, RingError, SharedControlBlock, slot_of, unsupported_reason
from bevpool_ros.handoff.fdpass import FdServer, fetch
from bevpool_ros.handoff.vmm import REQUIRED_ATTRIBUTES

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ring_cursor_cycles_slots_with_increasing_sequences():
    cursor = RingCursor(3)
    got = [cursor.next() for _ in range(7)]
    assert got == [(0, 1), (1, 2), (2, 3), (0, 4), (1, 5), (2, 6), (0, 7)]
    assert all(slot_of(seq, 3) == slot for slot, seq in got)
    with pytest.raises(ValueError, match="at least 2"):
        RingCursor(1)


def test_control_block_detects_a_slot_claimed_by_a_later_grid():
    buf = bytearray(ControlBlock.nbytes(4))
    block = ControlBlock.initialise(buf, ring_id=77, ring_size=4)
    assert block.ring_id == 77 and block.ring_size == 4 and block.published == 0
    assert not block.holds(0, 1)            # nothing written yet
    block.claim(0, 1)
    block.publish(1)
    assert block.holds(0, 1) and block.published == 1
    block.claim(0, 5)                       # the producer came round the ring: grid 1 is gone
    assert not block.holds(0, 1) and block.holds(0, 5)
    assert not block.holds(4, 5) and not block.holds(-1, 5)  # slots outside the ring never match


def test_control_block_refuses_foreign_or_short_memory():
    with pytest.raises(RingError, match="not a bevpool"):
        ControlBlock(bytearray(64), writable=False)
    buf = bytearray(ControlBlock.nbytes(4))
    ControlBlock.initialise(buf, ring_id=1, ring_size=4)
    with pytest.raises(RingError, match="too small"):
        ControlBlock(buf[:ControlBlock.nbytes(3)], writable=False)


CONSUMER = textwrap.dedent("""
    import json, mmap, os, sys
    from bevpool_ros.handoff.fdpass import fetch
    from bevpool_ros.handoff.ring import SharedControlBlock
    desc, fds = fetch(sys.argv[1])
    ctl = SharedControlBlock.attach(fds[0])
    extra = mmap.mmap(fds[1], 0, mmap.MAP_SHARED, mmap.PROT_READ)
    try:
        ctl.block.slots[0] = 99
        writable = True
    except ValueError:
        writable = False
    print(json.dumps({"desc": desc, "holds_0_1": ctl.block.holds(0, 1), "holds_1_2": ctl.block.holds(1, 2),
                      "ring_id": ctl.block.ring_id, "extra": extra[:5].decode(), "writable": writable}))
""")


def test_descriptors_reach_another_process_and_it_sees_the_producers_claims():
    ctl = SharedControlBlock.create(ring_id=1234, ring_size=3)
    extra = os.memfd_create("payload")
    os.write(extra, b"hello")
    server = FdServer(lambda: ({"ring_id": 1234, "note": "x"}, [ctl.fd, extra]), name="t")
    try:
        ctl.block.claim(0, 1)
        ctl.block.claim(1, 2)
        ctl.block.claim(1, 5)  # grid 2 overwritten by grid 5
        out = subprocess.run([sys.executable, "-c", CONSUMER, server.path], capture_output=True, text=True,
                             timeout=60, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
        assert out.returncode == 0, out.stderr
        import json
        got = json.loads(out.stdout)
        assert got == {"desc": {"ring_id": 1234, "note": "x"}, "holds_0_1": True, "holds_1_2": False,
                       "ring_id": 1234, "extra": "hello", "writable": False}
        assert oct(os.stat(os.path.dirname(server.path)).st_mode & 0o777) == "0o700"
    finally:
        server.close()
        ctl.close()
        os.close(extra)
    assert not os.path.exists(server.path)


def test_fetch_from_a_missing_producer_says_so(tmp_path):
    from bevpool_ros.handoff.fdpass import FdPassError

    with pytest.raises(FdPassError, match="cannot reach"):
        fetch(str(tmp_path / "nobody.sock"), timeout=1.0)


def test_refusal_names_what_the_device_lacks():
    every = {name: 1 for name in REQUIRED_ATTRIBUTES}
    assert unsupported_reason(every) is None
    no_fd = dict(every, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED=0)
    why = unsupported_reason(no_fd, "Orin")
    assert "POSIX file-descriptor" in why and "Orin" in why and "BevFeature" in why
    assert "legacy CUDA IPC" in why
    why = unsupported_reason({}, "x")
    assert all(what in why for what in REQUIRED_ATTRIBUTES.values())


class _HostView:
    """Host memory through the same capsule code the device views use."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack_device__(self):
        return KDL_CPU, 0

    def __dlpack__(self, stream=None, **_):
        return to_capsule(self.arr.ctypes.data, self.arr.shape, self.arr.dtype, KDL_CPU, 0, owner=self)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_dlpack_export_is_zero_copy(dtype):
    base = np.arange(2 * 3 * 4 * 5, dtype=dtype).reshape(2, 3, 4, 5)
    view = np.from_dlpack(_HostView(base))
    assert view.shape == base.shape and view.dtype == base.dtype
    np.testing.assert_array_equal(view, base)
    base[1, 2, 3, 4] = -7  # same memory, not a copy
    assert view[1, 2, 3, 4] == -7


@pytest.mark.ros
def test_handoff_message_carries_ring_slot_and_geometry():
    from bevpool_msgs.msg import BevHandoff
    from rclpy.serialization import deserialize_message, serialize_message
    from std_msgs.msg import Header

    from bevpool_ros.handoff.message import handoff_msg
    from bevpool_ros.handoff.producer import Written
    from bevpool_ros.paths import config_dir
    from bevpool_ros.rig_yaml import load_rig

    class Ring:  # what handoff_msg reads from a HandoffRing
        socket_path, ring_id, ring_size, uuid = "/tmp/x/ring.sock", 2 ** 61 + 3, 4, bytes(range(16))

        class device:
            ordinal = 0

    rig = load_rig(str(config_dir() / "rigs" / "nuscenes_bevdet_r50.yaml"))
    shape = (*rig.grid_shape, rig.channels)
    header = Header(frame_id="base_link")
    m = handoff_msg(header, rig, Ring, Written(2, 7, bytes(range(64))), shape, np.float16, "cuda", "fp16")
    back = deserialize_message(serialize_message(m), BevHandoff)
    assert (back.slot, back.sequence, back.ring_size, back.ring_id) == (2, 7, 4, 2 ** 61 + 3)
    assert list(back.shape) == list(shape) and back.dtype == 8 and back.nbytes == int(np.prod(shape)) * 2
    assert bytes(back.event_handle) == bytes(range(64)) and bytes(back.device_uuid) == bytes(range(16))
    assert (back.width, back.height, back.layers, back.channels) == (shape[2], shape[1], shape[0], shape[3])
    assert back.origin.x == pytest.approx(rig.x.lower) and back.resolution_x == pytest.approx(rig.x.step)
    assert back.layout == "ZYXC" and back.socket_path == "/tmp/x/ring.sock" and back.backend == "cuda"


def test_the_node_builds_an_announcement_only_where_more_than_the_grid_changed(monkeypatch):
    """HandoffOutput.publish: per grid only stamp, slot, sequence and event change (patched into
    a template); the bytes sent and published read as a BevHandoff built afresh, and a new grid
    geometry, dtype, shape or frame builds the template again."""
    from dataclasses import replace

    from bevpool_msgs.msg import BevHandoff
    from rclpy.serialization import deserialize_message
    from std_msgs.msg import Header

    from bevpool_ros.handoff.message import handoff_msg
    from bevpool_ros.handoff.producer import Written
    from bevpool_ros.node import handoff_output
    from bevpool_ros.node.handoff_output import HandoffOutput
    from bevpool_ros.workloads import base_rig

    class Ring:
        socket_path, ring_id, ring_size, uuid = "/tmp/x/ring.sock", 2 ** 61 + 3, 4, bytes(range(16))
        event_handles = [bytes([k]) * 64 for k in range(4)]
        sent: list = []

        class device:
            ordinal = 0

        @classmethod
        def announce(cls, data):
            cls.sent.append(data)

    class Backend:
        name, precision = "cuda", "fp16"

    class Pub:
        published: list = []

        def publish(self, data):
            self.published.append(data)

    class Out:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, dtype

    built = []

    def counting_handoff_msg(*args):
        built.append(args[0].frame_id)
        return handoff_msg(*args)

    monkeypatch.setattr(handoff_output, "handoff_msg", counting_handoff_msg)
    out = object.__new__(HandoffOutput)  # the GPU ring is not needed to build its messages
    out.ring, out.backend, out.pub = Ring, Backend, Pub()
    out._announcements = handoff_output.TemplateWriter(BevHandoff)
    out._geometry = (None, None)
    rig = base_rig()
    wider = replace(rig, channels=rig.channels * 2)
    shape = (*rig.grid_shape, rig.channels)
    cases = [(rig, np.float16, shape, "base_link"), (rig, np.float16, shape, "base_link"),
             (rig, np.float32, shape, "base_link"), (wider, np.float32, shape, "base_link"),
             (wider, np.float32, shape, "base_link"), (wider, np.float32, shape, "ego"),
             (base_rig(), np.float16, shape, "base_link")]
    for seq, (r, dtype, sh, frame) in enumerate(cases, start=1):
        header = Header(frame_id=frame)
        header.stamp.sec, header.stamp.nanosec = seq, 1000 * seq
        written = Written((seq - 1) % 4, seq, Ring.event_handles[(seq - 1) % 4])
        out._written = (written, Out(sh, dtype))
        out.publish(header, r)
        assert Ring.sent[-1] is Pub.published[-1]  # one serialisation for both ways
        want = handoff_msg(header, r, Ring, written, sh, dtype, "cuda", "fp16")
        assert deserialize_message(Pub.published[-1], BevHandoff) == want, seq
    # built for cases 1, 3, 4 and 6; the last one's geometry, dtype and frame are case 1's
    assert len(built) == 4


@pytest.mark.ros
def test_node_refuses_the_handoff_on_the_cpu_backend_and_keeps_publishing():
    from ros_harness import RosGraph

    g = RosGraph({"backend": "cpu", "output.gpu_handoff": True, "diagnostics.period_s": 0.2})
    try:
        assert g.publish_and_wait(0) is not None, g.node.output()[-3000:]
        d = g.diagnostics_where(lambda d: d.get("gpu_handoff", "").startswith("refused"), timeout=30.0)
        assert d is not None, g.node.output()[-3000:]
        assert "keeps no grid on a GPU" in d["gpu_handoff"]
        assert g.spin_until(lambda: "output.gpu_handoff is off" in g.node.output(), 10.0), g.node.output()[-3000:]
    finally:
        assert g.close() == 0


def test_device_output_comes_from_the_backend_or_the_handoff_is_refused():
    from types import SimpleNamespace

    from bevpool_ros.backends.gpu.frame import DeviceOutput
    from bevpool_ros.handoff.vmm import HandoffUnsupported
    from bevpool_ros.node.handoff_output import device_output, grid_bytes

    own = DeviceOutput(1234, 2 * 3 * 4 * 5 * 2, np.dtype(np.float16), (2, 3, 4, 5), "stream", "device")
    assert device_output(SimpleNamespace(name="cuda", device_output=lambda: own)) is own
    assert grid_bytes(own) == 2 * 3 * 4 * 5 * 2
    with pytest.raises(HandoffUnsupported, match="keeps no grid on a GPU"):
        device_output(SimpleNamespace(name="cpu"))


@pytest.mark.parametrize("description, why", [
    ({"ring_id": 6, "sizes": [4096, 4096], "events": []}, "another ring"),
    ({"ring_id": 5, "sizes": [4096], "events": []}, "2 buffer descriptors and 1 sizes for a ring of 2"),
])
def test_a_reader_refuses_a_mismatched_ring_and_closes_every_descriptor(description, why):
    from bevpool_ros.handoff.reader import _MappedRing

    ctl = SharedControlBlock.create(ring_id=5, ring_size=2)
    fds = [os.dup(ctl.fd), os.memfd_create("a"), os.memfd_create("b")]
    try:
        with pytest.raises(RingError, match=why):
            _MappedRing(device=None, description=description, fds=fds)  # fails before any CUDA call
        for fd in fds:
            with pytest.raises(OSError):
                os.fstat(fd)
    finally:
        ctl.close()


def test_a_failing_ring_copy_never_breaks_the_frame_and_surfaces_at_publish():
    from types import SimpleNamespace

    from bevpool_ros.backends.gpu.frame import DeviceOutput
    from bevpool_ros.node.handoff_output import HandoffOutput

    class BrokenRing:
        def write(self, *a):
            raise RuntimeError("cuMemcpyDtoDAsync(hand-off) failed: CUDA_ERROR_INVALID_CONTEXT")

    h = HandoffOutput.__new__(HandoffOutput)  # no GPU here: only the hook/publish hand-over is under test
    h.ring, h.backend, h._written = BrokenRing(), SimpleNamespace(name="cuda", precision="fp16"), None
    h._on_frame(DeviceOutput(1, 8, np.dtype(np.float32), (2,), "s", "d"))  # inside pool: must not raise
    with pytest.raises(RuntimeError, match="INVALID_CONTEXT"):
        h.publish(header=None, rig=None)
    assert h._written is None


def test_the_ring_copy_is_the_backends_device_work():
    """HandoffOutput asks the backend for the grid's copy into the ring (GpuBackend.device_copy),
    never reaching into the backend's runtime itself."""
    from types import SimpleNamespace

    from bevpool_ros.backends.gpu.base import GpuBackend
    from bevpool_ros.backends.gpu.frame import DeviceOutput
    from bevpool_ros.node.handoff_output import HandoffOutput

    copies, writes = [], []

    class Ring:
        def write(self, ptr, nbytes, stream, copy):
            writes.append((ptr, nbytes, stream))
            copy(0xD000, ptr, nbytes, stream)
            return "written"

    backend = SimpleNamespace(name="cuda", precision="fp16", device_copy=lambda *a: copies.append(a))
    h = HandoffOutput.__new__(HandoffOutput)
    h.ring, h.backend, h._written = Ring(), backend, None
    out = DeviceOutput(0xA000, 8, np.dtype(np.float32), (2,), 0x77, "d")
    h._on_frame(out)
    assert h._written == ("written", out) and writes == [(0xA000, 8, 0x77)]
    assert copies == [(0xD000, 0xA000, 8, 0x77)]
    assert callable(GpuBackend.device_copy)
