"""Measured choices (tuned launch, precision: auto) as typed records, one key builder, one store.

Both GPU backends ask the same questions per (GPU, scatter map): which V3 launch is fastest,
and is FP8 worth it. The answers are measured once, kept in the private cache through
``private_cache.read_trusted`` / ``write_trusted`` (one sealed file per key), and read back as
the record type they were stored as; a record of another type or shape reads as a miss.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ... import private_cache
from ...kernels.planning import LaunchChoice
from ...scatter_map import ScatterMap

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PrecisionChoice:
    """precision: auto's answer, decided on the whole frame (staging, conversion, kernel, copies)."""

    precision: str
    fp16_frame_us: float
    fp8_frame_us: float
    fp8_max_abs_err: float
    fp8_within_tolerance: bool


RECORD_TYPES = {cls.__name__: cls for cls in (LaunchChoice, PrecisionChoice)}


def map_digest(smap: ScatterMap) -> str:
    """Content hash of the five arrays and the shapes: two maps with one digest pool alike."""
    h = hashlib.sha256(repr((smap.depth_shape, smap.grid_shape, smap.channels)).encode())
    for a in smap.arrays().values():
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def choice_key(record_type: type, *, backend: str, device: str, smap: ScatterMap, precision: str = "",
               extra: tuple = ()) -> str:
    """The one key format: record type | backend | GPU | map | precision | anything else that matters."""
    parts = (record_type.__name__, backend, device, smap.key or "unkeyed", f"C{smap.channels}", map_digest(smap),
             precision, *map(str, extra))
    return "|".join(parts)


class ChoiceStore:
    """Typed records under string keys, one sealed private file each."""

    def __init__(self, directory: Path | None = None):
        if directory is None:
            directory = private_cache.cache_dir("BEVPOOL_KERNEL_CACHE", "kernels") / "choices"
        self.directory = Path(directory)

    def _path(self, key: str) -> Path:
        return self.directory / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")

    def load(self, key: str, record_type: type):
        payload = private_cache.read_trusted(self._path(key), "cached choice")
        if payload is None:
            return None
        try:
            entry = json.loads(payload)
            if entry["key"] != key or entry["type"] != record_type.__name__:
                return None
            return record_type(**entry["record"])
        except (ValueError, KeyError, TypeError) as e:
            log.warning("cached choice for %s unreadable (%s): measuring again", key, e)
            return None

    def store(self, key: str, record) -> bool:
        if type(record).__name__ not in RECORD_TYPES:
            raise TypeError(f"not a choice record: {type(record).__name__}")
        if private_cache.private_dir(self.directory, "choice cache") is None:
            return False
        entry = {"key": key, "type": type(record).__name__, "record": dataclasses.asdict(record)}
        return private_cache.write_trusted(self._path(key), json.dumps(entry, sort_keys=True).encode(),
                                           "cached choice")
