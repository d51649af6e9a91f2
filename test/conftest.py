"""Shared fixtures; GPU tests skip cleanly where no CUDA device is present. After each test file
the Fast DDS segments of processes it killed are freed (64 MiB of RAM each, see ros/dds_shm.py)
and named in the summary: a suite that leaks them runs a small machine out of memory.

Parallel runs (pytest-xdist, ``scripts/test.sh``): every worker is a process of its own, so it
claims its own DDS domains (test/ros_harness.py); a file marked ``alone`` (it compares /dev/shm
before and after, or frees segments younger than the housekeeping's age limit) runs while no
other worker is inside a file: see ``share_the_machine``."""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from bevpool_ros.paths import default_rig_path
from bevpool_ros.ros.dds_shm import remove_dead_segments

REPO = Path(__file__).resolve().parent.parent
NUSCENES_RIG = default_rig_path()


def _have_gpu() -> bool:
    from bevpool_ros.device.driver import live_l2_bytes

    return live_l2_bytes() is not None


# Seconds each of the slowest files took in a serial run on the 2-core CI machine (2026-12-04,
# bench/results/suite_durations_cpu.txt): under pytest-xdist (scripts/test.sh: --dist loadfile
# --no-loadscope-reorder) whole files go to the workers in this order, the longest first, so that
# no long file starts last and leaves the other workers idle; the files marked ``alone`` go before
# them (a worker waits for the machine to itself: cheapest while the other workers start).
SLOW_FILES = {
    "test_trt_cpp_plugin.py": 95, "test_eval_many.py": 92, "test_node_liveness.py": 63, "test_colcon_install.py": 50,
    "test_bag.py": 48, "test_kernel_compile.py": 34, "test_node_bad_input.py": 27, "test_node_e2e.py": 22,
    "test_handoff_input.py": 22, "test_node_hostile.py": 20, "test_node_params.py": 15, "test_occupancy_chain.py": 15,
    "test_handoff_announcements.py": 13, "test_bench_cli.py": 13, "test_synthetic_publisher.py": 12,
    "test_demo.py": 9, "test_bag_output.py": 7, "test_depth_image.py": 7,
}


def _run_order(item) -> float:
    if item.get_closest_marker("alone") is not None:
        return -float("inf")
    return -SLOW_FILES.get(item.path.name, 0)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker (every worker sorts alike: same order)
        items.sort(key=_run_order)  # stable: each file's own order, and the other files', is kept
    if _have_gpu():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


LEFT_SEGMENTS: dict[str, tuple[int, int]] = {}


def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the controller cleaned up before it started the workers
    count, freed = remove_dead_segments()  # what earlier runs on this machine left
    if count:
        LEFT_SEGMENTS["(before this run)"] = (count, freed)


# --- files that need the machine to themselves (pytest-xdist) ------------------------------------
# Every file holds a shared flock on one lock file of this run while it runs (module fixtures
# included); a file marked ``alone`` holds it exclusively. A turnstile lock in front keeps a
# waiting ``alone`` file from starving: no worker enters another file until it got its turn.
def pytest_configure(config):
    if not hasattr(config, "workerinput"):
        config.share_lock_dir = tempfile.mkdtemp(prefix="bevpool_pytest_")


def pytest_unconfigure(config):
    folder = getattr(config, "share_lock_dir", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):  # xdist controller: one per worker
    node.workerinput["bevpool_share_lock_dir"] = node.config.share_lock_dir


def _share_lock_dir(config) -> str | None:
    return getattr(config, "workerinput", {}).get("bevpool_share_lock_dir")


@pytest.fixture(scope="module", autouse=True)
def share_the_machine(request):
    """Outermost module fixture (autouse, first in conftest): held while the file's fixtures live."""
    folder = _share_lock_dir(request.config)
    if folder is None:  # not under xdist: the run has the machine to itself
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    gate = os.open(os.path.join(folder, "gate"), os.O_RDWR | os.O_CREAT, 0o600)
    files = os.open(os.path.join(folder, "files"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(files, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        os.close(files)  # closing the descriptor drops its lock
        os.close(gate)


@pytest.fixture(scope="module", autouse=True)
def free_dead_dds_segments(request, share_the_machine):
    yield
    count, freed = remove_dead_segments()
    if count:
        LEFT_SEGMENTS[request.module.__name__] = (count, freed)


def pytest_sessionfinish(session):
    if hasattr(session.config, "workeroutput"):  # an xdist worker: hand its lines to the controller
        session.config.workeroutput["bevpool_left_segments"] = dict(LEFT_SEGMENTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):  # xdist controller: a worker finished
    LEFT_SEGMENTS.update(getattr(node, "workeroutput", {}).get("bevpool_left_segments", {}))


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
