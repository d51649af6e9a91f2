"""Shared fixtures; GPU tests skip cleanly where no CUDA device is present. After each test file
the Fast DDS segments of processes it killed are freed (64 MiB of RAM each, see ros/dds_shm.py)
and named in the summary: a suite that leaks them runs a small machine out of memory."""
from __future__ import annotations

from pathlib import Path

import pytest

from bevpool_ros.paths import default_rig_path
from bevpool_ros.ros.dds_shm import remove_dead_segments

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


LEFT_SEGMENTS: dict[str, tuple[int, int]] = {}


def pytest_sessionstart(session):
    count, freed = remove_dead_segments()  # what earlier runs on this machine left
    if count:
        LEFT_SEGMENTS["(before this run)"] = (count, freed)


@pytest.fixture(scope="module", autouse=True)
def free_dead_dds_segments(request):
    yield
    count, freed = remove_dead_segments()
    if count:
        LEFT_SEGMENTS[request.module.__name__] = (count, freed)


def pytest_terminal_summary(terminalreporter):
    for module, (count, freed) in LEFT_SEGMENTS.items():
        terminalreporter.write_line(f"{module}: freed {count} Fast DDS segment(s) of killed processes "
                                    f"({freed / 2**20:.0f} MiB)")


@pytest.fixture(scope="session")
def nuscenes_rig():
    from bevpool_ros.rig_yaml import load_rig

    return load_rig(NUSCENES_RIG)


@pytest.fixture(scope="session")
def canonical_map(nuscenes_rig):
    from bevpool_ros.scatter_map import build_scatter_map

    return build_scatter_map(nuscenes_rig)
