"""Depth images expanded on the GPU (bevconv_expand_depth_* in the frame graph) against their twin.

Every stream dtype the expansion writes (float16 alone or beside float16 distributions, float32
beside float32 distributions, E4M3 codes beside E4M3 distributions), one-hot and Gaussian,
copied and mapped host memory: the expanded slots read back from the device after the buffers
were poisoned (0xFF: NaN in every dtype), compared with ``metric_depth.depth_distribution``, and
the pooled grid against the FP64 reference of the twin's distributions. Then the node's own
path: the PoolingWorker thread, depth images mixed with distribution cameras, a calibration change.
"""
from __future__ import annotations

import numpy as np
import pytest
from test_depth_image import metric_frame
from test_gpu_frame_gpu import assert_matches, backend, pool_through_worker

from bevpool_ros.kernels import fp8 as fp8_codec
from bevpool_ros.metric_depth import DepthBins, DepthSpec
from bevpool_ros.scatter_map import scatter_map_for
from bevpool_ros.workloads import base_rig

pytestmark = pytest.mark.gpu

IMAGES = (0, 2, 3)  # depth-image cameras: two runs of slots
# (precision, wire of the distribution cameras or None for an all-image rig)
LAYOUTS = [("fp16", None), ("fp16", np.float16), ("fp16", np.float32), ("fp8", None), ("fp8", np.float32),
           ("fp8", "e4m3")]


def depth_stream(be, wire) -> np.ndarray:
    """The depth stream as the kernels saw it before conversion, read back from where it lives."""
    f = be.frame
    if f.host_memory == "mapped":
        return f.staging.slots("depth", wire).copy()
    buf = f._kin["depth"] if np.dtype(wire) == f.kin else f._raw["depth"]
    out = np.empty(f.staging.shapes["depth"], wire)
    be.rt.stream.d2h(out.ctypes.data, buf, out.nbytes)
    be.rt.stream.synchronize()
    return out


def poison(be) -> None:
    f = be.frame
    if f.host_memory == "mapped":
        for region in f.staging.regions.values():
            region.fill(0xFF)
        return
    for buf in (*f._kin.values(), *f._raw.values()):
        be.rt.stream.memset8(buf, 0xFF, buf.nbytes)
    be.rt.stream.synchronize()


@pytest.mark.parametrize("host_memory", ["copy", "mapped"])
@pytest.mark.parametrize("mode", ["one_hot", "gaussian"])
@pytest.mark.parametrize("precision, wire", LAYOUTS)
def test_device_expansion_is_the_twin(precision, wire, mode, host_memory):
    rig = base_rig()
    smap = scatter_map_for(rig)
    spec = DepthSpec(DepthBins.of_rig(rig), mode, 0.9)
    be = backend(precision, host_memory=host_memory)
    be.prepare(smap)
    images = tuple(range(rig.depth_shape[0])) if wire is None else IMAGES
    scale = 16.0 if wire == "e4m3" else 1.0
    be.fp8_scales = (scale, scale)
    for seed in range(2):
        cameras, dense, feat = metric_frame(rig, seed, images, spec)
        seen_d, seen_f = dense.astype(np.float64), feat.astype(np.float64)
        if wire == "e4m3":  # distribution cameras send codes (value x 16); depth images expand to codes too
            cameras = [(d if n in images else fp8_codec.quantize(d, scale), fp8_codec.quantize(f, scale))
                       for n, (d, f) in enumerate(cameras)]
            seen_f = fp8_codec.decode(fp8_codec.quantize(feat, scale), np.float64) / scale
            seen_d = fp8_codec.decode(fp8_codec.quantize(dense, scale), np.float64) / scale
        elif wire is not None:
            cameras = [(d if n in images else d.astype(wire), f.astype(wire)) for n, (d, f) in enumerate(cameras)]
        else:
            cameras = [(d, f.astype(np.float16)) for d, f in cameras]
        if precision == "fp16":
            seen_d, seen_f = seen_d.astype(np.float16), seen_f.astype(np.float16)
        be.pool_cameras(cameras)  # capture; then poison everything the expansion must overwrite
        poison(be)
        out = np.full(smap.bev_shape, np.nan, np.float32)
        be.pool_cameras(cameras, out=out)
        stream_dtype = np.uint8 if wire == "e4m3" else (wire or np.float16)
        got = depth_stream(be, stream_dtype)[list(images)]
        want = dense[list(images)]
        what = f"{precision} {wire} {mode} {host_memory} seed {seed}"
        if wire == "e4m3":  # one-hot exact; Gaussian: an ulp of float32 may move a code by one
            codes = fp8_codec.quantize(want, scale).astype(int)
            assert np.abs(got.astype(int) - codes).max() <= (0 if mode == "one_hot" else 1), what
        elif mode == "one_hot":
            np.testing.assert_array_equal(got, want.astype(stream_dtype), err_msg=what)
        else:  # device expf vs numpy's: an ulp of float32 before the cast
            np.testing.assert_allclose(got.astype(np.float32), want, rtol=2 ** -10 if stream_dtype == np.float16
                                       else 1e-6, atol=1e-7, err_msg=what)
        assert_matches(out, smap, precision, seen_d, seen_f, what)
    assert len(be.frame._graphs) == 2  # one per output array (ours, the caller's): the layout never changed
    be.close()


def test_pooling_worker_with_depth_images_and_a_calibration_change():
    """The node's pooling thread: MetricDepth and distribution cameras in one set, a CameraInfo
    change mid-stream (the worker re-prepares in its thread), grids against the FP64 reference."""
    rig = base_rig()
    spec = DepthSpec(DepthBins.of_rig(rig), "gaussian", 0.7)
    be = backend("fp16")
    frames = [metric_frame(rig, 10 + i, IMAGES, spec) for i in range(4)]

    def check(i, r):
        _, dense, feat = frames[i]
        assert_matches(r.bev, be.smap, "fp16", dense.astype(np.float16), feat.astype(np.float16), f"frame {i}")

    pool_through_worker(be, rig, "float32", lambda i: frames[i][0], check)
