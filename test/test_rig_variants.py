"""Rigs unlike the shipped one (test/rig_variants.py), on the CPU: each loads from the YAML a user
would write, its scatter map builds and validates, the cpu backend equals the FP64 reference, and
the V3 kernel's twin (the schedule and reduction the GPU runs, with the launch geometry chosen for
the rig's channel count) equals it too."""
from __future__ import annotations

import numpy as np
import pytest
import rig_variants as V

from bevpool_ros.backends import CpuBackend
from bevpool_ros.backends.staging import split_cameras
from bevpool_ros.device.autotune import candidate_kernels
from bevpool_ros.kernels import table as L
from bevpool_ros.kernels.planning import plan_for
from bevpool_ros.kernels.twin import v3_kernel_twin
from bevpool_ros.reference import pool_bruteforce, pool_reference
from bevpool_ros.rig_yaml import load_rig
from bevpool_ros.scatter_map import build_scatter_map, frustum_points_ego

NAMES = sorted(V.VARIANTS)


@pytest.fixture(scope="module", params=NAMES)
def variant(request):
    r = V.rig(request.param)
    return r, build_scatter_map(r)


def test_the_set_covers_the_general_case():
    rigs = [V.rig(n) for n in NAMES]
    assert {r.num_cameras for r in rigs} >= {1, 2, 3, 4, 5, 6, 8}
    assert {r.channels for r in rigs} >= {1, 3, 17, 64, 96, 100, 200, 256, 384}
    assert min(r.num_depth_bins for r in rigs) == 1 and max(r.num_depth_bins for r in rigs) >= 120
    assert any(r.depth_step % 1 for r in rigs)                         # bins that are not whole metres
    assert any(r.grid_shape[0] > 1 for r in rigs)                      # Z layers
    assert any(r.grid_shape[1] != r.grid_shape[2] for r in rigs)       # non-square grids
    assert any(r.x.lower + r.x.upper != 0 for r in rigs)               # grids off the ego origin
    assert len({r.feature_stride for r in rigs}) >= 3 and any(r.crop_top for r in rigs)
    assert any(len({(c.width, c.height) for c in r.cameras}) > 1 for r in rigs)  # sizes per camera
    # a camera that sees none of its grid, and a rig that sees nothing at all
    blind = [build_scatter_map(V.rig(n)).num_points == 0 for n in NAMES]
    assert sum(blind) == 1 and "blind_c80" == NAMES[blind.index(True)]
    assert 0 in cameras_seen(V.rig("penta_c96_d120"))


def test_inspect_names_the_cameras_that_see_nothing(tmp_path):
    import json
    import subprocess
    import sys

    path = V.write_rig("penta_c96_d120", tmp_path)
    run = lambda *a: subprocess.run([sys.executable, "-m", "bevpool_ros.cli.inspect", str(path), *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    r = run()
    assert r.returncode == 0, r.stderr
    blind = [c.name for c, n in zip(V.rig("penta_c96_d120").cameras, cameras_seen(V.rig("penta_c96_d120"))) if not n]
    assert len(blind) == 2 and all(f"{name} 0 (sees none of the grid)" in r.stdout for name in blind)
    s = json.loads(run("--json").stdout)
    assert sum(s["cameras"].values()) == s["points"] and [s["cameras"][b] for b in blind] == [0, 0]


def cameras_seen(r):
    """Points each camera contributes to its grid."""
    return build_scatter_map(r).points_per_camera().tolist()


def test_yaml_file_round_trip(variant, tmp_path):
    r, smap = variant
    loaded = load_rig(V.write_rig(r.name, tmp_path))
    assert loaded == r and loaded.digest() == r.digest()
    assert build_scatter_map(loaded).key == smap.key


def test_map_geometry_is_the_rig(variant):
    r, smap = variant
    assert smap.validate() is smap
    assert smap.depth_shape == r.depth_shape and smap.grid_shape == r.grid_shape and smap.channels == r.channels
    assert smap.frustum_points == int(np.prod(r.depth_shape))
    if smap.num_points:  # every kept point lies in the cell it is assigned to
        pts = frustum_points_ego(r).reshape(-1, 3)[smap.ranks_depth]
        Z, Y, X = r.grid_shape
        cell = np.stack([smap.ranks_bev // (Y * X), smap.ranks_bev // X % Y, smap.ranks_bev % X], 1)
        lower = np.array([r.z.lower, r.y.lower, r.x.lower])
        step = np.array([r.z.step, r.y.step, r.x.step])
        inside = (pts[:, ::-1] >= lower + cell * step - 1e-9) & (pts[:, ::-1] < lower + (cell + 1) * step + 1e-9)
        assert inside.all()


@pytest.mark.parametrize("wire", [np.float32, np.float16])
def test_cpu_backend_equals_the_fp64_reference(variant, wire):
    r, smap = variant
    d, f = (a.astype(wire) for a in V.random_inputs(r, seed=len(r.name)))
    ref = pool_reference(d, f, smap)
    np.testing.assert_allclose(pool_bruteforce(d, f, smap), ref, atol=1e-9)
    be = CpuBackend()
    be.prepare(smap)
    out = np.full(smap.bev_shape, np.nan, np.float32)
    be.pool_cameras(split_cameras(d, f), out)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ref).max()))
    if not smap.num_points:
        assert not out.any()  # a rig that sees nothing publishes zeros, not garbage


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
def test_v3_twin_with_every_launch_the_backend_may_pick(variant, precision):
    """The GPU's schedule and reduction order, in FP64, for the default kernel of each regime and
    every autotune candidate (depth-pair kernels included) at this rig's C (narrow tiles for odd C)."""
    r, smap = variant
    d, f = V.random_inputs(r, seed=3)
    ref = pool_reference(d, f, smap)
    kernels = {plan_for(smap, precision, regime)[1].kernel for regime in L.REGIMES}
    kernels |= {k for regime in L.REGIMES for k in candidate_kernels(r.channels, precision, regime)}
    for kernel in sorted(kernels):
        sched, plan = plan_for(smap, precision, "L2-resident", kernel=kernel)
        info = L.V3_KERNELS[plan.kernel]
        assert r.channels % info.vec == 0 and plan.grid[1] * plan.block[0] > 0
        np.testing.assert_allclose(v3_kernel_twin(smap, sched, d, f), ref, atol=1e-9, err_msg=kernel)


@pytest.mark.parametrize("seed", range(12))
def test_random_rigs(seed):
    """Rigs drawn at random (camera count, sizes, bins, grid, C): each valid, cpu == reference."""
    r = V.random_rig(seed)
    smap = build_scatter_map(r)
    d, f = (a.astype(np.float32) for a in V.random_inputs(r, seed))
    be = CpuBackend()
    be.prepare(smap)
    ref = pool_reference(d, f, smap)
    np.testing.assert_allclose(be.pool(d, f), ref, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(ref).max()))


def test_the_example_in_docs_rigs_md_loads_and_sees_its_grid():
    import re
    from pathlib import Path

    import yaml

    from bevpool_ros.rig_yaml import rig_from_dict

    text = (Path(__file__).resolve().parent.parent / "docs" / "rigs.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    r = rig_from_dict(yaml.safe_load(block))
    assert (r.feature_width, r.feature_height, r.grid_shape, r.channels) == (40, 22, (2, 128, 128), 64)
    assert [c.width for c in r.cameras] == [1280, 1344] and all(cameras_seen(r))
