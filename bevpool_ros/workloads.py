"""The Table-1 workload suite, named after the source article's configurations.

Every rig workload is the shipped nuScenes/BEVDet-R50 rig with one documented change
(docs/workloads.md has the numbers). ``blog49`` is not a rig: it reproduces the article's
canonical working set (~209K points, C=80, one feature row per point, 200x200 output, ~49 MB
at FP16 features) with a distance-decaying point density.
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import numpy as np

from .paths import default_rig_path
from .rig import Axis, Rig
from .rig_yaml import load_rig
from .scatter_map import ScatterMap, build_scatter_map, scatter_map_from_ranks

# name -> (how it is derived, rig overrides)
RIG_WORKLOADS: dict[str, tuple[str, dict]] = {
    "small": ("half-resolution input 352x128 (resize 0.22, crop 70) -> 22x8 features",
              dict(input_width=352, input_height=128, resize=0.22, crop_top=70)),
    "canonical": ("the shipped rig as is: 704x256 input -> 44x16 features, 59 bins, 128x128", {}),
    "large": ("double input 1408x512 (resize 0.88, crop 280) -> 88x32 features, 0.5 m bins (118), "
              "200x200 grid at 0.512 m",
              dict(input_width=1408, input_height=512, resize=0.88, crop_top=280, depth_step=0.5,
                   x=Axis("x", -51.2, 51.2, 0.512), y=Axis("y", -51.2, 51.2, 0.512))),
    "very_large": ("full-resolution input 1600x896 (resize 1.0, crop 4) -> 100x56 features, "
                   "0.25 m bins (236), 256x256 grid at 0.4 m",
                   dict(input_width=1600, input_height=896, resize=1.0, crop_top=4, depth_step=0.25,
                        x=Axis("x", -51.2, 51.2, 0.4), y=Axis("y", -51.2, 51.2, 0.4))),
    "wide_c128": ("canonical geometry, C=128", dict(channels=128)),
    "wide_c256": ("canonical geometry, C=256", dict(channels=256)),
}
SYNTHETIC_WORKLOADS = {
    "blog49": "209,000 points, C=80, one feature row and one depth value per point, 200x200 cells, "
              "density ~ 1/(1 + (r/8 m)^2) around the ego vehicle (seeded)",
}
WORKLOADS = (*RIG_WORKLOADS, *SYNTHETIC_WORKLOADS)


def base_rig() -> Rig:
    return load_rig(default_rig_path())


def workload_rig(name: str) -> Rig:
    if name not in RIG_WORKLOADS:
        raise KeyError(f"{name!r} is not a rig workload; rig workloads: {list(RIG_WORKLOADS)}")
    rig = base_rig()
    return replace(rig, name=name, **RIG_WORKLOADS[name][1])


def describe(name: str) -> str:
    if name in RIG_WORKLOADS:
        return RIG_WORKLOADS[name][0]
    return SYNTHETIC_WORKLOADS[name]


@lru_cache(maxsize=None)
def get_workload(name: str) -> ScatterMap:
    """Scatter map of a named workload (built once per process)."""
    if name in RIG_WORKLOADS:
        rig = workload_rig(name)
        return replace(build_scatter_map(rig), key=name)
    if name == "blog49":
        return blog49_map()
    raise KeyError(f"unknown workload {name!r}; known: {list(WORKLOADS)}")


def blog49_map(points: int = 209_000, channels: int = 80, cells_xy: int = 200,
               seed: int = 49) -> ScatterMap:
    """Article-sized map: each point owns its feature row and depth value.

    Cells are drawn with probability ~ 1/(1 + (r/8m)^2) at 0.512 m cells, so cells near the
    ego collect many points and far cells few, like a camera rig but without its geometry.
    """
    rng = np.random.default_rng(seed)
    centre = (np.arange(cells_xy) - cells_xy / 2 + 0.5) * 0.512
    r2 = centre[None, :] ** 2 + centre[:, None] ** 2
    weight = (1.0 / (1.0 + r2 / 64.0)).reshape(-1)
    cell = rng.choice(weight.size, size=points, p=weight / weight.sum())
    # points arrive in "camera order" (their feature row); sorting by cell scatters the rows
    order = np.argsort(cell, kind="stable")
    rows = np.arange(points)[order]
    return scatter_map_from_ranks(rows, rows, cell[order], depth_shape=(1, 1, 1, points),
                                  grid_shape=(1, cells_xy, cells_xy), channels=channels,
                                  frustum_points=points, key="blog49")


def random_inputs(smap: ScatterMap, rng: np.random.Generator,
                  dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Fresh random depth in [0, 1) and features in [-1, 1): never zeros, never constant."""
    depth = rng.random(smap.depth_shape, dtype=np.float32)
    feat = rng.uniform(-1.0, 1.0, smap.feat_shape).astype(np.float32)
    return depth.astype(dtype), feat.astype(dtype)
