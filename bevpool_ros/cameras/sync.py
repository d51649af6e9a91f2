"""Camera-set synchroniser: per-camera (depth, feat) streams -> time-consistent camera sets.

No ROS import: stamps are integer nanoseconds, ``now`` is a monotonic time in seconds that the
caller passes in (the node: arrival time; tests: a fake clock), so every path is testable.

Policy (docs/ros_interface.md, "Synchronisation"):
* Each camera has two streams, depth and feat. A *set* collects one message per stream whose
  stamps all lie within ``slop`` of each other (the set's spread never exceeds slop).
* A message joins the pending set it fits (the nearest by stamp); if none fits, it opens a new
  pending set. A set is *complete* when every stream of every camera has delivered.
* A complete set is emitted at once. Older pending sets are resolved first (sets leave in
  stamp order): their missing cameras skipped that frame, because streams arrive in order.
* A pending set that is still incomplete ``camera_timeout`` seconds after its first message
  arrived is resolved by ``missing_policy``: ``drop`` (counted ``incomplete_timeout``) or
  ``zero_fill`` (emitted with the missing cameras listed, if at least ``min_cameras`` are
  present; a zero depth distribution contributes nothing to the BEV grid).
* Unlike ApproximateTime, one late camera never costs the other cameras their set: their
  messages wait in the pending set until the late one arrives or the timeout resolves it.
* Per-message drops: ``duplicate`` (same stamp again on a stream), ``out_of_order`` (older
  than the stream's newest accepted stamp), ``late`` (older than the last emitted set: its
  set is gone). Emitted sets therefore never go back in time, with one exception: a clock
  reset, and only a confirmed one. A stamp more than 2 s behind its stream's newest starts
  (or joins) a *candidate timeline* and is held back, up to ``CONFIRM_SETS`` messages per
  stream. The reset is confirmed when more than half of the streams have each delivered
  ``CONFIRM_SETS`` messages on the candidate timeline while their old timeline stayed silent
  (a bag loops, a simulator restarts): everything pending is discarded and counted, the
  synchroniser starts over (``clock_reset``, :attr:`CameraSetSynchronizer.epoch` + 1) and the
  held messages are used. A stream that goes on on its old timeline drops its held messages
  (``stray_stamp``): a second producer seconds behind, or one producer's bad stamp, never
  restarts the synchroniser and never makes the output go back in time. At most
  ``max_pending`` sets wait; one more evicts the oldest (resolved by the policy, counted
  ``evicted``), which bounds memory under any flood.
Every outcome increments exactly one counter in :attr:`CameraSetSynchronizer.counts`; every
drop among them is also reported to ``on_drop(reason, detail)`` (the node logs it, throttled).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

STREAMS = ("depth", "feat")
# A stamp this far behind a stream's newest is a clock reset (bag loop, simulator restart),
# not a straggler: the synchroniser starts over instead of calling everything out of order.
CLOCK_RESET_NS = 2_000_000_000
# Messages per stream on a new timeline before a clock reset is believed (most streams must agree).
CONFIRM_SETS = 3
POLICIES = ("drop", "zero_fill")


@dataclass
class CameraSet:
    """A resolved set: ``frames[camera][stream] = (stamp_ns, payload)`` for present cameras."""

    frames: dict[str, dict[str, tuple[int, Any]]]
    cameras: tuple[str, ...]           # all cameras, in rig order
    missing: tuple[str, ...]           # cameras without both streams (zero_fill only)
    first_arrival: float               # monotonic time of the first message
    last_arrival: float                # monotonic time of the message that completed/resolved it
    complete: bool
    epoch: int | None = None           # clock epoch (bumped by a confirmed reset); None: unknown

    @property
    def stamp_ns(self) -> int:
        """The set's stamp: the newest stamp among its messages (order-independent)."""
        return max(s for cam in self.frames.values() for s, _ in cam.values())

    def camera_stamp_ns(self, camera: str) -> int | None:
        streams = self.frames.get(camera)
        return max(s for s, _ in streams.values()) if streams else None


@dataclass
class _Pending:
    first_arrival: float
    last_arrival: float
    lo: int
    hi: int
    frames: dict[str, dict[str, tuple[int, Any]]] = field(default_factory=dict)

    def fits(self, stamp: int, slop_ns: int) -> bool:
        return max(self.hi, stamp) - min(self.lo, stamp) <= slop_ns

    def has(self, camera: str, stream: str) -> bool:
        return stream in self.frames.get(camera, {})


class CameraSetSynchronizer:
    def __init__(self, cameras, slop: float = 0.02, camera_timeout: float = 0.1,
                 missing_policy: str = "drop", min_cameras: int = 1, max_pending: int = 4,
                 on_drop=None):
        self.cameras = tuple(cameras)
        self._on_drop = on_drop or (lambda reason, detail: None)
        if not self.cameras or len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras: need distinct names, got {self.cameras}")
        self.counts: Counter[str] = Counter()
        self.missing_by_camera: Counter[str] = Counter()
        self._pending: list[_Pending] = []          # sorted by lo stamp
        self._newest: dict[tuple[str, str], int] = {}
        # candidate timeline: per stream, messages that jumped back, awaiting confirmation
        self._held: dict[tuple[str, str], list[tuple[int, Any, float]]] = {}
        self._last_emitted_ns: int | None = None
        self.epoch = 0
        self.configure(slop, camera_timeout, missing_policy, min_cameras, max_pending)

    # configuration ----------------------------------------------------------------------
    def configure(self, slop: float, camera_timeout: float, missing_policy: str,
                  min_cameras: int, max_pending: int) -> None:
        if not (0.0 <= slop <= 10.0):
            raise ValueError(f"slop: expected 0..10 s, got {slop}")
        if not (0.0 < camera_timeout <= 60.0):
            raise ValueError(f"camera_timeout: expected (0, 60] s, got {camera_timeout}")
        if missing_policy not in POLICIES:
            raise ValueError(f"missing_policy: expected one of {POLICIES}, got {missing_policy!r}")
        if not (1 <= min_cameras <= len(self.cameras)):
            raise ValueError(f"min_cameras: expected 1..{len(self.cameras)}, got {min_cameras}")
        if max_pending < 1:
            raise ValueError(f"max_pending: expected >= 1, got {max_pending}")
        self.slop_ns = int(round(slop * 1e9))
        self.timeout = float(camera_timeout)
        self.policy = missing_policy
        self.min_cameras = int(min_cameras)
        self.max_pending = int(max_pending)

    @property
    def pending_sets(self) -> int:
        return len(self._pending)

    # input ------------------------------------------------------------------------------
    def add(self, camera: str, stream: str, stamp_ns: int, payload: Any, now: float) -> list[CameraSet]:
        """Offer one message; returns the sets that this resolved (possibly none)."""
        if camera not in self.cameras or stream not in STREAMS:
            self.counts["unknown_stream"] += 1
            return []
        key = (camera, stream)
        newest = self._newest.get(key)
        jumped = newest is not None and stamp_ns < newest - CLOCK_RESET_NS
        if jumped or (newest is not None and self._continues_held(key, stamp_ns)):
            return self._jumped_back(camera, stream, stamp_ns, payload, now, newest)
        if key in self._held:  # this stream goes on on the old timeline: its jump was stray
            self._drop_held(key, "its stream went on without it")
        if newest is not None and stamp_ns <= newest:
            self._dropped("duplicate" if stamp_ns == newest else "out_of_order",
                          f"{camera}/{stream} stamp {stamp_ns} ns, the stream's newest is {newest} ns")
            return []
        if self._last_emitted_ns is not None and stamp_ns <= self._last_emitted_ns:
            self._dropped("late", f"{camera}/{stream} stamp {stamp_ns} ns, its set already left "
                          f"(last set {self._last_emitted_ns} ns)")
            return []
        self._newest[key] = stamp_ns
        out = self.poll(now)  # time-outs first, so a stale set cannot swallow this message
        fitting = [p for p in self._pending if p.fits(stamp_ns, self.slop_ns) and not p.has(camera, stream)]
        if fitting:
            target = min(fitting, key=lambda p: abs((p.lo + p.hi) // 2 - stamp_ns))
        else:
            target = _Pending(now, now, stamp_ns, stamp_ns)
            self._pending.append(target)
            self._pending.sort(key=lambda p: p.lo)
        target.frames.setdefault(camera, {})[stream] = (stamp_ns, payload)
        target.lo, target.hi = min(target.lo, stamp_ns), max(target.hi, stamp_ns)
        target.last_arrival = now
        self.counts["accepted_messages"] += 1
        if self._is_complete(target):
            idx = self._pending.index(target)
            for older in self._pending[:idx]:  # resolved first: sets leave in stamp order
                out += self._resolve(older, now, "superseded")
            del self._pending[:idx]
            self._pending.remove(target)
            out.append(self._emit(target, now, complete=True))
        while len(self._pending) > self.max_pending:
            out += self._resolve(self._pending.pop(0), now, "evicted")
        return out

    def poll(self, now: float) -> list[CameraSet]:
        """Resolve pending sets whose timeout expired (call periodically, e.g. from a timer)."""
        expired = [i for i, p in enumerate(self._pending) if now - p.first_arrival >= self.timeout]
        if not expired:
            return []
        out = []
        # an expired set takes every older pending set with it, so sets leave in stamp order
        cut = expired[-1] + 1
        leaving, self._pending = self._pending[:cut], self._pending[cut:]
        for i, p in enumerate(leaving):
            out += self._resolve(p, now, "incomplete_timeout" if i in expired else "superseded")
        return out

    @property
    def held_messages(self) -> int:
        return sum(len(v) for v in self._held.values())

    def reset(self) -> None:
        """Forget pending sets and stream history (after a calibration or parameter change)."""
        for key in list(self._held):
            self._drop_held(key, "the synchroniser was reset")
        self.counts["discarded_on_reset"] += len(self._pending)
        self._pending.clear()
        self._newest.clear()
        self._last_emitted_ns = None

    # internals --------------------------------------------------------------------------
    def _jumped_back(self, camera: str, stream: str, stamp_ns: int, payload: Any, now: float,
                     newest: int) -> list[CameraSet]:
        """Hold a message of a possible new timeline; restart once most streams confirm it."""
        key = (camera, stream)
        held = self._held.setdefault(key, [])
        if held and stamp_ns <= held[-1][0]:
            self._dropped("stray_stamp", f"{camera}/{stream} stamp {stamp_ns} ns is not newer than "
                          f"its previous jumped-back stamp {held[-1][0]} ns")
            return []
        held.append((stamp_ns, payload, now))
        if len(held) > CONFIRM_SETS:  # bounded: only the newest few are kept for the restart
            old = held.pop(0)[0]
            self._dropped("stray_stamp", f"{camera}/{stream} stamp {old} ns: more than "
                          f"{CONFIRM_SETS} messages held while the reset is unconfirmed")
        confirmed = sum(1 for v in self._held.values() if len(v) >= CONFIRM_SETS)
        if 2 * confirmed <= len(self.cameras) * len(STREAMS):
            return []  # not yet (or never: a few streams alone do not restart every camera)
        candidate, self._held = self._held, {}
        pending = len(self._pending)
        self.reset()
        self.epoch += 1
        self._dropped("clock_reset", f"{confirmed} streams jumped back (e.g. {camera}/{stream} by "
                      f"{(newest - stamp_ns) / 1e9:.1f} s) for {CONFIRM_SETS} messages each: "
                      f"starting over, {pending} pending set(s) discarded")
        messages = sorted(((arrival, cam, st, s, p) for (cam, st), msgs in candidate.items()
                           for s, p, arrival in msgs), key=lambda m: m[0])
        out = []
        for _, cam, st, s, p in messages:  # arrival order; their sets' timeouts start now
            out += self.add(cam, st, s, p, now)
        return out

    def _continues_held(self, key: tuple[str, str], stamp_ns: int) -> bool:
        """Newer than the stream's held messages, not beyond its old timeline: the new one."""
        held = self._held.get(key)
        return bool(held) and held[-1][0] < stamp_ns <= self._newest[key]

    def _drop_held(self, key: tuple[str, str], why: str) -> None:
        for stamp_ns, _, _ in self._held.pop(key):
            self._dropped("stray_stamp",
                          f"{key[0]}/{key[1]} stamp {stamp_ns} ns jumped back ({why})")

    def _is_complete(self, p: _Pending) -> bool:
        return all(len(p.frames.get(c, {})) == len(STREAMS) for c in self.cameras)

    def _present(self, p: _Pending) -> list[str]:
        return [c for c in self.cameras if len(p.frames.get(c, {})) == len(STREAMS)]

    def _resolve(self, p: _Pending, now: float, why: str) -> list[CameraSet]:
        """An incomplete set leaves: emitted under zero_fill (enough cameras), else dropped."""
        present = self._present(p)
        missing = [c for c in self.cameras if c not in present]
        for c in missing:
            self.missing_by_camera[c] += 1
        if self.policy == "zero_fill" and len(present) >= self.min_cameras:
            return [self._emit(p, now, complete=False, present=present)]
        self._dropped(why, f"set {p.hi} ns without {', '.join(missing)}")
        self._mark_emitted(p)  # its stragglers are late now, whatever happened to it
        return []

    def _emit(self, p: _Pending, now: float, complete: bool, present=None) -> CameraSet:
        present = present if present is not None else list(self.cameras)
        frames = {c: p.frames[c] for c in present}
        s = CameraSet(frames, self.cameras, tuple(c for c in self.cameras if c not in present),
                      p.first_arrival, now, complete, self.epoch)
        self.counts["sets_complete" if complete else "sets_partial"] += 1
        self._mark_emitted(p)
        return s

    def _dropped(self, reason: str, detail: str) -> None:
        self.counts[reason] += 1
        self._on_drop(reason, detail)

    def _mark_emitted(self, p: _Pending) -> None:
        self._last_emitted_ns = max(self._last_emitted_ns or p.hi, p.hi)
