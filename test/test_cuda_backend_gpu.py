"""GPU tests (run on the H200 by scripts/gpu_check.sh): every variant x precision x workload
against the FP64 reference on fresh random inputs, output poisoned (NaN bytes) before every run,
repeated runs bit-identical, a random-rig fuzz for schedule bugs, and the cuda backend itself.

Tolerances: FP16 paths atol 1e-2 (as the source). FP8: the documented tolerance
(precision_select.FP8_ATOL/FP8_RTOL against the FP64 reference on the original inputs) and, for
the kernel arithmetic alone, 1e-2 + sum|d*f| / 64 against the reference on the dequantised inputs.
Actual errors are appended to $BEVPOOL_GPU_REPORT (JSON lines) when set.
"""
from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

from bevpool_ros.backends import InputError  # noqa: E402
from bevpool_ros.reference import pool_reference  # noqa: E402
from bevpool_ros.workloads import WORKLOADS, get_workload  # noqa: E402

FP16_ATOL = 1e-2
# __half2/__hfma2 accumulation option: each lane sums up to K points in FP16 before the FP32
# team reduction, so its error grows with K (docs/kernels.md); it is not the default.
FP16_H2ACC_ATOL = 1e-2  # + max(2e-3 * K, (K + 1) * 2^-11 * the cell's sum of |products|)
CASES = [("v2", "fp16", "half2"), ("v2do", "fp16", "half2"), ("v3", "fp16", "half2"),
         ("v3", "fp16", "f32"), ("v3", "fp8", "half2")]


def report(record: dict) -> None:
    path = os.environ.get("BEVPOOL_GPU_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


@pytest.fixture(scope="session")
def rt():
    from bevpool_ros.device.runtime import get_runtime

    return get_runtime(0)


class Prepared:
    """One map on the device plus fresh random inputs and their references."""

    def __init__(self, rt, smap, seed):
        from bevpool_ros.kernels import fp8

        self.rt, self.smap, self.seed = rt, smap, seed
        rng = np.random.default_rng(seed)
        d = rng.random(smap.depth_shape)
        f = rng.uniform(-1.0, 1.0, smap.feat_shape)
        self.d16, self.f16 = d.astype(np.float16), f.astype(np.float16)
        s_d, s_f = fp8.pow2_scale(d), fp8.pow2_scale(f)
        self.d8, self.f8 = fp8.quantize(d, s_d), fp8.quantize(f, s_f)
        self.scale8 = 1.0 / (s_d * s_f)
        self.ref16 = pool_reference(self.d16, self.f16, smap)
        self.abs16 = pool_reference(np.abs(self.d16), np.abs(self.f16), smap)
        self.ref64 = pool_reference(d, f, smap)
        self.abs64 = pool_reference(np.abs(d), np.abs(f), smap)
        dd, fd = fp8.decode(self.d8), fp8.decode(self.f8)
        self.ref8 = pool_reference(dd, fd, smap) * self.scale8
        self.abs8 = pool_reference(np.abs(dd), np.abs(fd), smap) * self.scale8

    def check(self, variant, precision, acc, label, kernel=None, k_min=None, threads=None):
        from bevpool_ros.device.operator import operator_for
        from bevpool_ros.kernels.precision import fp8_within_tolerance
        from bevpool_ros.kernels.table import UnsupportedShape

        try:
            op = operator_for(self.rt, self.smap, variant, precision, acc=acc, kernel=kernel, k_min=k_min,
                              threads=threads, out_scale=self.scale8 if precision == "fp8" else 1.0)
        except UnsupportedShape:
            return None
        ins = (self.d16, self.f16) if precision == "fp16" else (self.d8, self.f8)
        try:
            a = op.run(*ins)  # output poisoned with 0xFF bytes (NaN) before the launch
            b = op.run(*ins)
        finally:
            op.free()
        plan = op.plan
        assert np.isfinite(a).all(), f"{label} {plan.kernel}: unwritten (poisoned) or non-finite cells"
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{label} {plan.kernel}: runs differ"
        rec = {"case": label, "variant": variant, "precision": precision, "acc": acc, "kernel": plan.kernel,
               "seed": self.seed, "points": self.smap.num_points, "C": self.smap.channels,
               "max_interval": int(self.smap.interval_lengths.max()) if self.smap.num_intervals else 0}
        if precision == "fp16":
            err = np.abs(a - self.ref16)
            rec["max_abs_err"] = float(err.max())
            report(rec)
            tol = FP16_ATOL
            if variant == "v3" and acc == "half2":
                # half2 option: a lane sums K points in FP16, each step rounding by at most 2^-11 of
                # its partial sum, which is at most the cell's sum of |products|: the error grows with
                # K and with the cell's magnitude (a fixed 2e-3 * K failed one large-valued H200 fuzz rig)
                K = op.schedule.points_per_slot
                tol = FP16_H2ACC_ATOL + np.maximum(2e-3 * K, (K + 1) * 2.0**-11 * self.abs16)
                rec["points_per_slot"] = K
            bad = err > tol
            assert not bad.any(), (f"{label} {plan.kernel}: max err {err.max():.4g}, "
                                   f"{int(bad.sum())} cells over their tolerance")
        else:
            ok, err = fp8_within_tolerance(a, self.ref64, self.abs64)
            kerr = np.abs(a.astype(np.float64) - self.ref8)
            rec.update(max_abs_err=err, max_abs_err_vs_dequantised=float(kerr.max()),
                       max_rel_to_abs_sum=float((np.abs(a - self.ref64) / np.maximum(self.abs64, 1e-9)).max()))
            report(rec)
            assert ok, f"{label}: FP8 error {err:.4g} outside the documented tolerance"
            assert np.all(kerr <= 1e-2 + self.abs8 / 64), f"{label}: FP8 kernel error {kerr.max():.4g}"
        return rec


_prepared = {}


def prepared(rt, name) -> Prepared:
    if name not in _prepared:
        _prepared[name] = Prepared(rt, get_workload(name), int(np.random.SeedSequence().entropy % 2**32))
    return _prepared[name]


@pytest.mark.parametrize("variant,precision,acc", CASES)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_variant_matches_fp64_reference(rt, workload, variant, precision, acc):
    prepared(rt, workload).check(variant, precision, acc, workload)


def _v3_kernels():
    from bevpool_ros.kernels.table import V3_KERNELS

    return sorted(V3_KERNELS)


@pytest.mark.parametrize("kernel", _v3_kernels())
@pytest.mark.parametrize("workload", ["canonical", "wide_c256"])
def test_every_v3_kernel_and_launch_shape(rt, workload, kernel):
    """Every V3 entry point (prefetch twins, depth-pair twins, generic tiles) at several schedules."""
    from bevpool_ros.kernels.table import V3_KERNELS

    info = V3_KERNELS[kernel]
    p = prepared(rt, workload)
    for k_min, threads in ((4, 128), (16, 256), (32, 512)):
        p.check("v3", info.precision, info.acc, f"{workload}-{kernel}-{k_min}-{threads}", kernel=kernel,
                k_min=k_min, threads=threads)


def random_rig_map(rng):
    from bevpool_ros.rig import Axis
    from bevpool_ros.scatter_map import build_scatter_map
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    half = float(rng.uniform(10, 60))
    step = float(rng.choice([0.2, 0.4, 0.5, 0.8, 1.0, 1.6]))
    n_cam = int(rng.integers(1, len(rig.cameras) + 1))
    cams = tuple(rng.permutation(np.array(rig.cameras, dtype=object))[:n_cam])
    rig = replace(rig, name="fuzz", cameras=cams,
                  channels=int(rng.choice([1, 3, 6, 8, 16, 17, 30, 40, 64, 80, 96, 100, 128, 160])),
                  depth_step=float(rng.choice([0.5, 1.0, 2.0])),
                  x=Axis("x", -half, half, step), y=Axis("y", -half * rng.uniform(0.5, 1), half, step))
    return build_scatter_map(rig)


def random_skewed_map(rng):
    from bevpool_ros.scatter_map import scatter_map_from_ranks

    cells = (1, int(rng.integers(4, 60)), int(rng.integers(4, 60)))
    n_cells = int(np.prod(cells))
    points = int(rng.integers(1, 20000))
    hot = int(rng.integers(0, points))  # one cell takes up to all the points
    bev = np.concatenate([rng.integers(0, n_cells, points - hot), np.full(hot, rng.integers(0, n_cells))])
    order = np.argsort(bev, kind="stable")
    n_depth, rows = int(rng.integers(1, 5000)), int(rng.integers(1, 3000))
    return scatter_map_from_ranks(rng.integers(0, n_depth, points)[order], rng.integers(0, rows, points)[order],
                                  bev[order], depth_shape=(1, 1, 1, max(n_depth, rows)), grid_shape=cells,
                                  channels=int(rng.choice([1, 2, 3, 4, 8, 12, 16, 18, 20, 32, 80, 128, 256])))


PAIR_KERNELS = ("bevpool_v3_fp16_l2_pf_dp", "bevpool_v3_fp8_v8_pf_dp", "bevpool_v3_fp8_c80_pf_dp")


def test_depth_pair_kernels_on_a_pair_rich_rig(rt):
    """0.25 m depth bins in 0.8 m cells: most points share their feature row with a neighbouring
    bin in the same cell, so most entries are pairs (summed depth, one row load)."""
    from bevpool_ros.rig import Axis
    from bevpool_ros.scatter_map import build_scatter_map
    from bevpool_ros.workloads import base_rig

    rig = replace(base_rig(), name="pairs", depth_step=0.25, x=Axis("x", -25.6, 25.6, 0.8),
                  y=Axis("y", -25.6, 25.6, 0.8))
    p = Prepared(rt, build_scatter_map(rig), 7)
    for kernel in PAIR_KERNELS:
        info_precision = "fp16" if "fp16" in kernel else "fp8"
        for k_min, threads in ((8, 128), (64, 256)):
            p.check("v3", info_precision, "f32" if info_precision == "fp16" else "half2",
                    f"pairs-{kernel}-{k_min}-{threads}", kernel=kernel, k_min=k_min, threads=threads)
    from bevpool_ros.kernels.planning import v3_launch

    sched = v3_launch(p.smap, "fp16", "L2-resident", kernel=PAIR_KERNELS[0], k_min=8, threads=128).schedule(p.smap)
    assert (sched.pidx[:, 1] < 0).sum() > 0.2 * p.smap.num_points  # the map really has pairs


@pytest.mark.parametrize("i", range(16))
def test_random_rig_fuzz(rt, i):
    """A new random rig per run; a failure names its seed (``fuzz<i>-seed<seed>``), and
    BEVPOOL_FUZZ_SEED=<seed> replays it (one 2026-12-02 failure on the H200 lost its seed)."""
    seed = os.environ.get("BEVPOOL_FUZZ_SEED")
    seed = int(seed) if seed else int(np.random.default_rng().integers(2**31))
    rng = np.random.default_rng(seed)
    smap = random_rig_map(rng) if i % 2 == 0 else random_skewed_map(rng)
    p = Prepared(rt, smap, seed)
    for variant, precision, acc in CASES:
        p.check(variant, precision, acc, f"fuzz{i}-seed{seed}")
    for kernel in PAIR_KERNELS:
        prec = "fp16" if "fp16" in kernel else "fp8"
        for k_min in (8, 32):
            p.check("v3", prec, "f32" if prec == "fp16" else "half2", f"fuzz{i}-seed{seed}-{kernel}-{k_min}",
                    kernel=kernel, k_min=k_min)


# ---- the backend ----------------------------------------------------------------------------
def test_backend_fp16_frames(rt):
    from bevpool_ros.backends.cuda import CudaBackend

    smap = get_workload("canonical")
    be = CudaBackend("fp16")
    be.prepare(smap)
    rng = np.random.default_rng()
    for _ in range(3):  # the graph replays over fresh staging each frame
        d = rng.random(smap.depth_shape, dtype=np.float32)
        f = rng.uniform(-1, 1, smap.feat_shape).astype(np.float32)
        out = be.pool(d, f)
        ref = pool_reference(d.astype(np.float16), f.astype(np.float16), smap)
        assert out.dtype == np.float32 and out.shape == smap.bev_shape
        assert np.abs(out - ref).max() <= FP16_ATOL
    desc = be.describe()
    assert desc["kernel"].startswith("bevpool_v3_fp16") and desc["regime"] in ("L2-resident", "DRAM-bound")
    be.close()


def test_backend_rejects_bad_inputs_before_launch(rt):
    from bevpool_ros.backends.cuda import CudaBackend
    from bevpool_ros.scatter_map import ScatterMapError

    smap = get_workload("small")
    be = CudaBackend("fp16")
    be.prepare(smap)
    d = np.ones(smap.depth_shape, np.float32)
    f = np.ones(smap.feat_shape, np.float32)
    with pytest.raises(InputError):
        be.pool(d[..., :-1], f)
    with pytest.raises(InputError):
        be.pool(d.astype(np.int32), f)
    bad = f.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(InputError):
        be.pool(d, bad)
    broken = replace(smap, ranks_feat=smap.ranks_feat.copy())
    broken.ranks_feat[0] = 10**8
    with pytest.raises(ScatterMapError):
        be.prepare(broken)
    be.close()


def test_backend_fp8_float_and_raw_inputs(rt):
    from bevpool_ros.backends.cuda import CudaBackend
    from bevpool_ros.kernels import fp8
    from bevpool_ros.kernels.precision import fp8_within_tolerance

    smap = get_workload("canonical")
    be = CudaBackend("fp8")
    be.prepare(smap)
    rng = np.random.default_rng()
    d = rng.random(smap.depth_shape)
    f = rng.uniform(-1, 1, smap.feat_shape)
    out = be.pool(d.astype(np.float32), f.astype(np.float32))
    assert out.dtype == np.float16
    ok, err = fp8_within_tolerance(out, pool_reference(d, f, smap), pool_reference(np.abs(d), np.abs(f), smap))
    assert ok, err
    s_d, s_f = 64.0, 8.0
    be.fp8_scales = (s_d, s_f)
    raw = be.pool(fp8.quantize(d, s_d), fp8.quantize(f, s_f))
    assert np.isfinite(raw).all()
    with pytest.raises(InputError):
        be.pool(np.full(smap.depth_shape, 0x7F, np.uint8), fp8.quantize(f, s_f))
    be.close()


def test_backend_auto_precision_is_cached(rt, tmp_path, monkeypatch):
    """precision: auto compares whole frames (staging, conversion, kernel, copies) and keeps its
    answer as a typed record; a second backend reads it instead of measuring."""
    from dataclasses import asdict

    from bevpool_ros.backends.cuda import CudaBackend

    monkeypatch.setenv("BEVPOOL_KERNEL_CACHE", str(tmp_path / "kc"))
    smap = get_workload("canonical")
    be = CudaBackend("auto")
    be.prepare(smap)
    rec = be.auto_record
    assert be.precision in ("fp16", "fp8") and rec is not None
    assert be.precision == ("fp8" if rec.fp8_within_tolerance and rec.fp8_frame_us < rec.fp16_frame_us else "fp16")
    report({"case": "auto", **asdict(rec)})
    be2 = CudaBackend("auto")
    be2.prepare(smap)
    assert be2.precision == be.precision and be2.auto_record is None  # from the cache
    d = np.random.default_rng().random(smap.depth_shape, dtype=np.float32)
    assert np.isfinite(be2.pool(d, np.ones(smap.feat_shape, np.float32))).all()
    be.close()
    be2.close()
