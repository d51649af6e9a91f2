"""TensorRTBackend: clean unavailability + fallback, and its engine/cache/calibration logic.

The middle tests replace only the GPU pieces (device runtime, engine runner, the shared frame
graph) with fakes; the engines they load are real TensorRT-RTX AOT builds. The @gpu tests need a
GPU that a TensorRT runtime accepts: they skip on this machine (no GPU) AND on the lent H200 (no
full TensorRT there, and TensorRT-RTX refuses compute capability 9.0).
"""
from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from tensorrt_helpers import tiny_map, trt_rtx_or_skip

import bevpool_ros.backends.gpu.base as GB  # GpuBackend: the runtime and the frame it builds
import bevpool_ros.backends.tensorrt.backend as B
import bevpool_ros.backends.tensorrt.runner as R
from bevpool_ros.backends import BackendUnavailable, create_backend
from bevpool_ros.backends.gpu.choices import ChoiceStore
from bevpool_ros.backends.tensorrt import TensorRTBackend
from bevpool_ros.backends.tensorrt.trt_import import TensorRTMissing
from bevpool_ros.kernels.planning import FP8_KERNEL_OUT_SCALE, LaunchChoice
from bevpool_ros.reference import pool_reference
from bevpool_ros.regime import MiB


def _no_gpu() -> bool:
    from bevpool_ros.device.driver import live_l2_bytes

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
    monkeypatch.setattr(GB, "get_runtime", lambda ordinal, stream_priority="highest": fake_rt("sm_89"))
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
    device = SimpleNamespace(arch=arch, name=name, l2_bytes=l2, make_current=lambda: None)
    return SimpleNamespace(device=device, stream=None)


class FakeRunner:
    """Stands in for EngineRunner: keeps the engine bytes and every map it was given."""

    instances: list = []
    refuse: set = set()

    def __init__(self, lib, data, cfg, rt):
        if data in FakeRunner.refuse:
            raise R.EngineLoadError("refused (test)")
        self.data, self.cfg, self.maps = data, cfg, []
        FakeRunner.instances.append(self)

    def set_map(self, arrays):
        from bevpool_ros.backends.tensorrt.plugin_config import check_shapes

        check_shapes(self.cfg, [self.cfg.depth_shape, self.cfg.feat_shape, *(a.shape for a in arrays.values())])
        self.maps.append(arrays)

    def enqueue(self, stream, bindings):
        raise AssertionError("the fake frame never records the engine")

    def close(self):
        pass


class FakeFrame:
    """Stands in for the shared GpuFrame: pools on the host with the FP64 reference."""

    def __init__(self, rt, smap, precision, enqueue_kernel, **kw):
        self.smap, self.precision, self.enqueue_kernel = smap, precision, enqueue_kernel
        self.host_memory = "copy"

    def run(self, cameras, out=None):
        depth = np.stack([c[0] for c in cameras]).astype(np.float64)
        feat = np.stack([c[1] for c in cameras]).astype(np.float64)
        return pool_reference(depth, feat, self.smap).astype(np.float32 if self.precision == "fp16" else np.float16)

    def frame_time_us(self, cameras, **kw):
        return 10.0 if self.precision == "fp16" else 5.0

    def close(self):
        pass


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    lib = trt_rtx_or_skip()
    FakeRunner.instances, FakeRunner.refuse = [], set()
    monkeypatch.setattr(R, "EngineRunner", FakeRunner)
    monkeypatch.setattr(GB, "GpuFrame", FakeFrame)
    monkeypatch.setenv("BEVPOOL_KERNEL_CACHE", str(tmp_path / "kc"))  # measured choices

    def make(arch="sm_89", precision="fp16", **kw):
        monkeypatch.setattr(GB, "get_runtime", lambda ordinal, stream_priority="highest": fake_rt(arch))
        kw.setdefault("autotune", False)  # tuning measures on a GPU; tested with a fake below
        return TensorRTBackend(precision, cache_dir=tmp_path / "engines", **kw)

    make.lib = lib
    return make


@pytest.mark.parametrize("arch", ["sm_90", "sm_110"])
def test_gpu_tensorrt_rtx_cannot_run_on_is_unavailable(fake_gpu, arch):
    with pytest.raises(BackendUnavailable, match="cannot run"):
        fake_gpu(arch)


def test_fp8_below_sm89_is_unavailable(fake_gpu):
    with pytest.raises(BackendUnavailable, match="SM89"):
        fake_gpu("sm_86", "fp8")


def test_prepare_builds_then_reuses_engine(fake_gpu):
    smap = tiny_map(channels=16)
    b1 = fake_gpu()
    b1.prepare(smap)
    assert b1.cache.stats()["stores"] == 1 and b1.cache.stats()["misses"] == 1
    b2 = fake_gpu()
    b2.prepare(smap)
    assert b2.cache.stats()["hits"] == 1 and b2.cache.stats()["stores"] == 0
    assert FakeRunner.instances[0].data == FakeRunner.instances[1].data
    d = b2.describe()
    assert d["backend"] == "tensorrt" and d["kernel"].startswith("bevpool_v3_fp16") and d["arch"] == "sm_89"
    assert d["grid"][0] > 0  # the plan bound to this calibration, not the engine's template


def test_two_calibrations_hit_the_same_engine_with_different_arrays(fake_gpu, nuscenes_rig):
    """A calibration change (TF update) uploads new map arrays: no rebuild, no reload, no re-tune."""
    from tensorrt_helpers import recalibrated

    from bevpool_ros.scatter_map import build_scatter_map

    a, b = build_scatter_map(nuscenes_rig), build_scatter_map(recalibrated(nuscenes_rig))
    assert a.key != b.key and a.num_points != b.num_points
    backend = fake_gpu()
    backend.prepare(a)
    runner = backend.runners["fp16"][1]
    backend.prepare(b)
    assert backend.runners["fp16"][1] is runner and backend.engine_loads == 1 and backend.calibration_updates == 1
    assert backend.cache.stats()["stores"] == 1
    first, second = runner.maps
    assert first["pidx"].shape != second["pidx"].shape  # the new calibration's arrays were uploaded
    fresh = fake_gpu()  # another process starting on the new calibration: the cached engine
    fresh.prepare(b)
    assert fresh.cache.hits == 1 and fresh.cache.stores == 0
    assert FakeRunner.instances[-1].data == runner.data
    assert fresh.describe()["calibration_updates"] == 0


def test_corrupt_engine_file_is_rebuilt(fake_gpu):
    smap = tiny_map()
    fake_gpu().prepare(smap)
    b1 = fake_gpu()
    (path,) = list(b1.cache.directory.glob("*.engine"))
    path.write_bytes(path.read_bytes()[:100])  # truncated
    b1.prepare(smap)
    assert b1.cache.corrupt == 1 and b1.cache.stores == 1


def test_engine_refused_by_tensorrt_is_rebuilt_once(fake_gpu):
    smap = tiny_map()
    fake_gpu().prepare(smap)
    # an intact envelope around an engine TensorRT refuses (e.g. from another TensorRT build)
    from bevpool_ros.private_cache import seal as wrap

    b2 = fake_gpu()
    (path,) = list(b2.cache.directory.glob("*.engine"))
    stale = b"stale engine from another TensorRT build"
    path.write_bytes(wrap(stale))
    FakeRunner.refuse = {stale}
    b2.prepare(smap)
    assert b2.cache.corrupt == 1 and b2.runners["fp16"][1].data != stale


def test_fp8_engine_writes_the_core_kernel_scale(fake_gpu):
    """FP8 input scales live on the device (gpu_frame); the engine's kernel scale is the core's fixed one."""
    smap = tiny_map(channels=16)
    b = fake_gpu("sm_120", "fp8", fp8_scales=(8.0, 8.0))
    b.prepare(smap)
    cfg = b.runners["fp8"][1].cfg
    assert ("f32", FP8_KERNEL_OUT_SCALE) in cfg.plan.args and cfg.input_dtype == "float8_e4m3"


def test_auto_picks_fp16_without_fp8_hardware(fake_gpu):
    b = fake_gpu("sm_86", "auto")
    b.prepare(tiny_map())
    assert b.precision == "fp16" and list(b.runners) == ["fp16"]


def test_auto_keeps_fp8_only_when_faster_and_within_tolerance(fake_gpu, monkeypatch, tmp_path):
    smap = tiny_map(channels=16)
    b = fake_gpu("sm_120", "auto")
    b.prepare(smap)
    assert b.precision == "fp8" and b.auto_record.fp8_within_tolerance and list(b.runners) == ["fp8"]
    assert b.describe()["input_dtype"] == "float8_e4m3"
    monkeypatch.setattr(FakeFrame, "frame_time_us",
                        lambda self, cameras, **kw: 5.0 if self.precision == "fp16" else 9.0)
    monkeypatch.setenv("BEVPOOL_KERNEL_CACHE", str(tmp_path / "kc2"))
    b2 = fake_gpu("sm_120", "auto", choice_store=ChoiceStore(tmp_path / "kc2"))
    b2.prepare(smap)
    assert b2.precision == "fp16"  # FP8 slower: not chosen
    assert b2.describe()["input_dtype"] == "float16" and list(b2.runners) == ["fp16"]


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
        from bevpool_ros.kernels.precision import fp8_within_tolerance

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


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_prebuilt_engine_is_found_by_the_backend(fake_gpu, tmp_path, capsys, precision):
    """prebuild (no GPU) -> the node's backend on an RTX 4090 (sm_89, 72 MiB L2) hits the cache."""
    import json

    from bevpool_ros.backends.tensorrt import prebuild
    from bevpool_ros.workloads import get_workload

    assert prebuild.main(["--workload", "small", "--arch", "sm_89", "--precision", precision,
                          "--cache-dir", str(tmp_path / "engines"), "--onnx", str(tmp_path / "g.onnx")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["arch"] == "sm_89" and report["bytes"] > 0
    assert (tmp_path / "g.onnx").stat().st_size > 0
    b = fake_gpu("sm_89", precision, autotune=True)
    b.prepare(get_workload("small"))  # prebuilt wins over tuning
    assert b.cache.hits == 1 and b.cache.stores == 0 and b.launch_choice is None


def test_prebuild_on_the_target_runs_the_nodes_own_prepare(fake_gpu, monkeypatch, tmp_path):
    """Full TensorRT (DRIVE Thor): bevpool-trt-build tunes and builds through TensorRTBackend.prepare,
    so the engine and the choice land under the node's keys (TensorRT-RTX stands in for the library)."""
    from types import SimpleNamespace

    from bevpool_ros.backends.tensorrt import prebuild
    from bevpool_ros.workloads import get_workload

    monkeypatch.setattr(TensorRTBackend, "_measure_launch",
                        lambda self, precision: LaunchChoice("bevpool_v3_fp16_dram", 16, 256, 1.0))
    fake_gpu("sm_89")  # installs the fake device runtime
    args = SimpleNamespace(cache_dir=str(tmp_path / "engines"), precision="fp16", tune=True, arch="sm_89",
                           onnx=str(tmp_path / "g.onnx"))
    report = prebuild._build_on_gpu(get_workload("small"), args)
    assert report["engine"] and report["tuned"] and report["kernel"] == "bevpool_v3_fp16_dram"
    node = fake_gpu("sm_89", autotune=True)
    node.prepare(get_workload("small"))  # the node: cached choice, cached engine
    assert node.cache.hits == 1 and node.cache.stores == 0
    with pytest.raises(prebuild.TargetError, match="not sm_120"):
        prebuild._build_on_gpu(get_workload("small"), SimpleNamespace(**{**vars(args), "arch": "sm_120"}))


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
    monkeypatch.setattr(GB, "get_runtime", lambda ordinal, stream_priority="highest": fake_rt("sm_89"))
    monkeypatch.setattr(B, "load_tensorrt", lambda _=None: unsafe)
    with pytest.raises(BackendUnavailable, match="would abort"):
        TensorRTBackend("fp16")
    monkeypatch.setattr(B, "load_tensorrt", lambda _=None: lib)
    real_find = B.importlib.util.find_spec
    monkeypatch.setattr(B.importlib.util, "find_spec", lambda n, *a: None if n == "onnx" else real_find(n, *a))
    with pytest.raises(BackendUnavailable, match="onnx"):
        TensorRTBackend("fp16")


def test_autotuned_launch_is_baked_into_the_engine_and_kept_across_calibrations(fake_gpu, monkeypatch):
    measured = []

    def measure(self, precision):
        measured.append(precision)
        return LaunchChoice("bevpool_v3_fp16_dram", 32, 128, 1.0)

    monkeypatch.setattr(TensorRTBackend, "_measure_launch", measure)
    a, b = tiny_map(channels=16, seed=1, points=100), tiny_map(channels=16, seed=2, points=90, key="tiny2")
    backend = fake_gpu("sm_89", autotune=True)
    backend.prepare(a)
    plan = backend.runners["fp16"][1].cfg.plan
    assert plan.kernel == "bevpool_v3_fp16_dram" and plan.block[0] == 128
    backend.prepare(b)  # another calibration: the choice (shape class) and the engine are kept
    again = fake_gpu("sm_89", autotune=True)
    again.prepare(a)
    assert measured == ["fp16"] and backend.engine_loads == 1 and again.cache.hits == 1
