"""Shared fixtures; GPU tests skip cleanly where no CUDA device is present."""
from __future__ import annotations

from pathlib import Path

import pytest

from bevpool_ros.paths import default_rig_path

REPO = Path(__file__).resolve().parent.parent
NUSCENES_RIG = default_rig_path()


def _have_gpu() -> bool:
    from bevpool_ros.backends.cuda.driver import live_l2_bytes

    return live_l2_bytes() is not None


def pytest_collection_modifyitems(config, items):
    if _have_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def nuscenes_rig():
    from bevpool_ros.rig_yaml import load_rig

    return load_rig(NUSCENES_RIG)


@pytest.fixture(scope="session")
def canonical_map(nuscenes_rig):
    from bevpool_ros.scatter_map import build_scatter_map

    return build_scatter_map(nuscenes_rig)
