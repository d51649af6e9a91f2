"""The FP64 reference and the CPU backend against a brute-force np.add.at, on random maps."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bevpool_ros.backends import CpuBackend, InputError, create_backend
from bevpool_ros.reference import pool_bruteforce, pool_reference
from bevpool_ros.scatter_map import scatter_map_from_ranks
from bevpool_ros.workloads import random_inputs


@st.composite
def random_maps(draw):
    n, d, h, w = (draw(st.integers(1, 3)) for _ in range(4))
    z, y, x = draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    c = draw(st.integers(1, 9))
    P = draw(st.integers(0, 60))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rd = rng.integers(0, n * d * h * w, P)
    rf = rng.integers(0, n * h * w, P)
    # skewed cells: a few hot cells collect most points, like a camera rig
    rb = np.minimum(rng.geometric(0.3, P) - 1, z * y * x - 1)
    order = np.argsort(rb, kind="stable")
    smap = scatter_map_from_ranks(rd[order], rf[order], rb[order], depth_shape=(n, d, h, w),
                                  grid_shape=(z, y, x), channels=c)
    return smap, seed


@settings(max_examples=150, deadline=None)
@given(random_maps())
def test_reference_and_cpu_match_bruteforce(case):
    smap, seed = case
    depth, feat = random_inputs(smap, np.random.default_rng(seed))
    brute = pool_bruteforce(depth, feat, smap)
    ref = pool_reference(depth, feat, smap)
    np.testing.assert_allclose(ref, brute, rtol=1e-12, atol=1e-12)
    cpu = CpuBackend()
    cpu.prepare(smap)
    out = cpu.pool(depth, feat)
    assert out.shape == smap.bev_shape and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    empty = np.ones(smap.num_cells, bool)
    empty[smap.ranks_bev] = False
    assert not out.reshape(smap.num_cells, -1)[empty].any()  # empty cells are exactly zero


def test_cpu_matches_reference_on_canonical(canonical_map):
    rng = np.random.default_rng(1)
    depth, feat = random_inputs(canonical_map, rng)
    cpu = create_backend("cpu")
    cpu.prepare(canonical_map)
    np.testing.assert_allclose(cpu.pool(depth, feat), pool_reference(depth, feat, canonical_map),
                               atol=1e-4, rtol=1e-5)
    # float16 inputs are accepted and widened
    out16 = cpu.pool(depth.astype(np.float16), feat.astype(np.float16))
    ref16 = pool_reference(depth.astype(np.float16), feat.astype(np.float16), canonical_map)
    np.testing.assert_allclose(out16, ref16, atol=1e-3)


def test_reference_hand_computed():
    smap = scatter_map_from_ranks([0, 1, 2], [0, 1, 0], [1, 1, 3], depth_shape=(1, 1, 1, 3),
                                  grid_shape=(1, 1, 4), channels=2)
    depth = np.array([2.0, 3.0, 0.5], np.float32).reshape(1, 1, 1, 3)
    feat = np.array([[1.0, 10.0], [100.0, 1000.0], [7.0, 7.0]], np.float32).reshape(1, 1, 3, 2)
    out = pool_reference(depth, feat, smap).reshape(4, 2)
    np.testing.assert_array_equal(out, [[0, 0], [302, 3020], [0, 0], [0.5, 5]])


@pytest.mark.parametrize("make, message", [
    (lambda d, f: (d[:, :-1], f), "depth: shape"),
    (lambda d, f: (d, f[..., :-1]), "feat: shape"),
    (lambda d, f: (d.astype(np.float64), f), "depth: dtype"),
    (lambda d, f: (d, f.astype(np.int32)), "feat: dtype"),
    (lambda d, f: (d.tolist(), f), "numpy array"),
    (lambda d, f: (np.where(d > 0.5, np.nan, d).astype(np.float32), f), "NaN or Inf"),
    (lambda d, f: (d, np.where(f > 0.9, np.inf, f).astype(np.float32)), "NaN or Inf"),
])
def test_cpu_rejects_bad_input(canonical_map, make, message):
    cpu = CpuBackend()
    cpu.prepare(canonical_map)
    depth, feat = random_inputs(canonical_map, np.random.default_rng(2))
    with pytest.raises(InputError, match=message):
        cpu.pool(*make(depth, feat))


def test_pool_before_prepare_is_an_error():
    with pytest.raises(RuntimeError, match="prepare"):
        CpuBackend().pool(np.zeros(1), np.zeros(1))


def test_unknown_backend_and_precision():
    with pytest.raises(ValueError, match="backend"):
        create_backend("opencl")
    with pytest.raises(ValueError, match="precision"):
        create_backend("cpu", precision="int4")
