"""A GPU shared with other processes' networks (docs/gpu_sharing.md): the node's per-set wait for
the GPU and the one line that names it, the frame's timing record, the priority of the streams, a
camera set's copies enqueued as one burst, and the benchmark's matrix table."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bevpool_ros.backends.gpu.frame import FrameTiming
from bevpool_ros.node.gpu_share import PERSIST_SETS, WAIT_FLOOR_MS, GpuShareWatch

ROOT = Path(__file__).resolve().parent.parent


def test_a_frame_switched_out_midway_still_counts_as_waiting():
    """Beside another process's kernels a frame's device time can hold the other's time slice (the
    copy engine and the SMs scheduled apart): the reference is the least recent device time."""
    lines = []
    watch = GpuShareWatch(lines.append)
    for _ in range(PERSIST_SETS):
        watch.add(FrameTiming(0.25, 0.17))  # the frame's own cost, uncontended
    for _ in range(PERSIST_SETS):
        watch.add(FrameTiming(6.5, 6.35))  # "device time" 6.35 ms: slices of the other context
    assert watch.reference_ms == pytest.approx(0.17)
    assert watch.values()["gpu_wait_p99_ms"] == pytest.approx(6.33)
    assert len(lines) == 1 and "GPU shared" in lines[0]


def test_a_persistent_wait_logs_one_line_and_its_end_one_more():
    lines = []
    watch = GpuShareWatch(lines.append, window=100)
    assert watch.values() == {}  # nothing timed on a device yet: no keys
    for _ in range(3 * PERSIST_SETS):
        watch.add(FrameTiming(0.2, 0.05))  # an idle GPU: wait 0.15 ms
    assert not lines and watch.values()["gpu_shared"] == "no"
    watch.add(FrameTiming(9.0, 0.05))  # one late set says nothing
    assert not lines
    for _ in range(PERSIST_SETS):
        watch.add(FrameTiming(6.0, 0.05))
    assert len(lines) == 1 and "GPU shared" in lines[0] and "MPS" in lines[0] and "BevPooler" in lines[0]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in lines[0]  # the share that keeps SMs free for the node
    values = watch.values()
    assert values["gpu_shared"] == "yes" and values["gpu_wait_p99_ms"] > WAIT_FLOOR_MS
    assert values["gpu_device_p50_ms"] == pytest.approx(0.05)
    for _ in range(2 * PERSIST_SETS):
        watch.add(FrameTiming(6.0, 0.05))
    assert len(lines) == 1  # said once while it lasts
    for _ in range(PERSIST_SETS):
        watch.add(FrameTiming(0.2, 0.05))
    assert len(lines) == 2 and "no longer shared" in lines[1]


def test_a_long_kernel_is_not_a_wait():
    """A rig whose own device time is long waits proportionally: no false alarm."""
    lines = []
    watch = GpuShareWatch(lines.append)
    for _ in range(2 * PERSIST_SETS):
        watch.add(FrameTiming(3.2, 2.0))
    assert not lines
    watch.add(None)  # the cpu backend: no timing, no change
    assert watch.values()["gpu_wait_p50_ms"] == pytest.approx(1.2)
    assert watch.values()["gpu_device_p50_ms"] == pytest.approx(2.0)


def test_streams_take_the_highest_priority_unless_told():
    from fake_cuda import fake_gpu

    from bevpool_ros.device import driver

    with fake_gpu() as fake:
        fake.log = []
        assert driver.stream_priority_value("normal") == 0
        assert driver.stream_priority_value("highest") == -5  # the fake device's greatest
        high, normal = driver.Stream(), driver.Stream("normal")
        assert (high.priority, normal.priority) == ("highest", "normal")
        created = [call for call in fake.log if call[0] == "cuStreamCreateWithPriority"]
        assert [c[2] for c in created] == [-5, 0]
    with pytest.raises(ValueError, match="highest"):
        driver.stream_priority_value("urgent")


def test_a_reconfigure_with_another_stream_priority_reaches_the_driver(monkeypatch):
    """gpu.stream_priority is a backend option, not a module global read once: the node's second
    configure with another value creates its backend on a stream of that priority (the module
    stays loaded once per device)."""
    from types import SimpleNamespace

    from fake_cuda import _Module, fake_gpu

    from bevpool_ros.device import driver, runtime
    from bevpool_ros.node import configure
    from bevpool_ros.params import table as P

    loads = []

    def loaded(ordinal):
        loads.append(ordinal)
        dev = SimpleNamespace(name="fake", arch="sm_90", l2_bytes=50 << 20, sm_count=132, integrated=False,
                              can_map_host=True, ordinal=ordinal, ctx=driver._default_ctx, dev=0,
                              make_current=lambda: None)
        return dev, _Module()

    cfg = {**P.defaults(), "backend": "cuda", "backend_fallback": False}
    logger = SimpleNamespace(warning=lambda text: None)
    with fake_gpu() as fake:
        monkeypatch.setattr(runtime, "_loaded", runtime.lru_cache(maxsize=None)(loaded))
        monkeypatch.setattr(runtime, "_runtime", runtime.lru_cache(maxsize=None)(runtime._runtime.__wrapped__))
        fake.log = []
        first, _ = configure.make_backend({**cfg, "gpu.stream_priority": "highest"}, logger)
        second, _ = configure.make_backend({**cfg, "gpu.stream_priority": "normal"}, logger)
        created = [call[2] for call in fake.log if call[0] == "cuStreamCreateWithPriority"]
    assert (first.rt.stream.priority, second.rt.stream.priority) == ("highest", "normal")
    assert created == [-5, 0] and loads == [0]


def test_the_pooler_checks_its_stream_priority():
    from bevpool_ros.inprocess import BevPooler
    from bevpool_ros.rig_yaml import load_rig

    with pytest.raises(ValueError, match="stream_priority"):
        BevPooler(load_rig(ROOT / "config" / "rigs" / "nuscenes_bevdet_r50.yaml"), backend="cpu",
                  stream_priority="urgent")


class RecordingRing:
    """A producer that records the order of its GPU work and of the announcements."""

    available = True

    def __init__(self, folder: str, events: list):
        from types import SimpleNamespace

        self.events = events
        self.ring = SimpleNamespace(server=SimpleNamespace(served=1), socket_path=os.path.join(folder, "r.sock"),
                                    native=None, announce=lambda data: events.append("announce"))
        self.sequence = 0

    def publish(self, tensor, stream=None, scale=1.0):
        from bevpool_ros.handoff.camera_producer import TensorHandoff
        from bevpool_ros.io.tensor_codec import DTYPE_CODES

        self.sequence += 1
        self.events.append("copy")
        return TensorHandoff(self.ring.socket_path, 1, 8, (self.sequence - 1) % 8, self.sequence, 0, tensor.nbytes,
                             DTYPE_CODES[tensor.dtype.name], tensor.shape, bytes(64), 0, bytes(16))

    def close(self):
        pass


@pytest.mark.ros
def test_a_camera_set_is_copied_in_one_burst_before_its_announcements(tmp_path):
    import rclpy
    from bevpool_msgs.msg import TensorHandoff
    from ros_harness import isolate_ros_env

    from bevpool_ros.handoff.camera_publisher import CameraHandoffPublisher

    isolate_ros_env()
    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node("handoff_burst_test", context=ctx)
    try:
        events = []
        cams = ["CAM_A", "CAM_B", "CAM_C"]
        got = []
        for cam in cams:
            for stream in ("depth", "feat"):
                node.create_subscription(TensorHandoff, f"cameras/{cam}/{stream}_handoff", got.append, 10)
        pub = CameraHandoffPublisher(node, cameras=cams, producer=RecordingRing(str(tmp_path), events), mode="on")
        tensors = [(cam, stream, np.full((2, 3, 4), n, np.float16), "DHW" if stream == "depth" else "HWC", 1.0)
                   for n, cam in enumerate(cams) for stream in ("depth", "feat")]
        ways = pub.publish_set(tensors, 1_500_000_000)
        assert ways == ["handoff"] * 6
        assert events == ["copy"] * 6 + ["announce"] * 6  # every copy enqueued before the first word
        with pytest.raises(KeyError, match="CAM_Z"):
            pub.publish_set([("CAM_Z", "depth", tensors[0][2], "DHW", 1.0)], 1)
        assert pub.publish("CAM_A", "depth", tensors[0][2], 2_000_000_000, layout="DHW") == "handoff"
        assert events[-2:] == ["copy", "announce"]
        pub.close()
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)


def test_the_matrix_table_quotes_medians_spread_and_targets(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_share_table

    def row(tr, load, mps, p50, p99, where="process", **extra):
        r = {"transport": tr, "gpu_load": load, "mps": mps, "gpu_load_in": where if load != "none" else "none",
             "e2e_p50_ms": p50, "e2e_p99_ms": p99, "received": 1000, "frames": 1000,
             "stage_p50_ms": 0.4, "stage_p99_ms": 0.6, "gpu_wait_p50_ms": 0.1, "gpu_wait_p99_ms": 0.2}
        r.update(extra)
        return r
    rows = [{"transport": "dds", "e2e_p99_ms": 99.0}]  # a row of another benchmark: left out
    rows += [row("handoff_both", "none", False, 1.0, p) for p in (1.7, 1.9, 1.8)]
    rows += [row("handoff_both", "gemm", False, 6.0, p) for p in (8.0, 3.5, 3.9)]
    rows += [row("handoff_both", "gemm", True, 1.2, p) for p in (2.0, 2.1, 2.6)]
    rows += [row("inprocess", "gemm", False, 0.03, 0.1, host_wait_p50_ms=2.0, host_wait_p99_ms=5.0)]
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    md = gpu_share_table.table(json.loads(path.read_text()))
    assert "| handoff_both | alone | 3 | 1.00 (1.00-1.00) | 1.80 (1.70-1.90) |" in md
    assert "| handoff_both | gemm load | 3 | 6.00 (6.00-6.00) | 3.90 (3.50-8.00) |" in md
    assert "p99 3.90 ms against <= 4: met" in md
    assert "gemm load, MPS: p99 1.17x its alone figure against <= 1.3x: met" in md
    assert "| inprocess | gemm load | 1 | 2.00 | 5.00 |" in md  # the host's figure, not the events'
    assert "99.0" not in md


@pytest.mark.gpu
def test_a_frame_reports_its_device_time_and_wait_on_an_idle_gpu():
    from bevpool_ros.backends import create_backend
    from bevpool_ros.rig_yaml import load_rig
    from bevpool_ros.scatter_map import build_scatter_map
    from bevpool_ros.synthetic import SyntheticScene

    try:
        backend = create_backend("cuda", "fp16", fallback=False)
    except Exception as e:
        pytest.skip(f"no cuda backend: {e}")
    rig = load_rig(ROOT / "config" / "rigs" / "nuscenes_bevdet_r50.yaml")
    backend.prepare(build_scatter_map(rig))
    depth, feat = SyntheticScene(rig).frame(0)
    assert backend.last_frame_timing is None
    walls = []
    for _ in range(20):
        t0 = time.perf_counter()
        backend.pool(depth.astype(np.float16), feat.astype(np.float16))
        walls.append((time.perf_counter() - t0) * 1e3)
        timing = backend.last_frame_timing
        assert timing is not None and timing.device_ms is not None
        assert 0.0 < timing.device_ms < timing.wall_ms <= walls[-1]
    assert timing.wall_ms - timing.device_ms < 2.0  # an idle GPU: launch and wake-up only
    backend.close()
