"""The camera-set synchroniser of the core (sync.cpp, inside the set loop) behind the interface of
cameras/sync.py's CameraSetSynchronizer: where the node runs the core, its one synchroniser is the
loop's, and the payloads Python checks (CameraTensor arrays, depth images, hand-off views opened
in Python) join it through here, beside the announcements the loop takes itself.

Python payloads travel as tokens: the object stays here until its set leaves (or the
synchroniser lets it go). A member the loop took from a datagram becomes a payload through
``resolve(member)`` (the node: the hand-off view of its values)."""
from __future__ import annotations

import itertools
import threading

from ...cameras.sync import STREAMS, CameraSet
from .setloop import ANNOUNCEMENT, DROP_BY_SYNC, REC_DROP, REC_RELEASED, REC_SET, SetLoop, counters


class NativeSynchronizer:
    def __init__(self, lib, cameras, slop: float = 0.02, camera_timeout: float = 0.1,
                 missing_policy: str = "drop", min_cameras: int = 1, max_pending: int = 4,
                 on_drop=None, resolve=None, on_record=None, loop: SetLoop | None = None):
        """``on_drop(reason, detail)`` as CameraSetSynchronizer's; ``resolve(member)``: the payload
        of a member the loop took from a datagram (default: the core.Member itself);
        ``on_record(record)``: the loop's other records (raw datagrams, closed links, gaps, intake
        drops), for the caller's intake; ``loop``: a SetLoop to share (else one of its own)."""
        self.cameras = tuple(cameras)
        if not self.cameras or len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras: need distinct names, got {self.cameras}")
        self.loop = loop if loop is not None else SetLoop(lib, self.cameras)
        self._own_loop = loop is None
        self._on_drop = on_drop or (lambda reason, detail: None)
        self._resolve = resolve or (lambda member: member)
        self._on_record = on_record or (lambda record: None)
        self._index = {c: i for i, c in enumerate(self.cameras)}
        self._payloads: dict[int, object] = {}
        self._tokens = itertools.count(1)
        self._lock = threading.Lock()
        self.configure(slop, camera_timeout, missing_policy, min_cameras, max_pending)

    def configure(self, slop: float, camera_timeout: float, missing_policy: str, min_cameras: int,
                  max_pending: int) -> None:
        self.loop.configure(slop, camera_timeout, missing_policy, min_cameras, max_pending)

    @property
    def counts(self):
        return counters(self.loop.counts())[0]

    @property
    def missing_by_camera(self):
        return counters(self.loop.counts())[1]

    @property
    def pending_sets(self) -> int:
        return self.loop.pending_sets

    @property
    def held_messages(self) -> int:
        return self.loop.held_messages

    @property
    def epoch(self) -> int:
        return self.loop.epoch

    def add(self, camera: str, stream: str, stamp_ns: int, payload, now: float) -> list[CameraSet]:
        token = next(self._tokens)
        self._payloads[token] = payload
        cam = self._index.get(camera, -1)
        st = STREAMS.index(stream) if stream in STREAMS else -1
        self.loop.offer(cam, st, stamp_ns, token, now)
        return self.drain()

    def poll(self, now: float) -> list[CameraSet]:
        self.loop.poll(now)
        return self.drain()

    def reset(self) -> None:
        self.loop.reset()
        self.drain()

    def drain(self) -> list[CameraSet]:
        """Every record the loop queued, in order: drops reported, payloads let go, sets returned.
        The callbacks run outside the lock: ``on_record`` may offer a payload (and drain again)."""
        with self._lock:  # the loop's record buffers are this object's
            records = list(self.loop.records())
        out = []
        for rec in records:
            kind = rec.head.kind
            if kind == REC_SET:
                out.append(self._camera_set(rec))
            elif kind == REC_RELEASED:
                self._payloads.pop(rec.head.token, None)
            elif kind == REC_DROP and rec.head.token == DROP_BY_SYNC:
                reason, _, detail = rec.data.partition(b"\0")
                self._on_drop(reason.decode(), detail.decode(errors="replace"))
            else:
                self._on_record(rec)
        return out

    def _camera_set(self, rec) -> CameraSet:
        frames: dict = {}
        for m in rec.members:
            if m.token & ANNOUNCEMENT:
                payload = self._resolve(m)
            else:
                payload = self._payloads.pop(m.token, None)
            frames.setdefault(self.cameras[m.camera], {})[STREAMS[m.stream]] = (m.stamp, payload)
        head = rec.head
        missing = tuple(c for i, c in enumerate(self.cameras) if head.missing >> i & 1)
        return CameraSet(frames, self.cameras, missing, head.first_arrival, head.last_arrival, bool(head.complete),
                         head.epoch)

    def close(self) -> None:
        if self._own_loop:
            self.loop.close()
