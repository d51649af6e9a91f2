"""The cuda backend's graphs of hand-off sets, shared with the hand-off core's launcher
(handoff/native/launcher.py), so that a set whose slots the backend met before is launched,
checked and announced by the core in one call.

A set the backend pools in Python (the first of each slot combination, and any set the launcher
cannot take) leaves its graph behind once the backend captured one (a binding met twice,
device_frame.py): ``after_set`` hands it to the launcher under the set's key, the (ring id, slot)
of each tensor in the order the set loop lists them (cameras in rig order, depth then feat). The
backend destroying a graph (64 kept, a new calibration) takes it back from the launcher first."""
from __future__ import annotations

from ..cameras.sync import STREAMS


def set_key(camera_set, cameras) -> tuple | None:
    """The launcher's key of a set of hand-off views (``cameras``: the rig's names in order);
    None when a camera is missing or a payload is no hand-off view (no graph of the core's)."""
    key = []
    for cam in cameras:
        streams = camera_set.frames.get(cam)
        if streams is None:
            return None
        for stream in STREAMS:
            view = streams[stream][1]
            if not hasattr(view, "ring_id"):
                return None
            key.append((view.ring_id, view.slot))
    return tuple(key)


def member_key(members) -> tuple:
    """The same key of the set loop's members (core.Member)."""
    return tuple((m.ring_id, m.values.slot) for m in members)


class SharedGraphs:
    def __init__(self, launcher, run):
        """``run``: the backend's device-input path (backends/gpu/device_inputs.DeviceInputRun)."""
        self.launcher, self.frame = launcher, run.device
        self._keys: dict = {}  # the frame's graph key -> the launcher's
        self.frame.on_destroy.append(self._destroyed)

    def after_set(self, key: tuple | None) -> None:
        """Python pooled a set of ``key`` (set_key): its graph, if the backend replayed one, goes to
        the launcher."""
        graph = self.frame.last_graph
        if key is None or graph is None:
            return
        self._keys[self.frame.last_key] = key
        self.launcher.remember(key, int(graph.exec))

    def _destroyed(self, frame_key, graph) -> None:
        key = self._keys.pop(frame_key, None)
        if key is not None:
            self.launcher.forget(key)

    def close(self) -> None:
        """Before the backend's frame changes: the launcher keeps none of its graphs."""
        if self._destroyed in self.frame.on_destroy:
            self.frame.on_destroy.remove(self._destroyed)
        self.launcher.forget_all()
        self._keys.clear()
