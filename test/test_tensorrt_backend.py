"""TensorRTBackend: clean unavailability + fallback, and its engine/cache/staging logic.

The middle tests replace only the GPU pieces (the device runtime and the engine runner) with
fakes; the engine they load is a real TensorRT-RTX AOT build. The @gpu tests need a GPU that a
TensorRT runtime accepts: they skip on this machine (no GPU) AND on the lent H200 (no full
TensorRT there, and TensorRT-RTX refuses compute capability 9.0).
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

from bevpool_ros.backends import BackendUnavailable, InputError, create_backend
from bevpool_ros.backends.cuda import fp8
from bevpool_ros.reference import pool_reference
from bevpool_ros.regime import MiB

from tensorrt_helpers import tiny_map, trt_rtx_or_skip

import bevpool_ros.backends.tensorrt.backend as B
import bevpool_ros.backends.tensorrt.runner as R
from bevpool_ros.backends.tensorrt import TensorRTBackend
from bevpool_ros.backends.tensorrt.trt_import import TensorRTMissing


def _no_gpu() -> bool:
    from bevpool_ros.regime import live_l2_bytes

    return live_l2_bytes() is None


# --- unavailability -------------------------------------------------------------------------
@pytest.mark.skipif(not _no_gpu(), reason="needs a machine without a GPU")
def test_no_gpu_raises_backend_unavailable():
    with pytest.raises(BackendUnavailable, match="CUDA driver|GPU"):
        TensorRTBackend("fp16")


def test_no_tensorrt_raises_backend_unavailable(monkeypatch):
    def missing(_=None):
        raise TensorRTMissing("no TensorRT Python module: tensorrt: not installed")

    monkeypatch.setattr(B, "load_tensorrt", missing)
    monkeypatch.setattr(B, "_gpu_runtime", lambda ordinal: fake_rt("sm_89"))
    with pytest.raises(BackendUnavailable, match="no TensorRT"):
        TensorRTBackend("fp16")


def test_fp32_is_not_a_tensorrt_precision():
    with pytest.raises(BackendUnavailable, match="fp16, fp8 or auto"):
        TensorRTBackend("fp32")


@pytest.mark.skipif(not _no_gpu(), reason="needs a machine without a GPU")
def test_create_backend_falls_back_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="bevpool_ros.backends"):
        backend = create_backend("tensorrt", "fp16")
    assert backend.name == "cpu"  # cuda is unavailable here too
    warnings = [r for r in caplog.records if r.name == "bevpool_ros.backends" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "tensorrt" in warnings[0].getMessage()


# --- engine logic with fake GPU pieces ------------------------------------------------------
def fake_rt(arch: str, name: str = "FAKE GPU", l2: int = 72 * MiB):
    return SimpleNamespace(device=SimpleNamespace(arch=arch, name=name, l2_bytes=l2), stream=None)


class FakeRunner:
    """Stands in for EngineRunner: keeps the engine bytes, computes on the host."""

    instances: list = []
    refuse: set = set()
    smap = None  # set per test: the fake computes with the map on the host

    def __init__(self, lib, data, cfg, rt):
        if data in FakeRunner.refuse:
            raise R.EngineLoadError("refused (test)")
        self.data, self.cfg = data, cfg
        in_dt = np.float16 if cfg.precision == "fp16" else np.uint8
        self.h_depth = SimpleNamespace(array=np.zeros(cfg.depth_shape, in_dt))
        self.h_feat = SimpleNamespace(array=np.zeros(cfg.feat_shape, in_dt))
        self.maps = []  # every set_map call's arrays
        self.mode = "graph"
        FakeRunner.instances.append(self)

    def set_map(self, arrays):
        from bevpool_ros.backends.tensorrt.plugin_config import check_shapes

        check_shapes(self.cfg, [self.cfg.depth_shape, self.cfg.feat_shape, *(a.shape for a in arrays.values())])
        self.maps.append(arrays)

    def run(self):
        d, f = self.h_depth.array, self.h_feat.array
        if self.cfg.precision == "fp8":
            d, f = fp8.decode(d), fp8.decode(f)
            scale = [v for k, v in self.cfg.plan.args if k == "f32"][0]
        else:
            scale = 1.0
        return (pool_reference(d, f, self.smap) * scale).astype(self.cfg.output_dtype)

    def time_us(self):
        return 10.0 if self.cfg.precision == "fp16" else 5.0

    def close(self):
        pass


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    lib = trt_rtx_or_skip()
    FakeRunner.instances, FakeRunner.refuse = [], set()
    monkeypatch.setattr(R, "EngineRunner", FakeRunner)

    def make(arch="sm_89", precision="fp16", **kw):
        monkeypatch.setattr(B, "_gpu_runtime", lambda ordinal: fake_rt(arch))
        kw.setdefault("autotune", False)  # tuning measures on a GPU; tested with a fake below
        return TensorRTBackend(precision, cache_dir=tmp_path / "engines", **kw)

    make.lib = lib
    return make


def _prepare(backend, smap):
    backend.prepare(smap)
    backend.runner.smap = smap
    return backend


@pytest.mark.parametrize("arch", ["sm_90", "sm_110"])
def test_gpu_tensorrt_rtx_cannot_run_on_is_unavailable(fake_gpu, arch):
    with pytest.raises(BackendUnavailable, match="cannot run"):
        fake_gpu(arch)


def test_fp8_below_sm89_is_unavailable(fake_gpu):
    with pytest.raises(BackendUnavailable, match="SM89"):
        fake_gpu("sm_86", "fp8")


def test_prepare_builds_then_reuses_engine(fake_gpu):
    smap = tiny_map(channels=16)
    b1 = _prepare(fake_gpu(), smap)
    assert b1.cache.stats()["stores"] == 1 and b1.cache.stats()["misses"] == 1
    b2 = _prepare(fake_gpu(), smap)
    assert b2.cache.stats()["hits"] == 1 and b2.cache.stats()["stores"] == 0
    assert FakeRunner.instances[0].data == FakeRunner.instances[1].data
    d = b2.describe()
    assert d["backend"] == "tensorrt" and d["kernel"].startswith("bevpool_v3_fp16") and d["arch"] == "sm_89"


def test_two_calibrations_hit_the_same_engine_with_different_arrays(fake_gpu, nuscenes_rig):
    """A calibration change (TF update) uploads new map arrays: no rebuild, no reload, no re-tune."""
    from bevpool_ros.scatter_map import build_scatter_map

    from tensorrt_helpers import recalibrated

    a, b = build_scatter_map(nuscenes_rig), build_scatter_map(recalibrated(nuscenes_rig))
    assert a.key != b.key and a.num_points != b.num_points
    backend = fake_gpu()
    backend.prepare(a)
    runner = backend.runner
    backend.prepare(b)
    assert backend.runner is runner and backend.engine_loads == 1 and backend.calibration_updates == 1
    assert backend.cache.stats()["stores"] == 1
    first, second = runner.maps
    assert first["pidx"].shape != second["pidx"].shape  # the new calibration's arrays were uploaded
    fresh = fake_gpu()  # another process starting on the new calibration: the cached engine
    fresh.prepare(b)
    assert fresh.cache.hits == 1 and fresh.cache.stores == 0
    assert FakeRunner.instances[-1].data == runner.data
    assert fresh.describe()["calibration_updates"] == 0 and fresh.describe()["frame_mode"] == "graph"


def test_corrupt_engine_file_is_rebuilt(fake_gpu):
    smap = tiny_map()
    b1 = _prepare(fake_gpu(), smap)
    (path,) = list(b1.cache.directory.glob("*.engine"))
    path.write_bytes(path.read_bytes()[:100])  # truncated
    b2 = _prepare(fake_gpu(), smap)
    assert b2.cache.corrupt == 1 and b2.cache.stores == 1


def test_engine_refused_by_tensorrt_is_rebuilt_once(fake_gpu):
    smap = tiny_map()
    b1 = _prepare(fake_gpu(), smap)
    # an intact envelope around an engine TensorRT refuses (e.g. from another TensorRT build)
    from bevpool_ros.private_cache import seal as wrap

    (path,) = list(b1.cache.directory.glob("*.engine"))
    stale = b"stale engine from another TensorRT build"
    path.write_bytes(wrap(stale))
    FakeRunner.refuse = {stale}
    b2 = _prepare(fake_gpu(), smap)
    assert b2.cache.corrupt == 1 and b2.runner.data != stale


def test_pool_fp16_stages_and_checks_inputs(fake_gpu):
    smap = tiny_map(channels=16)
    b = _prepare(fake_gpu(), smap)
    rng = np.random.default_rng(1)
    depth = rng.random(smap.depth_shape).astype(np.float32)
    feat = rng.uniform(-1, 1, smap.feat_shape).astype(np.float32)
    out = b.pool(depth, feat)
    assert out.dtype == np.float32 and out.shape == smap.bev_shape
    np.testing.assert_allclose(out, pool_reference(depth, feat, smap), atol=2e-2)
    with pytest.raises(InputError):
        b.pool(depth[:1], feat)
    with pytest.raises(InputError, match="overflow"):
        b.pool(depth * 1e6, feat)


def test_pool_fp8_uses_engine_scales(fake_gpu):
    smap = tiny_map(channels=16)
    b = _prepare(fake_gpu("sm_120", "fp8", fp8_scales=(8.0, 8.0)), smap)
    assert b.runner.cfg.plan.args[-2] == ("f32", 1.0 / 64.0)  # baked into the engine
    rng = np.random.default_rng(2)
    depth = rng.random(smap.depth_shape).astype(np.float32)
    feat = rng.uniform(-1, 1, smap.feat_shape).astype(np.float32)
    out = b.pool(depth, feat)
    assert out.dtype == np.float16
    ref = pool_reference(depth, feat, smap)
    from bevpool_ros.backends.cuda.precision_select import fp8_within_tolerance

    ok, _ = fp8_within_tolerance(out, ref, pool_reference(np.abs(depth), np.abs(feat), smap))
    assert ok
    codes = fp8.quantize(depth, 8.0), fp8.quantize(feat, 8.0)
    np.testing.assert_array_equal(b.pool(*codes), out)  # raw E4M3 codes take the same path
    bad = codes[0].copy()
    bad.flat[0] = 0x7F
    with pytest.raises(InputError, match="NaN"):
        b.pool(bad, codes[1])


def test_auto_picks_fp16_without_fp8_hardware(fake_gpu):
    b = _prepare(fake_gpu("sm_86", "auto"), tiny_map())
    assert b.precision == "fp16" and "no FP8" in b.auto_record["reason"]


def test_auto_keeps_fp8_only_when_faster_and_within_tolerance(fake_gpu, monkeypatch, tmp_path):
    monkeypatch.setenv("BEVPOOL_KERNEL_CACHE", str(tmp_path / "kc"))  # precision choice cache
    smap = tiny_map(channels=16)
    b = fake_gpu("sm_120", "auto")
    monkeypatch.setattr(FakeRunner, "smap", smap, raising=False)
    b.prepare(smap)
    assert b.precision == "fp8" and b.auto_record["fp8_within_tolerance"]
    monkeypatch.setattr(FakeRunner, "time_us", lambda self: 5.0 if self.cfg.precision == "fp16" else 9.0)
    monkeypatch.setenv("BEVPOOL_KERNEL_CACHE", str(tmp_path / "kc2"))
    b2 = fake_gpu("sm_120", "auto")
    b2.prepare(smap)
    assert b2.precision == "fp16"  # FP8 slower: not chosen


# --- real GPU + TensorRT runtime ------------------------------------------------------------
def _real_backend(precision, tmp_path):
    try:
        return TensorRTBackend(precision, cache_dir=tmp_path)
    except BackendUnavailable as e:
        pytest.skip(f"tensorrt backend unavailable on this GPU machine: {e}")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_gpu_pool_matches_reference(precision, tmp_path, canonical_map):
    b = _real_backend(precision, tmp_path)
    b.prepare(canonical_map)
    rng = np.random.default_rng(3)
    depth = rng.random(canonical_map.depth_shape).astype(np.float32)
    feat = rng.uniform(-1, 1, canonical_map.feat_shape).astype(np.float32)
    out = b.pool(depth, feat)
    ref = pool_reference(depth, feat, canonical_map)
    if precision == "fp16":
        np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)
    else:
        from bevpool_ros.backends.cuda.precision_select import fp8_within_tolerance

        assert fp8_within_tolerance(out, ref, pool_reference(np.abs(depth), np.abs(feat), canonical_map))[0]


@pytest.mark.gpu
def test_gpu_engine_cache_reused_and_auto(tmp_path, canonical_map):
    b1 = _real_backend("fp16", tmp_path)
    b1.prepare(canonical_map)
    b2 = _real_backend("fp16", tmp_path)
    b2.prepare(canonical_map)
    assert b2.cache.hits == 1
    b3 = _real_backend("auto", tmp_path)
    b3.prepare(canonical_map)
    assert b3.precision in ("fp16", "fp8")


def test_prebuilt_engine_is_found_by_the_backend(fake_gpu, tmp_path, capsys):
    """prebuild (no GPU) -> the node's backend on an RTX 4090 (sm_89, 72 MiB L2) hits the cache."""
    import json

    from bevpool_ros.backends.tensorrt import prebuild
    from bevpool_ros.workloads import get_workload

    assert prebuild.main(["--workload", "small", "--arch", "sm_89", "--precision", "fp16",
                          "--cache-dir", str(tmp_path / "engines"), "--onnx", str(tmp_path / "g.onnx")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["arch"] == "sm_89" and report["bytes"] > 0
    assert (tmp_path / "g.onnx").stat().st_size > 0
    b = _prepare(fake_gpu("sm_89", autotune=True), get_workload("small"))  # prebuilt wins over tuning
    assert b.cache.hits == 1 and b.cache.stores == 0 and b.tuned == {}


def test_prebuild_refuses_fp8_below_sm89(tmp_path, capsys):
    trt_rtx_or_skip()
    from bevpool_ros.backends.tensorrt import prebuild

    assert prebuild.main(["--workload", "small", "--arch", "sm_86", "--precision", "fp8",
                          "--cache-dir", str(tmp_path)]) == 1
    assert "fp8 needs compute capability" in capsys.readouterr().err


def test_unsafe_parser_or_missing_onnx_is_unavailable(monkeypatch):
    from bevpool_ros.backends.tensorrt.trt_import import TrtLib

    lib = trt_rtx_or_skip()
    unsafe = TrtLib(lib.trt, lib.module_name, lib.version, onnx_parser_safe=False)
    monkeypatch.setattr(B, "_gpu_runtime", lambda ordinal: fake_rt("sm_89"))
    monkeypatch.setattr(B, "load_tensorrt", lambda _=None: unsafe)
    with pytest.raises(BackendUnavailable, match="would abort"):
        TensorRTBackend("fp16")
    monkeypatch.setattr(B, "load_tensorrt", lambda _=None: lib)
    real_find = B.importlib.util.find_spec
    monkeypatch.setattr(B.importlib.util, "find_spec", lambda n, *a: None if n == "onnx" else real_find(n, *a))
    with pytest.raises(BackendUnavailable, match="onnx"):
        TensorRTBackend("fp16")


def test_autotuned_launch_is_baked_into_the_engine(fake_gpu, monkeypatch, tmp_path):
    monkeypatch.setenv("BEVPOOL_KERNEL_CACHE", str(tmp_path / "kc"))
    measured = []

    def measure(self, precision):
        measured.append(precision)
        return ("bevpool_v3_fp16_dram", 32, 128)

    monkeypatch.setattr(TensorRTBackend, "_measure_launch", measure)
    smap = tiny_map(channels=16)
    b = _prepare(fake_gpu("sm_89", autotune=True), smap)
    plan = b.runner.cfg.plan
    assert plan.kernel == "bevpool_v3_fp16_dram" and plan.block[0] == 128
    b2 = _prepare(fake_gpu("sm_89", autotune=True), smap)  # choice cached per shape class: not re-measured
    assert measured == ["fp16"] and b2.cache.hits == 1
