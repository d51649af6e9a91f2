"""When bevpool_node lets the hand-off core launch its sets (node/handoff_launch.py CoreLaunch), no GPU:
the gate's words as the set loop reads them (setloop.cpp, tested with the loop in
test_handoff_setloop.py), judged from a real LiveCalibration and the node's conditions. The calibration's
word moves the moment a change is accepted, before any later set; every other condition is judged again
after each Python-pooled set and at each status."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from bevpool_ros.cameras.calibration import LiveCalibration
from bevpool_ros.handoff.native.setloop import GATE_ARMED, GATE_EPOCH, GATE_STAMP, GATE_VERSION
from bevpool_ros.paths import default_rig_path
from bevpool_ros.rig import RigError
from bevpool_ros.rig_yaml import load_rig


@pytest.fixture
def launch():
    from bevpool_ros.handoff.native.core import library, unavailable_reason
    from bevpool_ros.handoff.native.setloop import SetLoop
    from bevpool_ros.node.handoff_launch import CoreLaunch

    lib = library()
    if lib is None:
        pytest.skip(f"the hand-off core is not available here: {unavailable_reason()}")
    calibration = LiveCalibration(load_rig(default_rig_path()))
    loop = SetLoop(lib, calibration.camera_names)
    state = SimpleNamespace(active=True, wanted=True, host_grid=False, dtype="float16", warnings=[])
    worker = SimpleNamespace(pool_guard=None, on_busy=None, after_pool=None, prepared_version=0, backend=None,
                             launched_set=lambda: None)
    outputs = SimpleNamespace(last=None, handoff=None, host_grid_needed=lambda: state.host_grid)
    intake = SimpleNamespace(loop=loop, on_launched=None)
    cl = CoreLaunch(lib, intake=intake, inputs=SimpleNamespace(reader=None), worker=worker, outputs=outputs,
                    calibration=calibration, ego_frame="ego", out_dtype=lambda: state.dtype,
                    wanted=lambda: state.wanted, active=lambda: state.active,
                    warn=lambda key, text: state.warnings.append((key, text)))
    yield cl, calibration, worker, outputs, state
    cl.close()
    loop.close()


def made(cl):
    """As if the first Python-pooled set had made the launcher (its run and grid dtype)."""
    cl.launcher, cl._built_for = object(), (object(), np.dtype("float16"))


def test_the_gate_opens_only_while_nothing_but_the_launch_is_wanted(launch):
    cl, calibration, worker, outputs, state = launch
    assert worker.pool_guard == cl.held and worker.on_busy == cl._busy and worker.after_pool == cl._after_pool
    cl.rearm()
    assert cl.gate[GATE_ARMED] == -1 and cl.off_reason == "waiting for a set pooled by Python"
    made(cl)
    cl.rearm()
    assert cl.gate[GATE_ARMED] == calibration.version == cl.gate[GATE_VERSION] and cl.off_reason == ""
    for field, value, why in (("active", False, "node inactive"), ("wanted", False, "nobody subscribed"),
                              ("host_grid", True, "a BevFeature or image subscriber"),
                              ("dtype", "float32", "output.bev_dtype changed")):
        before = getattr(state, field)
        setattr(state, field, value)
        cl.rearm()
        assert cl.gate[GATE_ARMED] == -1 and cl.off_reason.startswith(why), cl.off_reason
        setattr(state, field, before)
        cl.rearm()
        assert cl.gate[GATE_ARMED] == calibration.version
    cl.launcher = None  # as teardown leaves it (CoreLaunch.launcher is only read here)


def test_a_calibration_change_closes_the_gate_before_the_next_set(launch):
    """LiveCalibration's hook moves the version word at once (the loop compares it with the armed one);
    an invalid camera makes it match no version; the gate opens again only once the backend is
    prepared for the new calibration (the next set, pooled by Python)."""
    cl, calibration, worker, outputs, state = launch
    made(cl)
    cl.rearm()
    armed = int(cl.gate[GATE_ARMED])
    cam = calibration.rig.cameras[0]
    rotation = np.array(cam.rotation) @ np.array([[1, 0, 0], [0, 0.999, -0.0447], [0, 0.0447, 0.999]])
    assert calibration.update_extrinsics(cam.name, rotation, cam.translation)
    assert cl.gate[GATE_VERSION] == calibration.version != armed  # before any rearm: no set of the old map
    cl.rearm()
    assert cl.gate[GATE_ARMED] == -1 and cl.off_reason.startswith("calibration changed")
    worker.prepared_version = calibration.version  # the next set re-prepared the backend
    cl.rearm()
    assert cl.gate[GATE_ARMED] == cl.gate[GATE_VERSION] == calibration.version
    with pytest.raises(RigError):
        calibration.update_intrinsics(cam.name, [0.0] * 9, 1600, 900)  # no focal length: invalid
    assert cl.gate[GATE_VERSION] == -2
    cl.rearm()
    assert cl.gate[GATE_ARMED] == -1
    cl.launcher = None


def test_the_last_published_stamp_is_one_both_sides_check(launch):
    """publishing.Outputs checks stamps against ``last``; with the launcher, it is the gate's words the
    core moves when it publishes a set."""
    cl, calibration, worker, outputs, state = launch
    assert outputs.last.get() is None
    outputs.last.set(3, 1_000)
    assert (cl.gate[GATE_EPOCH], cl.gate[GATE_STAMP]) == (3, 1_000)
    cl.gate[GATE_STAMP] = 2_000  # the core published a later set
    assert outputs.last.get() == (3, 2_000)
