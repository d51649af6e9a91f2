"""The GPU frame path (backends/gpu/frame.py through CudaBackend) on a real GPU.

Every path, fp16/fp8 x wire float32/float16/E4M3 x published float32/float16 x copied/mapped
host memory, against the FP64 reference with the output poisoned (NaN) before each frame; the
device quantiser bit-exact against the host codec; NaN/Inf caught by the device flags; and the
backend driven from threads other than the one that built it, as the node's pooling thread does
(prepare, re-prepare on a calibration change, new FP8 scales, pool).
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from bevpool_ros.backends import InputError, NonFiniteOutput
from bevpool_ros.backends.staging import split_cameras
from bevpool_ros.reference import pool_reference
from bevpool_ros.workloads import get_workload

pytestmark = pytest.mark.gpu

FP16_ATOL = 1e-2


def backend(precision, **kw):
    from bevpool_ros.backends.cuda import CudaBackend

    return CudaBackend(precision, autotune=False, **kw)


def in_thread(fn):
    """Run ``fn`` in a fresh thread (no CUDA context current there); re-raise what it raised."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def inputs(smap, seed, scale_d=1.0, scale_f=1.0):
    rng = np.random.default_rng(seed)
    return rng.random(smap.depth_shape) * scale_d, rng.uniform(-1, 1, smap.feat_shape) * scale_f


def assert_matches(out, smap, precision, d, f, what=""):
    """``out`` against the FP64 reference at the precision's tolerance (d, f: what the kernel saw
    before its own rounding: float16 values for fp16, the original values for fp8)."""
    from bevpool_ros.kernels.precision import fp8_within_tolerance

    assert np.isfinite(out).all(), f"{what}: unwritten (poisoned) or non-finite cells"
    if precision == "fp16":  # FP32 accumulation of FP16 products; FP16 output rounds once more
        ref = pool_reference(d, f, smap)
        abs_ref = pool_reference(np.abs(d), np.abs(f), smap)
        tol = FP16_ATOL + 1e-5 * abs_ref + (np.abs(ref) * 2.0 ** -10 if out.dtype == np.float16 else 0.0)
        err = np.abs(out.astype(np.float64) - ref)
        assert np.all(err <= tol), f"{what}: max err {err.max():.4g}"
    else:
        unit = max(1.0, float(np.abs(d).max()) * float(np.abs(f).max()))  # tolerance in the inputs' units
        ok, err = fp8_within_tolerance(out, pool_reference(d, f, smap), pool_reference(np.abs(d), np.abs(f), smap),
                                       unit)
        assert ok, f"{what}: FP8 error {err:.4g} outside the documented tolerance"


@pytest.mark.parametrize("host_memory", ["copy", "mapped"])
@pytest.mark.parametrize("out_dtype", [np.float32, np.float16])
@pytest.mark.parametrize("wire", [np.float32, np.float16, "e4m3"])
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_every_frame_path_matches_the_reference(precision, wire, out_dtype, host_memory):
    from bevpool_ros.kernels import fp8

    smap = get_workload("canonical" if host_memory == "copy" else "small")
    be = backend(precision, host_memory=host_memory)
    be.prepare(smap)
    for seed in range(2):  # the second frame replays the captured graph over fresh staging
        d, f = inputs(smap, seed)
        if wire == "e4m3":  # codes as received: value = code * (1 / scale)
            s = (16.0, 16.0) if precision == "fp8" else (1.0, 1.0)
            be.fp8_scales = s
            cd, cf = fp8.quantize(d, s[0]), fp8.quantize(f, s[1])
            cameras, d, f = split_cameras(cd, cf), fp8.decode(cd, np.float64) / s[0], fp8.decode(cf, np.float64) / s[1]
            if precision == "fp16":
                d, f = d.astype(np.float16), f.astype(np.float16)
        else:
            cameras = split_cameras(d.astype(wire), f.astype(wire))
            if precision == "fp16":
                d, f = d.astype(wire).astype(np.float16), f.astype(wire).astype(np.float16)
        out = np.full(smap.bev_shape, np.nan, out_dtype)
        got = be.pool_cameras(cameras, out=out)
        assert got is out
        assert_matches(out, smap, precision, d, f, f"{precision} {wire} -> {np.dtype(out_dtype).name} {host_memory}")
    assert be.describe()["host_memory"] == host_memory
    be.close()


@pytest.mark.parametrize("wire", [np.float32, np.float16])
def test_device_quantisation_is_the_host_codec(wire):
    from bevpool_ros.kernels import fp8

    smap = get_workload("canonical")
    be = backend("fp8")
    be.prepare(smap)
    for seed, (sd, sf) in enumerate(((1.0, 1.0), (300.0, 0.01), (1e-3, 2.0 ** 10))):
        d, f = inputs(smap, seed, sd, sf)
        d, f = d.astype(wire), f.astype(wire)
        be.pool(d, f)
        for name, x in (("depth", d), ("feat", f)):
            buf = be.frame._kin[name]
            codes = np.empty(buf.nbytes, np.uint8)
            be.rt.stream.d2h(codes.ctypes.data, buf, buf.nbytes)
            be.rt.stream.synchronize()
            want = fp8.quantize(x, fp8.pow2_scale(x))
            assert np.array_equal(codes, want.reshape(-1)), f"{name} {wire} scales {sd}/{sf}"
    assert len(be.frame._graphs) == 1  # three different scales, one graph
    be.close()


def test_non_finite_values_are_caught_on_the_device():
    smap = get_workload("small")
    d, f = inputs(smap, 0)
    row = smap.ranks_feat[0]
    for precision in ("fp16", "fp8"):
        be = backend(precision)
        be.prepare(smap)
        for bad in (np.nan, np.inf, 1e6):  # 1e6: finite float32 beyond FP16 (fp16 path only)
            if bad == 1e6 and precision == "fp8":
                continue
            g = f.astype(np.float32)
            g.reshape(-1, smap.channels)[row, 0] = bad
            with pytest.raises(InputError):
                be.pool(d.astype(np.float32), g)
        g16 = f.astype(np.float16)
        g16.reshape(-1, smap.channels)[row, 1] = np.inf
        with pytest.raises(InputError):
            be.pool(d.astype(np.float16), g16)
        assert np.isfinite(be.pool(d.astype(np.float32), f.astype(np.float32))).all()  # still fine after
        be.close()
    raw = backend("fp8")
    raw.prepare(smap)
    with pytest.raises(InputError):
        raw.pool(np.full(smap.depth_shape, 0x7F, np.uint8), np.zeros(smap.feat_shape, np.uint8))
    raw.close()


def test_check_finite_off_still_never_publishes_a_non_finite_grid():
    smap = get_workload("small")
    be = backend("fp16", check_finite=False)
    be.prepare(smap)
    d, f = inputs(smap, 1)
    g = f.astype(np.float32)
    g.reshape(-1, smap.channels)[smap.ranks_feat[0], 0] = np.nan
    with pytest.raises(NonFiniteOutput):
        be.pool(d.astype(np.float32), g)
    big = np.full(smap.feat_shape, 6e4, np.float16)  # each value fits FP16, the sums do not
    with pytest.raises(NonFiniteOutput):
        be.pool(np.ones(smap.depth_shape, np.float16), big, out=np.empty(smap.bev_shape, np.float16))
    be.check_finite = True  # the parameter changed at run time: the next frame checks inputs again
    with pytest.raises(InputError):
        be.pool(d.astype(np.float32), g)
    be.close()


def test_bad_headers_are_refused_before_any_device_work():
    smap = get_workload("small")
    be = backend("fp16")
    be.prepare(smap)
    d, f = inputs(smap, 2)
    d, f = d.astype(np.float32), f.astype(np.float32)
    cams = split_cameras(d, f)
    mixed = [(np.zeros(d[0].shape, np.uint8), f[0])] + cams[1:]  # E4M3 codes among floats
    for bad in (split_cameras(d[..., :-1], f), split_cameras(d.astype(np.int32), f), mixed, cams[:-1]):
        with pytest.raises(InputError):
            be.pool_cameras(bad)
    assert not be.frame._graphs  # nothing was captured, so nothing ran
    be.close()


def test_backend_from_other_threads_prepare_recalibrate_rescale_pool():
    """The node's pattern: built in one thread, prepared and pooled in its pooling thread, re-prepared
    there on a calibration change; FP8 scales change from frame to frame (raw and float inputs)."""
    from bevpool_ros.kernels import fp8

    maps = get_workload("canonical"), get_workload("small")
    for precision in ("fp16", "fp8"):
        be = backend(precision)  # this thread
        for smap in maps:  # the second prepare is a calibration change
            in_thread(lambda: be.prepare(smap))
            out = np.empty(smap.bev_shape, np.float32)  # published float32: x 100 sums exceed FP16
            for seed, mag in enumerate((1.0, 100.0, 0.01)):  # fp8: a new scale each frame, no re-capture
                d, f = inputs(smap, seed, mag, mag)
                in_thread(lambda: be.pool(d.astype(np.float32), f.astype(np.float32), out=out))
                ref_in = (d.astype(np.float32).astype(np.float16), f.astype(np.float32).astype(np.float16)) \
                    if precision == "fp16" else (d, f)
                assert_matches(out, smap, precision, *ref_in, f"thread {precision} {smap.key} x{mag}")
            assert len(be.frame._graphs) == 1
            if precision == "fp8":
                for s in ((16.0, 16.0), (64.0, 8.0)):
                    d, f = inputs(smap, 7)
                    in_thread(lambda: setattr(be, "fp8_scales", s))
                    in_thread(lambda: be.pool(fp8.quantize(d, s[0]), fp8.quantize(f, s[1]), out=out))
                    assert_matches(out, smap, "fp8", fp8.decode(fp8.quantize(d, s[0]), np.float64) / s[0],
                                   fp8.decode(fp8.quantize(f, s[1]), np.float64) / s[1], f"raw {s}")
                assert len(be.frame._graphs) == 2  # float32 and E4M3 wire: one graph each
        in_thread(be.close)


def pool_through_worker(be, rig, out_dtype: str, cameras_of, check, sets: int = 4, change_at: int = 2) -> None:
    """Drive ``be`` through the node's PoolingWorker (its own thread) with ``sets`` camera sets,
    ``cameras_of(i)`` -> [(depth, feat)] in rig order; before set ``change_at`` camera 0 gets new
    intrinsics (a CameraInfo change: the worker re-prepares in its thread). ``check(i, result)``
    judges each grid; no set may be dropped. Closes ``be``."""
    import time

    from bevpool_ros.cameras.calibration import LiveCalibration
    from bevpool_ros.cameras.sync import CameraSet
    from bevpool_ros.io.tensor_codec import ReusableBuffer
    from bevpool_ros.node.pooling import PoolingWorker

    cal = LiveCalibration(rig)
    done, drops = [], []
    worker = PoolingWorker(be, cal, done.append, lambda r, d: drops.append((r, d)), out_dtype=out_dtype,
                           out_buffer=ReusableBuffer())
    worker.start()
    try:
        for i in range(sets):
            if i == change_at:
                cam = rig.cameras[0]
                k = np.array(cam.K, dtype=float).reshape(-1)
                k[0] *= 1.05
                assert cal.update_intrinsics(cam.name, list(k), cam.width, cam.height)
            frames = {c.name: {"depth": (i, d), "feat": (i, f)} for c, (d, f) in zip(rig.cameras, cameras_of(i))}
            worker.submit(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True))
            deadline = time.monotonic() + 120
            while len(done) + len(drops) <= i and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not drops, drops
            assert len(done) == i + 1, f"set {i}: no result within 120 s"
            check(i, done[-1])
        assert worker.rebuilds == 2
    finally:
        worker.stop()
        be.close()


def test_pooling_worker_thread_with_a_calibration_change():
    """PoolingWorker exactly as the node runs it: its own thread, a CameraInfo change re-prepares there."""
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    N, D, H, W = rig.depth_shape
    rng = np.random.default_rng(3)
    be = backend("fp8")

    def cameras_of(i):
        return [(rng.random((D, H, W), dtype=np.float32), rng.uniform(-1, 1, (H, W, rig.channels)).astype(np.float32))
                for _ in range(N)]

    def check(i, r):
        depth = np.stack([r.camera_set.frames[c.name]["depth"][1] for c in rig.cameras])
        feat = np.stack([r.camera_set.frames[c.name]["feat"][1] for c in rig.cameras])
        assert_matches(r.bev, be.smap, "fp8", depth.astype(np.float64), feat.astype(np.float64), f"worker set {i}")

    pool_through_worker(be, rig, "float16", cameras_of, check)


def test_device_output_and_frame_hook_for_zero_copy_consumers():
    from bevpool_ros.device.driver import DeviceBuffer

    smap = get_workload("small")
    be = backend("fp16")
    be.prepare(smap)
    out = np.empty(smap.bev_shape, np.float16)
    copy = DeviceBuffer(out.nbytes)
    seen = []

    before = be.device_output()  # before any frame: where a float32 grid would land, for sizing
    assert before.dtype == np.float32 and before.nbytes >= out.nbytes and before.device is be.rt.device

    def hook(dev_out):  # what the hand-off does: a D2D copy into its ring, ordered on the frame's stream
        seen.append(dev_out)
        assert dev_out.stream == be.rt.stream.handle
        be.rt.stream.d2d(copy, dev_out, dev_out.nbytes)

    be.add_frame_hook(hook)
    d, f = inputs(smap, 4)
    be.pool(d.astype(np.float16), f.astype(np.float16), out=out)
    host = np.empty_like(out)
    be.rt.stream.d2h(host.ctypes.data, copy, copy.nbytes)
    be.rt.stream.synchronize()
    assert np.array_equal(host.view(np.uint16), out.view(np.uint16))
    (dev_out,) = seen
    assert dev_out == be.device_output() and dev_out.dtype == np.float16 and dev_out.shape == smap.bev_shape
    be.remove_frame_hook(hook)
    copy.free()
    be.close()


def test_device_input_warm_up_publishes_nothing_and_the_next_set_is_right():
    """GpuBackend.warm_device_inputs (the node runs it after each prepare when hand-off sets are
    expected): no frame hook, no write to the caller's array, device_output unchanged; the first
    real set of device tensors afterwards matches the reference and reaches the hook once."""
    cp = pytest.importorskip("cupy")
    smap = get_workload("small")
    be = backend("fp16")
    be.prepare(smap)
    seen = []
    be.add_frame_hook(seen.append)
    out = np.full(smap.bev_shape, np.nan, np.float16)  # poisoned: the warm-up must not write it
    before = be.device_output()
    be.warm_device_inputs(out=out)
    assert not seen and np.isnan(out).all() and be.device_output() == before
    d, f = inputs(smap, 11)
    d16, f16 = d.astype(np.float16), f.astype(np.float16)
    cameras = [(cp.asarray(dc), cp.asarray(fc)) for dc, fc in split_cameras(d16, f16)]
    # pool_cameras reads device tensors as they are (the node's hand-off views are ordered by their
    # producer's IPC events): the copies CuPy queued on its stream must be done first (without this
    # the grid read zeros in one run on the H200)
    cp.cuda.get_current_stream().synchronize()
    got = be.pool_cameras(cameras, out=out)
    assert got is out and len(seen) == 1 and seen[0] == be.device_output()
    assert_matches(out, smap, "fp16", d16.astype(np.float64), f16.astype(np.float64), "after warm-up")
    be.remove_frame_hook(seen.append)
    be.close()
