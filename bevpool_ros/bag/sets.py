"""The camera sets a bag holds, found by the node's own synchroniser run over the bag offline.

A replay can only be judged against what the bag offers: a *complete* set (every stream of every
camera the node subscribes, stamps within the node's ``sync.slop_s``) must come back as a grid; an
*incomplete* one (a camera left out of a frame) is the bag's own fault. Feeding the bag's tensor
messages, in log order and with unlimited patience, to ``CameraSetSynchronizer`` forms exactly the
sets an unhurried node would form. Each set is keyed like the ``BevFeature`` that reports it:
``{camera: stamp}`` from ``cameras`` / ``camera_stamps``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..cameras.sync import CameraSetSynchronizer
from ..io.bev_message import stamp_to_ns
from .io import camera_stream

INCOMPLETE_FATES = ("incomplete_timeout", "superseded", "evicted", "discarded_on_reset")
SetKey = frozenset  # of (camera, stamp_ns): what a grid's cameras / camera_stamps name


@dataclass(frozen=True)
class TensorEntry:
    """One camera tensor message of a bag: its place in the bag's message list and its identity."""

    index: int
    camera: str
    stream: str          # depth | feat
    stamp_ns: int        # header stamp
    t_ns: int            # log time


@dataclass(frozen=True)
class BagSet:
    key: SetKey          # (camera, stamp) of every camera it holds
    stamp_ns: int        # the set's stamp: the newest of its messages (as the node stamps the grid)
    indices: tuple[int, ...]  # its messages' places in the bag's message list

    @property
    def last_index(self) -> int:
        """The bag message that completes it (paced replay publishes up to here)."""
        return max(self.indices)


@dataclass
class BagSets:
    complete: list[BagSet]     # in bag order
    incomplete_at: list[int]   # sets missing a camera stream in the bag itself: where each is
    #                            known incomplete (the index of the message that passed it by)

    @property
    def incomplete(self) -> int:
        return len(self.incomplete_at)

    @property
    def total(self) -> int:
        return len(self.complete) + self.incomplete


def tensor_entries(messages) -> list[TensorEntry]:
    """The depth/feat messages among ``messages`` (BagMessage, in bag order); each decoded once."""
    out = []
    for i, m in enumerate(messages):
        where = camera_stream(m.topic)
        if where is not None and where[1] != "camera_info":
            stamp = stamp_to_ns(m.decode().header.stamp)
            out.append(TensorEntry(i, where[0], where[1], stamp, m.t_ns))
    return out


def grid_key(msg) -> SetKey:
    """The key of a published BevFeature: the cameras it pooled and their stamps."""
    return frozenset(zip(msg.cameras, (stamp_to_ns(s) for s in msg.camera_stamps)))


def find_sets(entries, cameras, slop_s: float) -> BagSets:
    """The sets ``cameras`` form in ``entries`` (TensorEntry, bag order) with the node's slop."""
    sync = CameraSetSynchronizer(cameras, slop=slop_s, camera_timeout=60.0, missing_policy="drop",
                                 max_pending=64)
    complete, incomplete_at = [], []

    def note_incomplete(at: int) -> None:
        gone = sum(sync.counts[k] for k in INCOMPLETE_FATES)
        incomplete_at.extend([at] * (gone - len(incomplete_at)))

    now, last = 0.0, -1
    for e in entries:
        if e.camera not in sync.cameras:
            continue  # a camera the node does not subscribe
        now, last = e.t_ns / 1e9, e.index
        for s in sync.add(e.camera, e.stream, e.stamp_ns, e.index, now):
            key = frozenset((cam, s.camera_stamp_ns(cam)) for cam in s.frames)
            indices = tuple(sorted(i for streams in s.frames.values() for _, i in streams.values()))
            complete.append(BagSet(key, s.stamp_ns, indices))
        note_incomplete(e.index)
    sync.poll(now + 3600.0)  # whatever still waits was never completed by the bag
    note_incomplete(last)
    return BagSets(complete, incomplete_at)
