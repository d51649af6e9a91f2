"""E4M3 codes in the pooling thread: a NaN code is the node's ``non_finite`` drop on every
backend, and a set mixing codes with float tensors is pooled (GPU backends take codes raw and
refuse them mixed with floats in one stream: the worker decodes them for such a set)."""
from __future__ import annotations

import numpy as np
import pytest

from bevpool_ros import fp8
from bevpool_ros.backends.cpu import CpuBackend
from bevpool_ros.backends.staging import ALL_WIRE
from bevpool_ros.cameras.calibration import LiveCalibration
from bevpool_ros.cameras.sync import CameraSet
from bevpool_ros.node.pooling import PoolingWorker
from bevpool_ros.reference import pool_reference
from bevpool_ros.scatter_map import build_scatter_map
from bevpool_ros.synthetic import SyntheticScene


class RawCodesCpuBackend(CpuBackend):
    """The cpu backend with a GPU backend's input contract: codes taken raw (uint8 wire),
    values checked by the backend, codes mixed with floats in one stream refused."""

    wire_dtypes = ALL_WIRE
    checks_values_on_device = True


def run_set(backend, rig, depth, feats):
    drops, results = [], []
    worker = PoolingWorker(backend, LiveCalibration(rig), results.append,
                           lambda reason, detail: drops.append((reason, detail)))
    worker.prepare()
    frames = {c.name: {"depth": (1, depth[n]), "feat": (1, feats[n])}
              for n, c in enumerate(rig.cameras)}
    worker.process(CameraSet(frames, tuple(c.name for c in rig.cameras), (), 0.0, 0.0, True))
    return drops, results


@pytest.fixture(scope="module")
def scene(nuscenes_rig):
    depth, feat = SyntheticScene(nuscenes_rig).frame(0)
    return depth, feat


def test_a_nan_code_mixed_with_float_cameras_is_non_finite(nuscenes_rig, scene):
    depth, feat = scene
    codes = fp8.encode(feat[2])
    codes[1, 2, 3] = 0x7F  # an E4M3 NaN code
    feats = [codes if n == 2 else feat[n] for n in range(len(feat))]
    drops, results = run_set(RawCodesCpuBackend(), nuscenes_rig, depth, feats)
    assert not results and [r for r, _ in drops] == ["non_finite"], drops
    assert "NaN codes" in drops[0][1]


def test_codes_mixed_with_float_cameras_are_pooled(nuscenes_rig, scene):
    depth, feat = scene
    codes = fp8.encode(feat[2])
    feats = [codes if n == 2 else feat[n] for n in range(len(feat))]
    drops, results = run_set(RawCodesCpuBackend(), nuscenes_rig, depth, feats)
    assert not drops and len(results) == 1
    sent = feat.copy()
    sent[2] = fp8.decode(codes, np.float32)
    ref = pool_reference(depth, sent, build_scatter_map(nuscenes_rig))
    np.testing.assert_allclose(results[0].bev, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "fp8"])
@pytest.mark.parametrize("mixed", [True, False])
def test_cuda_nan_codes_are_non_finite(nuscenes_rig, scene, precision, mixed):
    """On the cuda backend: codes mixed with floats (decoded by the worker) and all-code sets
    (checked by the device) both count a NaN code as non_finite, never backend_input_error."""
    from bevpool_ros.backends.cuda import CudaBackend

    depth, feat = scene
    codes = [fp8.encode(f) for f in feat]
    codes[2][1, 2, 3] = 0xFF  # negative NaN code
    feats = [codes[n] if (n == 2 or not mixed) else feat[n] for n in range(len(feat))]
    be = CudaBackend(precision)
    try:
        drops, results = run_set(be, nuscenes_rig, depth, feats)
    finally:
        be.close()
    assert not results and [r for r, _ in drops] == ["non_finite"], drops
