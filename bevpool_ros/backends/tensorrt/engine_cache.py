"""On-disk engine cache: one file per (map, schedule, target GPU, TensorRT, precision, plugin).

Engines are code that runs on the GPU, so the cache is a private 0700 folder we own; files are
0600, written atomically, and sealed in private_cache's hash envelope, so a truncated, corrupted or foreign file is detected before TensorRT ever sees it. A bad file
is counted, deleted and rebuilt by the caller; it never crashes the node. ``invalidate`` covers
the remaining case: the envelope is intact but TensorRT refuses to deserialize the engine.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ...private_cache import cache_dir, private_dir, read_trusted, write_trusted

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineKey:
    map_key: str        # rig digest (ScatterMap.key) or workload name
    map_digest: str     # digest of the arrays (schedule/map): a key alone could be stale
    arch: str           # sm_NN the engine is built for
    gpu: str            # GPU name (or "aot" for a build without a device)
    trt: str            # TrtLib.tag: flavour + version
    precision: str      # fp16 | fp8
    plugin: str         # digest of the plugin fields (kernel, plan, shapes)
    extra: dict = field(default_factory=dict)

    def digest(self) -> str:
        text = json.dumps({**self.__dict__, "extra": self.extra}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def filename(self) -> str:
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self.map_key)[:40]
        return f"{safe or 'map'}_{self.arch}_{self.precision}_{self.digest()}.engine"


def default_cache_dir() -> Path:
    return cache_dir("BEVPOOL_ENGINE_CACHE", "engines")


class EngineCache:
    def __init__(self, directory: str | Path | None = None):
        self.directory = private_dir(Path(directory) if directory else default_cache_dir(), "engine cache")
        self.hits = self.misses = self.corrupt = self.stores = 0
        self._lock = threading.Lock()

    def path(self, key: EngineKey) -> Path | None:
        return self.directory / key.filename() if self.directory else None

    def load(self, key: EngineKey) -> bytes | None:
        path = self.path(key)
        if path is None:
            return None
        if not (path.exists() or path.is_symlink()):
            with self._lock:
                self.misses += 1
            return None
        payload = read_trusted(path, "engine cache file")
        if payload is None:
            with self._lock:
                self.corrupt += 1
            return None
        with self._lock:
            self.hits += 1
        return payload

    def store(self, key: EngineKey, payload: bytes) -> Path | None:
        path = self.path(key)
        if path is None:
            return None
        if not write_trusted(path, payload, "engine cache file"):
            return None
        with self._lock:
            self.stores += 1
        return path

    def invalidate(self, key: EngineKey, why: str) -> None:
        """An intact file TensorRT could not deserialize: count it as corrupt and delete it."""
        path = self.path(key)
        if path is not None and path.exists():
            self._discard(path, why)

    def get_or_build(self, key: EngineKey, build) -> tuple[bytes, bool]:
        """(engine bytes, came from cache); ``build()`` makes the bytes on a miss or a bad file."""
        cached = self.load(key)
        if cached is not None:
            return cached, True
        data = build()
        self.store(key, data)
        return data, False

    def stats(self) -> dict:
        return {"directory": str(self.directory) if self.directory else None, "hits": self.hits,
                "misses": self.misses, "corrupt": self.corrupt, "stores": self.stores}

    def _discard(self, path: Path, why: str) -> None:
        with self._lock:
            self.corrupt += 1
        log.warning("engine cache: %s is %s: deleting it, the engine will be rebuilt", path, why)
        try:
            path.unlink()
        except OSError:
            pass
