"""The cuda backend on rigs unlike the shipped one (test/rig_variants.py): every variant (among
them cameras of mixed image sizes that keep their field of view), FP16 and FP8, launch autotuning
off and on, whole frames (staging, conversion, kernel, epilogue) against the FP64 reference with
the output poisoned first; the mixed sizes through a TensorRT engine too. Odd channel counts run
the vec-1/vec-2 tiles; the rig that sees nothing must publish zeros."""
from __future__ import annotations

import numpy as np
import pytest
import rig_variants as V
from test_gpu_frame_gpu import assert_matches

from bevpool_ros.backends.staging import split_cameras
from bevpool_ros.reference import pool_reference
from bevpool_ros.scatter_map import build_scatter_map

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def choice_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("choices")  # autotune measures afresh, never reads the user's records


@pytest.mark.parametrize("autotune", [False, True], ids=["fixed", "autotune"])
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
@pytest.mark.parametrize("name", sorted(V.VARIANTS))
def test_cuda_backend_equals_the_reference_on_every_rig(name, precision, autotune, choice_dir):
    from bevpool_ros.backends.cuda import CudaBackend
    from bevpool_ros.backends.gpu.choices import ChoiceStore
    from bevpool_ros.kernels import table as L

    r = V.rig(name)
    smap = build_scatter_map(r)
    be = CudaBackend(precision, autotune=autotune, choice_store=ChoiceStore(choice_dir))
    try:
        be.prepare(smap)
        kernel = L.V3_KERNELS[be.plan.kernel]
        assert r.channels % kernel.vec == 0 and kernel.precision == precision
        for seed in range(2):  # the second frame replays the captured graph
            d, f = V.random_inputs(r, seed)
            d32, f32 = d.astype(np.float32), f.astype(np.float32)
            out = np.full(smap.bev_shape, np.nan, np.float32)
            be.pool_cameras(split_cameras(d32, f32), out)
            if precision == "fp16":
                d, f = d32.astype(np.float16), f32.astype(np.float16)
            assert_matches(out, smap, precision, d, f, f"{name} {precision} {kernel.name}")
            if not smap.num_points:
                assert not out.any()
    finally:
        be.close()


@pytest.mark.parametrize("name", V.ODD_CHANNEL_VARIANTS)
def test_narrow_kernels_at_every_schedule(name):
    """The vec-1/vec-2 rows at several team sizes and block sizes, raw kernel launches."""
    from test_cuda_backend_gpu import Prepared

    from bevpool_ros.device.runtime import get_runtime
    from bevpool_ros.kernels import table as L

    smap = build_scatter_map(V.rig(name))
    p = Prepared(get_runtime(0), smap, seed=11)
    for kernel in ("bevpool_v3_fp16_v1", "bevpool_v3_fp8_v1", "bevpool_v3_fp16_v2", "bevpool_v3_fp8_v2"):
        info = L.V3_KERNELS[kernel]
        if smap.channels % info.vec:
            continue
        for k_min, threads in ((4, 64), (16, 256), (64, 512)):
            assert p.check("v3", info.precision, info.acc, f"{name}-{kernel}-{k_min}-{threads}",
                           kernel=kernel, k_min=k_min, threads=threads) is not None


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_tensorrt_backend_keeps_every_cameras_field_of_view(precision, tmp_path):
    """The mixed-sizes rig (a 1920x1080 camera with the 1600x900 ones' field of view, a 4:3 one,
    one with its own resize and crop) through a TensorRT engine, against the FP64 reference; the
    cuda backend runs it in the test above."""
    from bevpool_ros.backends import BackendUnavailable
    from bevpool_ros.backends.tensorrt import TensorRTBackend

    r = V.rig("mixed_sizes_nuscenes")
    smap = build_scatter_map(r)
    try:
        be = TensorRTBackend(precision, cache_dir=tmp_path)
    except BackendUnavailable as e:
        pytest.skip(f"tensorrt backend unavailable on this GPU machine: {e}")
    try:
        be.prepare(smap)
        d, f = (a.astype(np.float32) for a in V.random_inputs(r, 7))
        out = be.pool(d, f)
        ref = pool_reference(d, f, smap)
        assert np.isfinite(out).all() and np.abs(ref).max() > 0
        if precision == "fp16":  # the tolerance test_tensorrt_backend.py holds the engine to
            np.testing.assert_allclose(out, ref, atol=2e-2, rtol=2e-2)
        else:
            from bevpool_ros.kernels.precision import fp8_within_tolerance

            assert fp8_within_tolerance(out, ref, pool_reference(np.abs(d), np.abs(f), smap))[0]
    finally:
        be.close()
