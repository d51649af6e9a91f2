"""The GPU backends' shared core, on the CPU: staging into slots, host-memory selection, typed
choices, plan_for and the V3 operator, the cpu backend's output array, and the worker writing into the payload."""
from __future__ import annotations

import os
import time
from types import SimpleNamespace

import numpy as np
import pytest

from bevpool_ros.backends import CpuBackend, InputError, NonFiniteOutput
from bevpool_ros.backends.gpu.choices import ChoiceStore, PrecisionChoice, choice_key
from bevpool_ros.backends.gpu.frame import choose_host_memory, pow2_exponent
from bevpool_ros.backends.staging import CameraStaging, frame_dtype, split_cameras
from bevpool_ros.kernels.planning import LaunchChoice
from bevpool_ros.reference import pool_reference
from bevpool_ros.workloads import get_workload

N, D, H, W, C = 3, 4, 2, 5, 8


def staging(alloc_log=None):
    def alloc(n):
        a = np.full(n, 0xAB, np.uint8)
        if alloc_log is not None:
            alloc_log.append(a)
        return a

    return CameraStaging((N, D, H, W), (N, H, W, C), alloc)


def cams(rng, dtype=np.float32):
    return [(rng.random((D, H, W)).astype(dtype), rng.random((H, W, C)).astype(dtype)) for _ in range(N)]


# --- staging --------------------------------------------------------------------------------------
def test_each_payload_lands_in_its_slot_in_its_own_dtype():
    rng = np.random.default_rng(0)
    st = staging()
    for dtype in (np.float32, np.float16, np.uint8):
        c = [(rng.integers(0, 255, (D, H, W)).astype(dtype), rng.integers(0, 255, (H, W, C)).astype(dtype))
             for _ in range(N)]
        assert st.stage(c)[:2] == (np.dtype(dtype), np.dtype(dtype))
        for n in range(N):
            assert np.array_equal(st.slots("depth", dtype)[n], c[n][0])
            assert np.array_equal(st.slots("feat", dtype)[n], c[n][1])
        # the slots are views of the one region per stream: nothing stacked, nothing cast
        assert np.shares_memory(st.slots("depth", dtype), st.regions["depth"])


def test_no_allocation_per_frame():
    allocated = []
    st = staging(allocated)
    rng = np.random.default_rng(1)
    st.stage(cams(rng))
    views = st.slots("depth", np.float32), st.slots("feat", np.float32)
    for _ in range(3):
        st.stage(cams(rng))
    assert len(allocated) == 2  # one region per stream, at construction
    assert st.slots("depth", np.float32) is views[0] and st.slots("feat", np.float32) is views[1]


def test_missing_camera_slot_is_zeroed_and_chw_views_are_copied_once():
    rng = np.random.default_rng(2)
    st = staging()
    c = cams(rng)
    chw = np.ascontiguousarray(c[2][1].transpose(2, 0, 1))
    c[1] = (None, None)
    c[2] = (c[2][0], chw.transpose(1, 2, 0))  # a transposed view, as the node passes CHW
    st.stage(c)
    assert not st.slots("depth", np.float32)[1].any() and not st.slots("feat", np.float32)[1].any()
    assert np.array_equal(st.slots("feat", np.float32)[2], chw.transpose(1, 2, 0))


def test_mixed_float_dtypes_stage_as_float32_and_e4m3_mixed_is_refused():
    assert frame_dtype([np.zeros(2, np.float16), np.zeros(2, np.float32)]) == np.float32
    with pytest.raises(InputError, match="mixed"):
        frame_dtype([np.zeros(2, np.uint8), np.zeros(2, np.float16)])
    with pytest.raises(InputError, match="int32"):
        frame_dtype([np.zeros(2, np.int32)])


@pytest.mark.parametrize("bad", ["shape", "dtype", "type", "count"])
def test_bad_headers_are_refused_before_anything_is_copied(bad):
    rng = np.random.default_rng(3)
    st = staging()
    before = {k: v.copy() for k, v in st.regions.items()}
    c = cams(rng)
    if bad == "shape":
        c[2] = (c[2][0][:, :, :-1], c[2][1])
    elif bad == "dtype":
        c[2] = (c[2][0].astype(np.int16), c[2][1])
    elif bad == "type":
        c[2] = (c[2][0].tolist(), c[2][1])
    else:
        c = c[:-1]
    with pytest.raises(InputError):
        st.stage(c)
    for k, v in st.regions.items():  # the first cameras were not copied either
        assert np.array_equal(v, before[k])


def test_split_cameras_are_views():
    d, f = np.zeros((N, D, H, W), np.float32), np.zeros((N, H, W, C), np.float32)
    parts = split_cameras(d, f)
    assert len(parts) == N and all(np.shares_memory(p[0], d) for p in parts)
    with pytest.raises(InputError):
        split_cameras(d, f[:-1])


# --- host memory: integrated GPUs use mapped memory ------------------------------------------------
@pytest.mark.parametrize("integrated,can_map,requested,expected", [
    (True, True, "auto", "mapped"),      # DRIVE Thor, Jetson
    (False, True, "auto", "copy"),       # discrete: PCIe copies beat kernels reading host memory
    (True, False, "auto", "copy"),
    (False, True, "mapped", "mapped"),
    (True, True, "copy", "copy"),
])
def test_host_memory_choice_from_device_attributes(integrated, can_map, requested, expected):
    dev = SimpleNamespace(integrated=integrated, can_map_host=can_map)  # as driver.Device reports them
    assert choose_host_memory(dev.integrated, dev.can_map_host, requested) == expected


def test_host_memory_refusals():
    with pytest.raises(ValueError, match="cannot map"):
        choose_host_memory(True, False, "mapped")
    with pytest.raises(ValueError, match="host_memory"):
        choose_host_memory(True, True, "zero-copy")


def test_fp8_scales_must_be_powers_of_two():
    assert pow2_exponent(64.0) == 6 and pow2_exponent(0.25) == -2 and pow2_exponent(1.0) == 0
    with pytest.raises(ValueError):
        pow2_exponent(3.0)


# --- typed choices ---------------------------------------------------------------------------------
def test_choice_store_round_trips_typed_records(tmp_path):
    smap = get_workload("small")
    store = ChoiceStore(tmp_path / "choices")
    key = choice_key(LaunchChoice, backend="cuda", device="GPU X", smap=smap, precision="fp16")
    rec = LaunchChoice("bevpool_v3_fp16_l2", 16, 256, 7.5)
    assert store.load(key, LaunchChoice) is None
    assert store.store(key, rec)
    assert store.load(key, LaunchChoice) == rec
    assert store.load(key, PrecisionChoice) is None  # another record type under that key: a miss
    (path,) = (tmp_path / "choices").iterdir()
    assert os.stat(path).st_mode & 0o777 == 0o600
    path.write_bytes(path.read_bytes()[:-3])  # truncated: a miss, and the file is gone
    assert store.load(key, LaunchChoice) is None and not path.exists()


def test_choice_key_names_every_input():
    a, b = get_workload("small"), get_workload("canonical")
    k = dict(backend="cuda", device="GPU X", precision="fp8")
    keys = {choice_key(LaunchChoice, smap=a, **k), choice_key(LaunchChoice, smap=b, **k),
            choice_key(PrecisionChoice, smap=a, **k), choice_key(LaunchChoice, smap=a, **{**k, "backend": "tensorrt"}),
            choice_key(LaunchChoice, smap=a, **{**k, "device": "GPU Y"}),
            choice_key(LaunchChoice, smap=a, **{**k, "precision": "fp16"})}
    assert len(keys) == 6


def test_plan_for_is_what_the_tensorrt_config_uses():
    from bevpool_ros.backends.tensorrt.plugin_config import bind_plan, config_for_v3, map_inputs
    from bevpool_ros.kernels.planning import plan_for

    smap = get_workload("small")
    for precision in ("fp16", "fp8"):
        s1, p1 = plan_for(smap, precision, "L2-resident", k_min=8, threads=128)
        cfg, s2 = config_for_v3(smap, precision, "L2-resident", k_min=8, threads=128)
        shapes = [cfg.depth_shape, cfg.feat_shape, *(a.shape for a in map_inputs(cfg, smap, s2).values())]
        assert bind_plan(cfg, shapes) == p1 and s1.digest() == s2.digest()
    choice = LaunchChoice("bevpool_v3_fp16_l2", 32, 128)
    _, p = plan_for(smap, "fp16", "DRAM-bound", choice=choice, kernel="bevpool_v3_fp16_dram", threads=512)
    assert p.kernel == choice.kernel and p.block[0] == 128  # a measured choice wins over overrides


def test_v3_operator_owns_its_schedule_plan_and_arrays():
    """One object per map and precision: plan_for's plan over the schedule it built, the three
    schedule arrays uploaded by it and freed by it (the driver faked: no GPU)."""
    from fake_cuda import _Module, fake_gpu

    from bevpool_ros.device import driver
    from bevpool_ros.device.operator import V3Operator
    from bevpool_ros.kernels.planning import plan_for

    smap = get_workload("small")
    with fake_gpu() as fake:
        rt = SimpleNamespace(device=SimpleNamespace(l2_bytes=50 << 20), stream=driver.Stream(), module=_Module())
        op = V3Operator.build(rt, smap, "fp8", k_min=8, threads=128, out_scale=0.25)
        sched, plan = plan_for(smap, "fp8", op.regime, k_min=8, threads=128, out_scale=0.25)
        assert op.plan == plan and op.schedule.digest() == sched.digest()
        assert sorted(op.buffers) == ["empty_cells", "pidx", "slots"]
        op.free()
        assert fake.calls["cuMemFree"] == fake.calls["cuMemAlloc"] == 3 and not op.buffers


@pytest.mark.parametrize("precision", ["fp16", "fp8", "auto"])
def test_cuda_backend_holds_one_operator_per_prepared_precision(precision, monkeypatch, tmp_path):
    """On a fake driver: prepare builds the operator the frame pools with (auto measures both
    precisions, keeps one), a device frame comes from the backend, and a recalibration and close
    give every device allocation back."""
    from fake_cuda import _Module, fake_gpu

    from bevpool_ros.backends.cuda import CudaBackend
    from bevpool_ros.backends.gpu import base as gpu_base
    from bevpool_ros.device import driver

    smap = get_workload("small")
    with fake_gpu() as fake:
        dev = SimpleNamespace(name="fake", arch="sm_90", l2_bytes=50 << 20, sm_count=132, integrated=False,
                              can_map_host=True, ordinal=0, ctx=driver._default_ctx, dev=0, make_current=lambda: None)
        rt = SimpleNamespace(device=dev, stream=driver.Stream(), module=_Module())
        monkeypatch.setattr(gpu_base, "get_runtime", lambda ordinal, stream_priority="highest": rt)
        be = CudaBackend(precision, autotune=False, choice_store=ChoiceStore(tmp_path))
        be.prepare(smap)
        assert list(be.ops) == [be.precision] and be.plan is be.op.plan
        out = be.pool(np.ones(smap.depth_shape, np.float32), np.ones(smap.feat_shape, np.float32))
        assert out.shape == smap.bev_shape and be.describe()["kernel"] == be.op.plan.kernel
        be.device_frame().close()
        be.prepare(smap)
        be.close()
        assert be.ops == {} and fake.calls["cuMemAlloc"] == fake.calls["cuMemFree"]


# --- the cpu backend writes where it is told ---------------------------------------------------------
@pytest.mark.parametrize("out_dtype", [np.float32, np.float16])
def test_cpu_pool_cameras_writes_into_out(out_dtype):
    smap = get_workload("small")
    be = CpuBackend()
    be.prepare(smap)
    rng = np.random.default_rng(4)
    d = rng.random(smap.depth_shape, dtype=np.float32)
    f = rng.uniform(-1, 1, smap.feat_shape).astype(np.float32)
    out = np.full(smap.bev_shape, np.nan, out_dtype)  # poisoned: every cell must be written
    got = be.pool_cameras(split_cameras(d, f), out=out)
    assert got is out
    ref = pool_reference(d, f, smap)
    assert np.abs(out.astype(np.float64) - ref).max() <= (1e-4 if out_dtype == np.float32 else 2e-2)


def test_cpu_non_finite_is_refused_with_check_and_caught_without():
    smap = get_workload("small")
    d = np.ones(smap.depth_shape, np.float32)
    f = np.ones(smap.feat_shape, np.float32)
    f.reshape(-1, smap.channels)[smap.ranks_feat[0]] = np.inf
    checked, unchecked = CpuBackend(), CpuBackend(check_finite=False)
    for be in (checked, unchecked):
        be.prepare(smap)
    with pytest.raises(InputError):
        checked.pool(d, f)
    with pytest.raises(NonFiniteOutput):
        unchecked.pool(d, f)
    big = np.full(smap.feat_shape, 6e4, np.float32)  # finite float32, beyond float16 once summed
    with pytest.raises(NonFiniteOutput):
        checked.pool(d, big, out=np.empty(smap.bev_shape, np.float16))
    huge = np.full(smap.feat_shape, 3e38, np.float32)  # finite, but the sums overflow float32
    with pytest.raises(NonFiniteOutput):
        checked.pool(d, huge)


# --- the worker: the grid lands in the message payload ------------------------------------------------
def test_worker_pools_into_the_message_payload_memory():
    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.cameras.sync import CameraSet
    from bevpool_ros.io.tensor_codec import ReusableBuffer, fill_msg
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    Tensor = pytest.importorskip("bevpool_msgs.msg").Tensor

    rig = base_rig()
    payload = ReusableBuffer()
    results, drops = [], []
    be = CpuBackend()
    worker = PoolingWorker(be, LiveCalibration(rig), results.append, lambda r, d: drops.append(r),
                           out_dtype="float16", out_buffer=payload)
    worker.prepare()
    rng = np.random.default_rng(5)
    N_, D_, H_, W_ = rig.depth_shape
    frames = {cam.name: {"depth": (1, rng.random((D_, H_, W_), dtype=np.float32)),
                         "feat": (1, rng.random((H_, W_, rig.channels), dtype=np.float32))}
              for cam in rig.cameras[1:]}  # the first camera is missing: zero-filled
    r = worker.process(CameraSet(frames, tuple(frames), (rig.cameras[0].name,), 0.0, 0.0, False))
    assert not drops and r is results[0]
    assert r.bev.dtype == np.float16 and payload.holds(r.bev)
    msg = fill_msg(Tensor(), r.bev, name="bev", layout="ZYXC", dtype="float16", reuse=payload)
    addr, _ = msg.data.buffer_info()
    assert addr == r.bev.ctypes.data  # the message's data is the very memory the backend wrote
    depth = np.zeros(rig.depth_shape, np.float32)
    feat = np.zeros((N_, H_, W_, rig.channels), np.float32)
    for n, cam in enumerate(rig.cameras[1:], start=1):
        depth[n], feat[n] = frames[cam.name]["depth"][1], frames[cam.name]["feat"][1]
    ref = pool_reference(depth, feat, be.smap)
    assert np.abs(r.bev.astype(np.float64) - ref).max() <= 2e-2 * max(1.0, np.abs(ref).max() / 64)


def test_worker_asks_per_set_whether_the_grid_must_reach_the_host():
    """``host_grid()`` False (hand-off consumers only): the backend is told ``host_copy=False``
    and may leave the grid on its device (PoolResult.bev None); the cpu backend returns it
    anyway. True again on the next set: the grid comes back."""
    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.cameras.sync import CameraSet
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    asked, wanted = [], [False]

    class DeviceKeeping(CpuBackend):  # what a GPU backend does with host_copy=False
        def pool_cameras(self, cameras, out=None, host_copy=True):
            asked.append(host_copy)
            bev = super().pool_cameras(cameras, out=out)
            return bev if host_copy else None

    results = []
    worker = PoolingWorker(DeviceKeeping(), LiveCalibration(rig), results.append, lambda r, d: None,
                           host_grid=lambda: wanted[0])
    worker.prepare()
    _, D_, H_, W_ = rig.depth_shape
    frames = {cam.name: {"depth": (1, np.ones((D_, H_, W_), np.float32)),
                         "feat": (1, np.ones((H_, W_, rig.channels), np.float32))} for cam in rig.cameras}
    r = worker.process(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True))
    assert asked == [False] and r is results[0] and r.bev is None
    wanted[0] = True
    r = worker.process(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True))
    assert asked == [False, True] and r.bev is not None and r.bev.shape[-1] == rig.channels
    cpu = CpuBackend()
    cpu.prepare(worker.backend.smap)
    cams = [(frames[c.name]["depth"][1], frames[c.name]["feat"][1]) for c in rig.cameras]
    assert cpu.pool_cameras(cams, host_copy=False) is not None  # a host backend returns it anyway


def test_worker_warms_the_device_input_path_after_each_prepare():
    """warm_device_inputs: after the first prepare and after a calibration change the backend's
    device-input path runs once, on the array the sets will fill (its dtype and grid shape); a
    warm-up that fails is a warning, never a failed prepare; off, or a backend without that path
    (the cpu backend): nothing is asked."""
    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    warmed, warnings, fail = [], [], [False]

    class Warmable(CpuBackend):
        def warm_device_inputs(self, out=None):
            warmed.append((out.shape, out.dtype, self.smap))
            if fail[0]:
                raise RuntimeError("no device")

    cal = LiveCalibration(rig)
    worker = PoolingWorker(Warmable(), cal, lambda r: None, lambda r, d: None, out_dtype="float16",
                           warm_device_inputs=True, on_warning=lambda k, t: warnings.append((k, t)))
    assert worker.prepare() and len(warmed) == 1
    shape, dtype, smap = warmed[0]
    assert shape == (*rig.grid_shape, rig.channels) and dtype == np.float16 and smap is worker.backend.smap
    assert not worker.prepare() and len(warmed) == 1  # nothing changed: no new map, no warm-up
    cam = rig.cameras[0]
    k = np.array(cam.K, dtype=float).reshape(-1)
    k[0] *= 1.05
    assert cal.update_intrinsics(cam.name, list(k), cam.width, cam.height)
    fail[0] = True
    assert worker.prepare() and len(warmed) == 2 and warmed[1][2] is worker.backend.smap
    assert [k for k, _ in warnings] == ["warm_up_failed"] and "no device" in warnings[0][1]
    off = PoolingWorker(Warmable(), LiveCalibration(rig), lambda r: None, lambda r, d: None)
    assert off.prepare() and len(warmed) == 2
    cpu = PoolingWorker(CpuBackend(), LiveCalibration(rig), lambda r: None, lambda r, d: None,
                        warm_device_inputs=True)
    assert cpu.prepare()


def test_after_set_jobs_run_in_the_pooling_thread_one_per_set_in_order():
    """PoolingWorker.after_set (announcement templates learnt where they delay no set): nothing
    runs before a set; then one job after each set, in the order given, in the thread that pooled."""
    import threading
    import time

    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.cameras.sync import CameraSet
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    ran, results = [], []
    worker = PoolingWorker(CpuBackend(), LiveCalibration(rig), results.append, lambda r, d: None)
    worker.start()
    try:
        for name in ("a", "b", "c"):
            worker.after_set(lambda n=name: ran.append((n, threading.current_thread().name, len(results))))
        assert not ran
        _, D_, H_, W_ = rig.depth_shape
        frames = {cam.name: {"depth": (1, np.ones((D_, H_, W_), np.float32)),
                             "feat": (1, np.ones((H_, W_, rig.channels), np.float32))} for cam in rig.cameras}
        for i in range(2):
            worker.submit(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True))
            deadline = time.monotonic() + 60
            while len(ran) < i + 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert worker.wait_until_idle(60.0) and len(ran) == i + 1, ran
    finally:
        worker.stop()
    assert ran == [("a", "bevpool-pooling", 1), ("b", "bevpool-pooling", 2)]


def test_worker_counts_a_backend_found_nan_as_non_finite():
    """A GPU backend checks values on the device (the node then skips its host scan): its finding
    must land in the same ``non_finite`` counter; the cpu backend's own check stands in here."""
    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.cameras.sync import CameraSet
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    drops = []
    worker = PoolingWorker(CpuBackend(), LiveCalibration(rig), lambda r: None, lambda r, d: drops.append(r))
    worker.prepare()
    _, D_, H_, W_ = rig.depth_shape
    frames = {cam.name: {"depth": (1, np.ones((D_, H_, W_), np.float32)),
                         "feat": (1, np.ones((H_, W_, rig.channels), np.float32))} for cam in rig.cameras}
    frames[rig.cameras[3].name]["feat"][1][0, 0, 0] = np.nan
    assert worker.process(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True)) is None
    assert drops == ["non_finite"]


def test_an_idle_worker_pools_inline_a_busy_one_queues_and_never_two_at_once():
    """``reserve_or_submit`` (the hand-off signal thread): pooled in the calling thread when the
    pooling thread is idle; queued while a set is pooled (inline or not), and the pooling thread
    takes it only once that set is done: the backend never runs two sets at once."""
    import threading

    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.cameras.sync import CameraSet
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    threads, running, overlap = [], [0], []
    gate = threading.Event()
    gate.set()

    class Recording(CpuBackend):
        def pool_cameras(self, cameras, out=None, host_copy=True):
            running[0] += 1
            overlap.append(running[0])
            threads.append(threading.current_thread().name)
            gate.wait(30)
            try:
                return super().pool_cameras(cameras, out=out)
            finally:
                running[0] -= 1

    worker = PoolingWorker(Recording(), LiveCalibration(rig), lambda r: None, lambda r, d: None)
    worker.start()
    _, D_, H_, W_ = rig.depth_shape

    def camera_set():
        frames = {cam.name: {"depth": (1, np.zeros((D_, H_, W_), np.float32)),
                             "feat": (1, np.zeros((H_, W_, rig.channels), np.float32))} for cam in rig.cameras}
        return CameraSet(frames, tuple(frames), (), 0.0, 0.0, True)

    def pool_inline_or_queue(s):
        job = worker.reserve_or_submit(s)
        if job is not None:
            job()
    try:
        pool_inline_or_queue(camera_set())
        assert threads == [threading.current_thread().name]  # idle: pooled right here
        gate.clear()
        caller = threading.Thread(target=lambda: pool_inline_or_queue(camera_set()), name="signal")
        caller.start()
        deadline = time.monotonic() + 30
        while len(threads) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert threads[-1] == "signal" and worker.busy
        assert worker.reserve_or_submit(camera_set()) is None  # busy: queued for the pooling thread
        assert worker.queued == 1 and len(threads) == 2
        time.sleep(0.2)
        assert len(threads) == 2  # the pooling thread waits for the inline set
        gate.set()
        caller.join(30)
        while len(threads) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert threads[-1] == "bevpool-pooling" and max(overlap) == 1
        assert worker.wait_until_idle(30) and worker.queued == 0
    finally:
        gate.set()
        worker.stop()


def pool_and_wait(worker, results: list, rig) -> None:
    """Submit one all-zero set of ``rig`` to a started worker; return once it is pooled and the
    worker is idle again (what it runs between sets included)."""
    from bevpool_ros.cameras.sync import CameraSet

    _, D_, H_, W_ = rig.depth_shape
    frames = {cam.name: {"depth": (1, np.zeros((D_, H_, W_), np.float32)),
                         "feat": (1, np.zeros((H_, W_, rig.channels), np.float32))} for cam in rig.cameras}
    n = len(results)
    worker.submit(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True))
    deadline = time.monotonic() + 30
    while len(results) == n and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(results) == n + 1 and worker.wait_until_idle(30)


class StubTimer:
    """What ``between_sets`` uses of an rclpy timer: its period, cancel and reset (recorded)."""

    def __init__(self, period_s):
        self.timer_period_ns, self.calls = int(period_s * 1e9), []

    def cancel(self):
        self.calls.append("cancel")

    def reset(self):
        self.calls.append("reset")


def test_housekeeping_runs_between_sets_while_they_flow_and_at_once_otherwise():
    """``between_sets`` (the /diagnostics and graph-check timers): with no set pooled lately the
    job runs in the caller's thread; while sets flow it waits for the end of the next set and runs
    in the thread that pooled it, before the worker is idle again, never during a set; a job
    handed over twice is one job; one that raises leaves the worker working."""
    import threading

    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    log, pooling = [], [False]

    class Recording(CpuBackend):
        def pool_cameras(self, cameras, out=None, host_copy=True):
            pooling[0] = True
            try:
                return super().pool_cameras(cameras, out=out)
            finally:
                pooling[0] = False

    def job():
        log.append((threading.current_thread().name, pooling[0]))

    def broken():
        raise RuntimeError("diagnostics publisher gone")

    results = []
    timer = StubTimer(60.0)  # due at the first set after it is adopted, then not for a minute
    worker = PoolingWorker(Recording(), LiveCalibration(rig), results.append, lambda r, d: None)
    worker.start()
    try:
        worker.between_sets(job, timer)  # nothing pooled yet: right here
        assert log == [(threading.current_thread().name, False)] and timer.calls == []
        pool_and_wait(worker, results, rig)
        worker.between_sets(job, timer)  # sets flow: deferred to the end of the next one
        worker.between_sets(job, timer)
        worker.between_sets(broken, StubTimer(60.0))
        assert len(log) == 1
        pool_and_wait(worker, results, rig)
        assert log[1:] == [("bevpool-pooling", False)]  # once, after the set, in its thread
        pool_and_wait(worker, results, rig)  # the failed job cost nothing
        assert len(results) == 3
    finally:
        worker.stop()


def test_a_timer_sleeps_while_sets_flow_and_the_pooling_thread_keeps_its_period(monkeypatch):
    """``between_sets(job, timer)`` while sets flow: the timer is cancelled (the executor no
    longer wakes for it) and the pooling thread runs ``job`` after sets, at most once per timer
    period; once sets stop flowing the timer is reset (the executor runs it again); a forgotten
    job is neither run nor reset."""
    import threading

    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.node import pooling
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    monkeypatch.setattr(pooling, "FLOWING_S", 0.3)
    rig = base_rig()
    ran = {"often": [], "rare": [], "gone": []}
    results = []
    worker = PoolingWorker(CpuBackend(), LiveCalibration(rig), results.append, lambda r, d: None)
    worker.start()

    def job(name):
        return lambda: ran[name].append(threading.current_thread().name)

    often, rare, gone = job("often"), job("rare"), job("gone")
    t_often, t_rare, t_gone = StubTimer(0.0), StubTimer(60.0), StubTimer(0.0)
    try:
        pool_and_wait(worker, results, rig)
        worker.between_sets(often, t_often)
        worker.between_sets(rare, t_rare)
        worker.between_sets(gone, t_gone)
        worker.forget(gone)
        assert t_often.calls == t_rare.calls == ["cancel"] and not any(ran.values())
        for _ in range(3):
            pool_and_wait(worker, results, rig)
        assert ran["often"] == ["bevpool-pooling"] * 3  # period 0: after every set
        assert ran["rare"] == ["bevpool-pooling"]       # due once in 60 s
        assert ran["gone"] == []
        deadline = time.monotonic() + 10
        while "reset" not in t_often.calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert t_often.calls == t_rare.calls == ["cancel", "reset"] and t_gone.calls == ["cancel"]
        worker.between_sets(often, t_often)  # no longer flowing: runs here, the timer untouched
        assert ran["often"][-1] == threading.current_thread().name
        assert t_often.calls == ["cancel", "reset"]
    finally:
        worker.stop()


def test_callbacks_can_wait_for_the_worker_to_finish_its_set():
    """The input hand-off's ROS copies wait (``wait_until_idle``) while the pooling thread pools
    and publishes a set, and go on as soon as it is done; a slow set never holds them past the
    wait's bound."""
    import threading

    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.cameras.sync import CameraSet
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    entered, release, published = threading.Event(), threading.Event(), []

    def on_result(r):  # the worker is busy until its set is published
        entered.set()
        release.wait(30)
        published.append(r)

    worker = PoolingWorker(CpuBackend(), LiveCalibration(rig), on_result, lambda r, d: None)
    worker.start()
    try:
        assert worker.wait_until_idle(0.0)  # nothing queued: idle
        _, D_, H_, W_ = rig.depth_shape
        frames = {cam.name: {"depth": (1, np.zeros((D_, H_, W_), np.float32)),
                             "feat": (1, np.zeros((H_, W_, rig.channels), np.float32))} for cam in rig.cameras}
        worker.submit(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True))
        assert entered.wait(60)
        assert not worker.wait_until_idle(0.05)  # bounded: still publishing
        waiter = threading.Thread(target=lambda: published.append(worker.wait_until_idle(60)))
        waiter.start()
        release.set()
        waiter.join(60)
        assert not waiter.is_alive() and published[-1] is True and len(published) == 2
    finally:
        release.set()
        worker.stop()


# --- a precision's dtypes: one table -----------------------------------------------------------------
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_a_precisions_dtypes_come_from_one_table(precision, monkeypatch):
    """The launch plan, the operator's buffers and both frames read kernels.table.PRECISION_DTYPES."""
    from fake_cuda import _Module, fake_gpu

    from bevpool_ros.backends.gpu.device_frame import DeviceFrame
    from bevpool_ros.device import driver
    from bevpool_ros.device.operator import V3Operator
    from bevpool_ros.kernels.planning import v3_launch
    from bevpool_ros.kernels.table import PRECISION_DTYPES

    dtypes, smap = PRECISION_DTYPES[precision], get_workload("small")
    launch = v3_launch(smap, precision, "DRAM-bound")
    assert launch.plan(smap, launch.schedule(smap)).out_dtype == dtypes.output.name
    with fake_gpu():
        dev = SimpleNamespace(ordinal=0, ctx=driver._default_ctx, dev=0, sm_count=132, l2_bytes=50 << 20)
        rt = SimpleNamespace(device=dev, stream=driver.Stream(), module=_Module())
        op = V3Operator(rt, smap, precision, launch)
        io = op.io_buffers()
        assert io["depth"].nbytes == smap.num_depth * dtypes.input.itemsize
        assert io["out"].nbytes == smap.num_cells * smap.channels * dtypes.output.itemsize
        frame = DeviceFrame(rt, smap, precision, op.enqueue)
        assert (frame.kin, frame.kout) == (dtypes.input, dtypes.output)
        frame.close()
        for b in io.values():
            b.free()
        op.free()
