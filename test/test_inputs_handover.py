"""node/inputs.py's hand-over: the synchroniser's sets reach the pooling worker in the order they
completed, whichever thread completed them and however long it takes to hand its set over, with the
Python synchroniser and with the core's. (A set overtaken by a later one would be dropped by the
pooling worker as a stamp regression.)"""
from __future__ import annotations

import threading
import time

import pytest
from ros_harness import private_node

from bevpool_ros.cameras.calibration import LiveCalibration
from bevpool_ros.cameras.sync import STREAMS
from bevpool_ros.params.table import defaults
from bevpool_ros.paths import default_rig_path
from bevpool_ros.rig_yaml import load_rig


@pytest.mark.parametrize("synchroniser", ["python", "core"])
def test_a_set_handed_over_slowly_is_not_overtaken_by_a_later_one_pooled_inline(synchroniser):
    from bevpool_ros.node.inputs import Inputs
    from bevpool_ros.node.reporting import Report

    rig = load_rig(default_rig_path())
    cameras = tuple(c.name for c in rig.cameras)
    cfg = dict(defaults(), **{"input.handoff": "auto" if synchroniser == "core" else "none",
                              "calibration.use_tf": False,
                              "sync.camera_timeout_s": 5.0})  # an offer's arrival time precedes its wait for the lock
    delivered, pooled, slowed = [], [], threading.Event()

    def deliver(camera_set, inline):
        if not inline and not slowed.is_set():
            slowed.set()
            time.sleep(0.5)  # the executor between taking its set and queueing it
        delivered.append((camera_set.stamp_ns, inline))
        return (lambda: pooled.append(camera_set.stamp_ns)) if inline else None

    with private_node("handover_test") as (node, _):
        inputs = Inputs(node, {}, cfg=cfg, cameras=cameras, calibration=LiveCalibration(rig), report=Report(node),
                        backend=lambda: None, deliver=deliver, wait_for_worker=lambda timeout_s: None)
        if synchroniser == "core" and (inputs.handoff.intake is None):
            from bevpool_ros.handoff.native.core import unavailable_reason

            pytest.skip(f"the hand-off core is not available here: {unavailable_reason()}")
        t0 = time.time_ns() - 5_000_000_000
        first, second = t0, t0 + 100_000_000
        members = [(cam, stream) for cam in cameras for stream in STREAMS]
        for cam, stream in members[:-1]:
            inputs.on_payload(cam, stream, first, object(), time.perf_counter())
        executor = threading.Thread(target=inputs.on_payload,
                                    args=(*members[-1], first, object(), time.perf_counter()))
        executor.start()  # completes the first set, handed over slowly
        assert slowed.wait(5.0)
        for cam, stream in members:  # the second set, completed by the signal thread (inline)
            inputs.on_payload(cam, stream, second, object(), time.perf_counter(), inline=True)
        executor.join(10.0)
        assert delivered == [(first, False), (second, True)], (delivered, dict(inputs.sync.counts))
        assert pooled == [second]  # the inline job ran, after the lock was released
        inputs.close()
