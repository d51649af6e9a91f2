"""Garbage collection between sets (bevpool_ros/gc_pacing.py): nothing is collected on its own
while a pacing is started, everything is once it is due (CPython's rule, or ten times it when
idle), start-up objects are frozen, and the process gets its automatic collection back after the
last pacing stops. The pooling worker runs its ``after_set`` once per set."""
from __future__ import annotations

import gc
import weakref

from bevpool_ros.gc_pacing import IDLE_FACTOR, BetweenSets


class Cycle:
    def __init__(self):
        self.me = self


def garbage(n: int) -> None:
    for _ in range(n):
        Cycle()


def test_cycles_wait_for_the_pacing_and_go_when_due():
    was_enabled = gc.isenabled()
    pacing = BetweenSets()
    pacing.start()
    try:
        assert not gc.isenabled() and gc.get_freeze_count() > 0
        threshold = gc.get_threshold()[0]
        kept = Cycle()
        watch = weakref.ref(kept)
        del kept
        garbage(2 * threshold)
        assert watch() is not None  # past the threshold, yet nothing collected on its own
        assert gc.get_count()[0] >= threshold
        assert pacing.collect_if_due(idle=True) == -1  # idle: waits for IDLE_FACTOR x threshold
        assert pacing.collect_if_due() == 0 and watch() is None
        assert pacing.collections[0] == 1 and gc.get_count()[0] < threshold
        garbage(IDLE_FACTOR * threshold + 10)
        assert pacing.collect_if_due(idle=True) == 0
    finally:
        pacing.stop()
    assert gc.isenabled() == was_enabled and gc.get_freeze_count() == 0


def test_two_pacings_in_one_process_restore_collection_after_the_last():
    was_enabled = gc.isenabled()
    a, b = BetweenSets(), BetweenSets()
    a.start()
    b.start()
    a.stop()
    assert not gc.isenabled()  # b still paces the process
    assert b.collect_if_due() in (-1, 0, 1, 2) and a.collect_if_due() == -1  # a stopped: no-op
    b.stop()
    assert gc.isenabled() == was_enabled


def test_the_pooling_worker_runs_after_set_once_per_set():
    import numpy as np

    from bevpool_ros.backends.cpu import CpuBackend
    from bevpool_ros.node.calibration import LiveCalibration
    from bevpool_ros.node.pooling import PoolingWorker
    from bevpool_ros.node.sync import CameraSet
    from bevpool_ros.workloads import base_rig

    rig = base_rig()
    calls, drops = [], []
    worker = PoolingWorker(CpuBackend(), LiveCalibration(rig), lambda r: None,
                           lambda r, d: drops.append(r), after_set=lambda: calls.append(1))
    worker.prepare()
    _, D, H, W = rig.depth_shape
    frames = {cam.name: {"depth": (1, np.zeros((D, H, W), np.float32)),
                         "feat": (1, np.zeros((H, W, rig.channels), np.float32))} for cam in rig.cameras}
    worker.busy = True
    worker._process_guarded(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True))
    frames[rig.cameras[0].name]["feat"] = (1, np.zeros((H + 1, W, rig.channels), np.float32))
    worker.busy = True
    worker._process_guarded(CameraSet(frames, tuple(frames), (), 0.0, 0.0, True))  # dropped: bad shape
    assert calls == [1, 1] and drops == ["bad_shape"] and not worker.busy
