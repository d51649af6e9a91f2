"""Sequence bookkeeping of the hand-off ring, without CUDA.

Grid ``sequence`` (1, 2, 3, ...) goes to slot ``(sequence - 1) % ring_size``. A small control
block shared with the consumers (int64 words) records, per slot, the sequence the slot holds
or is about to hold. The producer claims a slot *before* it enqueues the copy that overwrites
it, so the control block works as a seqlock: a reader that still finds its sequence in the slot
after it has finished reading knows the bytes it read were not overwritten meanwhile.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

MAGIC = 0x31444E4148564542  # b"BEVHAND1" little-endian
HEADER_WORDS = 4            # magic, ring_id, ring_size, last published sequence
RING_IDLE_S = 5.0           # a consumer unmaps a ring no announcement named for this long (its producer went)


class RingError(RuntimeError):
    """A control block that is not one of ours, or one of another ring."""


def slot_of(sequence: int, ring_size: int) -> int:
    return (int(sequence) - 1) % int(ring_size)


class RingCursor:
    """Hands out (slot, sequence) pairs in ring order; sequences start at 1 (0 = never written)."""

    def __init__(self, ring_size: int):
        if ring_size < 2:
            raise ValueError(f"ring_size {ring_size}: at least 2 buffers (one being read, one being written)")
        self.ring_size = int(ring_size)
        self.sequence = 0

    def next(self) -> tuple[int, int]:
        self.sequence += 1
        return slot_of(self.sequence, self.ring_size), self.sequence


def overwritten_text(slot: int, sequence: int) -> str:
    """Why a tensor or grid cannot be read any more (the core says the same: setloop.cpp)."""
    return f"grid {sequence} in slot {slot} was already overwritten"


class ControlBlock:
    """``[magic, ring_id, ring_size, published, slot_seq[0] .. slot_seq[N-1]]`` over any buffer."""

    def __init__(self, buffer, writable: bool):
        self.words = np.frombuffer(buffer, dtype="<i8")
        if len(self.words) < HEADER_WORDS or int(self.words[0]) != MAGIC:
            raise RingError("not a bevpool hand-off control block")
        self.ring_size = int(self.words[2])
        if self.ring_size < 2 or len(self.words) < HEADER_WORDS + self.ring_size:
            raise RingError(f"control block too small for ring_size {self.ring_size}")
        self.slots = self.words[HEADER_WORDS:HEADER_WORDS + self.ring_size]
        self.writable = writable

    @staticmethod
    def nbytes(ring_size: int) -> int:
        return 8 * (HEADER_WORDS + int(ring_size))

    @staticmethod
    def initialise(buffer, ring_id: int, ring_size: int) -> "ControlBlock":
        words = np.frombuffer(buffer, dtype="<i8")
        words[:] = 0
        words[1], words[2] = ring_id, ring_size
        words[0] = MAGIC  # last: a half-written block never looks valid
        return ControlBlock(buffer, writable=True)

    @property
    def ring_id(self) -> int:
        return int(self.words[1])

    @property
    def published(self) -> int:
        return int(self.words[3])

    def claim(self, slot: int, sequence: int) -> None:
        """Producer: ``slot`` is about to be overwritten with grid ``sequence``."""
        self.slots[slot] = sequence

    def publish(self, sequence: int) -> None:
        self.words[3] = sequence

    def holds(self, slot: int, sequence: int) -> bool:
        """Consumer: does ``slot`` still hold grid ``sequence`` (not yet claimed by a later one)?"""
        return 0 <= slot < self.ring_size and int(self.slots[slot]) == int(sequence)


class SharedControlBlock:
    """A ControlBlock in an anonymous memfd, so its descriptor can travel with SCM_RIGHTS."""

    def __init__(self, fd: int, size: int, block: ControlBlock, mapping: mmap.mmap):
        self.fd, self.size, self.block, self._mapping = fd, size, block, mapping

    @classmethod
    def create(cls, ring_id: int, ring_size: int) -> "SharedControlBlock":
        size = ControlBlock.nbytes(ring_size)
        fd = os.memfd_create("bevpool_handoff_control", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        return cls(fd, size, ControlBlock.initialise(mapping, ring_id, ring_size), mapping)

    @classmethod
    def attach(cls, fd: int) -> "SharedControlBlock":
        """Consumer side, taking ownership of ``fd``: a read-only mapping (a consumer can never
        corrupt the producer's record)."""
        try:
            size = os.fstat(fd).st_size
            if size < ControlBlock.nbytes(2):
                raise RingError(f"control block of {size} bytes is too small")
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
            return cls(fd, size, ControlBlock(mapping, writable=False), mapping)
        except Exception:  # the descriptor is ours from the call on
            os.close(fd)
            raise

    def close(self) -> None:
        self.block = None
        if self._mapping is not None:
            try:
                self._mapping.close()
            except BufferError:  # a numpy view still alive: the mapping goes with it
                pass
            self._mapping = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
