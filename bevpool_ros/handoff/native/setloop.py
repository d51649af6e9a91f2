"""bevpool_node's set loop in the core (setloop.cpp): from linked producers' announcement datagrams
to complete camera sets, the GIL released throughout.

``run`` blocks (a Python thread, the watchdog sees it) until something waits for Python in the
loop's outbox; ``records`` drains it. Python configures the loop: the links (producers' signal
sockets), the rings it may check (their control blocks, mapped by the caller), the template of
each camera stream (learnt and fully checked in Python on the stream's first announcement), the
synchroniser's policy and the stamp checks. Everything Python's intake would count, the loop
hands over as a drop record with the same reason and text.
"""
from __future__ import annotations

import ctypes
from collections import Counter
from typing import NamedTuple

from ..signal import MAX_DATAGRAM, connect
from .core import Member, Record, error
from .templates import ROLES

REC_SET, REC_DROP, REC_RAW, REC_CLOSED, REC_GAP, REC_RELEASED, REC_LAUNCHED = range(1, 8)  # bp_record_kind
GATE_ARMED, GATE_VERSION, GATE_BUSY, GATE_EPOCH, GATE_STAMP, GATE_WORDS = range(6)  # bp_gate
DROP_BY_SYNC, DROP_BY_INTAKE = 0, 1  # a REC_DROP's token: whose drop it is
SEEN_SIGNAL, SEEN_DDS = 1, 2  # bp_setloop_seen; 0: not seen
WAYS = {"signal": SEEN_SIGNAL, "dds": SEEN_DDS}
ANNOUNCEMENT = 1 << 63  # BP_TOKEN_ANNOUNCEMENT: a member the loop took from a datagram
DTYPE_CODES = {"float32": 0, "float16": 1, "float8_e4m3": 2}
RUN_SHUTDOWN = 0  # bp_setloop_run; 1: records wait, 2: timed out
POLICIES = {"drop": 0, "zero_fill": 1}


class LoopRecord(NamedTuple):
    head: Record               # a copy
    members: list              # [Member] (copies) of a set
    data: bytes                # a drop's "reason\0detail", a raw datagram, a launch's bp_launch + BevHandoff


class SetLoop:
    def __init__(self, lib, cameras):
        self.lib, self.cameras = lib, tuple(cameras)
        self.handle = lib.bp_setloop_new("\n".join(self.cameras).encode(), len(self.cameras))
        if not self.handle:
            raise ValueError(error(lib, "set loop not made"))
        self._record = Record()
        self._members = (Member * (2 * len(self.cameras)))()
        self._data = ctypes.create_string_buffer(MAX_DATAGRAM)

    # --- configuration ---------------------------------------------------------------------------
    def configure(self, slop: float, camera_timeout: float, missing_policy: str, min_cameras: int,
                  max_pending: int) -> None:
        """The synchroniser's policy (ValueError with CameraSetSynchronizer's text when refused)."""
        if missing_policy not in POLICIES:
            raise ValueError(f"missing_policy: expected one of {tuple(POLICIES)}, got {missing_policy!r}")
        why = self.lib.bp_setloop_configure(self.handle, float(slop), float(camera_timeout), POLICIES[missing_policy],
                                            int(min_cameras), int(max_pending))
        if why:
            raise ValueError(why.decode())

    def checks(self, max_future_s: float, clock_offset_ns: int = 0) -> None:
        """Stamps more than ``max_future_s`` ahead of CLOCK_REALTIME + ``clock_offset_ns`` (the
        node's clock) are dropped ``stamp_in_future``."""
        self.lib.bp_setloop_checks(self.handle, float(max_future_s), int(clock_offset_ns))

    def link(self, path: str, timeout: float = 2.0) -> int:
        """Link the signal socket at ``path`` (OSError when no producer listens there); its id."""
        sock = connect(path, timeout)
        link_id = ctypes.c_uint64()
        if self.lib.bp_setloop_link(self.handle, sock.detach(), ctypes.byref(link_id)) != 0:
            raise OSError(error(self.lib, "signal socket not linked"))
        return link_id.value

    def unlink(self, link_id: int) -> None:
        """Reported by a REC_CLOSED record once its socket is closed."""
        self.lib.bp_setloop_unlink(self.handle, int(link_id))

    def watch(self, ring_id: int, control_address: int, ring_size: int) -> None:
        """Datagrams of ring ``ring_id`` are checked against its control block (int64 words at
        ``control_address``, mapped until ``unwatch``); a ring not watched: its datagrams are raw."""
        self.lib.bp_setloop_watch(self.handle, int(ring_id), ctypes.cast(control_address, ctypes.POINTER(
            ctypes.c_int64)), int(ring_size))

    def unwatch(self, ring_id: int) -> None:
        """Returns once no check of that ring runs: its memory may be unmapped then."""
        self.lib.bp_setloop_unwatch(self.handle, int(ring_id))

    def learn(self, template, ring_id: int, camera: int, stream: int, dtype: str) -> int:
        """A cdr_template.CdrTemplate of one camera stream's announcements (all its fixed bytes
        checked by the caller); its id. Datagrams it reads are taken by the loop from now on."""
        offsets = (ctypes.c_int32 * len(ROLES))(*([-1] * len(ROLES)))
        for (path, _), offset in zip(template.fields, template.offsets):
            offsets[ROLES.index(path)] = offset
        tid = self.lib.bp_setloop_learn(self.handle, template.data, len(template.data), offsets, int(ring_id),
                                        int(camera), int(stream), DTYPE_CODES[dtype])
        if tid < 0:
            raise ValueError(error(self.lib, "template refused by the set loop"))
        return tid

    def forget(self, template_id: int) -> None:
        self.lib.bp_setloop_forget(self.handle, int(template_id))

    # --- the one "seen" record of both ways ------------------------------------------------------
    def claim(self, ring_id: int, sequence: int, way: str) -> bool:
        """True: the first copy of this announcement (now seen, by ``way``); False: seen already."""
        return bool(self.lib.bp_setloop_claim(self.handle, int(ring_id), int(sequence), WAYS[way]))

    def seen(self, ring_id: int, sequence: int) -> str | None:
        """The way the announcement came first, or None."""
        way = self.lib.bp_setloop_seen(self.handle, int(ring_id), int(sequence))
        return {SEEN_SIGNAL: "signal", SEEN_DDS: "dds"}.get(way)

    def sequence(self, link_id: int, ring_id: int, sequence: int) -> None:
        """A raw datagram's ring and sequence (read in Python): the link's gaps are counted on."""
        self.lib.bp_setloop_sequence(self.handle, int(link_id), int(ring_id), int(sequence))

    # --- the synchroniser ------------------------------------------------------------------------
    def offer(self, camera: int, stream: int, stamp_ns: int, token: int, now: float) -> None:
        """A payload Python checked (``token`` < 2**63 names it): it joins the synchroniser."""
        self.lib.bp_setloop_offer(self.handle, int(camera), int(stream), int(stamp_ns), int(token), float(now))

    def poll(self, now: float) -> None:
        self.lib.bp_setloop_poll(self.handle, float(now))

    def reset(self) -> None:
        self.lib.bp_setloop_reset(self.handle)

    def counts(self) -> dict[str, int]:
        """The synchroniser's counters, ``missing_<camera>`` and ``intake_<what>``."""
        n = self.lib.bp_setloop_counts(self.handle, None, 0)
        buf = ctypes.create_string_buffer(-n)
        self.lib.bp_setloop_counts(self.handle, buf, len(buf))
        return {name: int(v) for name, v in (line.split(" ") for line in buf.value.decode().splitlines())}

    @property
    def pending_sets(self) -> int:
        return self.lib.bp_setloop_state(self.handle, 0)

    @property
    def held_messages(self) -> int:
        return self.lib.bp_setloop_state(self.handle, 1)

    @property
    def epoch(self) -> int:
        return self.lib.bp_setloop_state(self.handle, 2)

    # --- the loop ------------------------------------------------------------------------------
    def run(self, timeout_s: float | None = None) -> int:
        """Wait (GIL released) until records wait (1), ``timeout_s`` passed (2), or ``shutdown``
        (RUN_SHUTDOWN). Call from one thread at a time."""
        ms = -1 if timeout_s is None else max(0, int(timeout_s * 1000))
        rc = self.lib.bp_setloop_run(self.handle, ms)
        if rc < 0:
            raise OSError(error(self.lib, "set loop stopped"))
        return rc

    def records(self):
        """The outbox, drained in order: LoopRecord each."""
        rec, members, data = self._record, self._members, self._data
        while self.lib.bp_setloop_next(self.handle, ctypes.byref(rec), members, len(members), data, len(data)):
            head = Record.from_buffer_copy(rec)
            n = head.count if head.kind == REC_SET else 0
            raw = data.raw[:head.count] if head.kind in (REC_DROP, REC_RAW, REC_LAUNCHED) else b""
            yield LoopRecord(head, [Member.from_buffer_copy(members[i]) for i in range(n)], raw)

    def launch_with(self, launcher, gate) -> None:
        """Complete sets of announcements go to ``launcher`` (native.launcher.NativeLauncher; None:
        none do) while ``gate`` (int64 numpy words, GATE_*; kept alive by the caller) allows it.
        Returns once no launch runs."""
        self.lib.bp_setloop_launch_with(self.handle, launcher.handle if launcher is not None else None,
                                        gate.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)) if gate is not None
                                        else None)

    @property
    def launching_since(self) -> float | None:
        """time.monotonic() the launch in progress began (the loop's thread in the core's launch),
        None while none runs; read without the loop's lock."""
        ns = self.lib.bp_setloop_launching_since(self.handle)
        return ns * 1e-9 if ns else None

    def inject_stall(self, ms: int) -> None:
        """Fault injection (BEVPOOL_INJECT_STALL=launch): each launch first sleeps ``ms`` (-1: for good)."""
        self.lib.bp_setloop_inject_stall(self.handle, int(ms))

    def wake(self) -> None:
        """A thread in ``run`` returns now (2), once."""
        self.lib.bp_setloop_wake(self.handle)

    def shutdown(self) -> None:
        """``run`` returns RUN_SHUTDOWN, now and from then on."""
        self.lib.bp_setloop_shutdown(self.handle)

    def close(self) -> None:
        """(no thread in ``run`` any more) Free the loop: its links' sockets close."""
        if self.handle:
            self.lib.bp_setloop_free(self.handle)
            self.handle = None


def counters(counts: dict[str, int]) -> tuple[Counter, Counter]:
    """(the synchroniser's counts, missing_by_camera) of ``SetLoop.counts()``."""
    sync, missing = Counter(), Counter()
    for name, v in counts.items():
        if name.startswith("missing_"):
            missing[name[len("missing_"):]] = v
        elif not name.startswith("intake_"):
            sync[name] = v
    return sync, missing
