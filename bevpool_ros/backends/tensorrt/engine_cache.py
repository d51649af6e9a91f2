"""On-disk engine cache: one file per (rig shapes, target GPU, TensorRT, precision, plugin fields,
kernel sources, NVRTC). No calibration data enters: one engine serves every calibration of a rig.

Bounded: storing an engine evicts the other engines of its family (same rig shapes, arch, GPU,
precision: built by another TensorRT, for other kernel sources or another launch choice), and
the folder keeps at most ``max_engines`` files, least recently used first out.

Engines are code that runs on the GPU, so the cache is a private 0700 folder we own; files are
0600, written atomically, and sealed in private_cache's hash envelope, so a truncated, corrupted or
foreign file is detected before TensorRT ever sees it. A bad file
is counted, deleted and rebuilt by the caller; it never crashes the node. ``invalidate`` covers
the remaining case: the envelope is intact but TensorRT refuses to deserialize the engine.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ...private_cache import cache_dir, private_dir, read_trusted, write_trusted

log = logging.getLogger(__name__)


DEFAULT_MAX_ENGINES = 16


@dataclass(frozen=True)
class EngineKey:
    rig: str             # the rig's shapes (builder.rig_shape), calibration-free
    arch: str            # sm_NN the engine is built for
    gpu: str             # GPU name (or "aot" for a build without a device)
    trt: str             # TrtLib.tag: flavour + version
    precision: str       # fp16 | fp8
    plugin: str          # digest of the plugin fields (kernel, template plan, input bounds)
    kernel_sources: str  # digest of plugin/*.cu(h) (nvrtc_build.cache_key)
    nvrtc: str           # NVRTC major.minor that compiles them at attach time

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.__dict__, sort_keys=True).encode()).hexdigest()[:32]

    def family(self) -> str:
        """Filename prefix shared by the engines one of which replaces the others."""
        fam = hashlib.sha256(repr((self.rig, self.arch, self.gpu, self.precision)).encode()).hexdigest()[:8]
        safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in self.rig)[:48]
        return f"{safe or 'rig'}_{self.arch}_{self.precision}_{fam}_"

    def filename(self) -> str:
        return f"{self.family()}{self.digest()}.engine"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def default_cache_dir() -> Path:
    return cache_dir("BEVPOOL_ENGINE_CACHE", "engines")


class EngineCache:
    def __init__(self, directory: str | Path | None = None, max_engines: int = DEFAULT_MAX_ENGINES):
        self.directory = private_dir(Path(directory) if directory else default_cache_dir(), "engine cache")
        self.max_engines = max(1, int(max_engines))
        self.hits = self.misses = self.corrupt = self.stores = self.evicted = 0
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
        try:
            os.utime(path)  # least recently *used* is evicted first
        except OSError:
            pass
        return payload

    def store(self, key: EngineKey, payload: bytes) -> Path | None:
        path = self.path(key)
        if path is None:
            return None
        if not write_trusted(path, payload, "engine cache file"):
            return None
        with self._lock:
            self.stores += 1
        self._evict(key, path)
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
                "misses": self.misses, "corrupt": self.corrupt, "stores": self.stores, "evicted": self.evicted}

    def _evict(self, key: EngineKey, kept: Path) -> None:
        """Other engines of ``key``'s family go; then the least recently used beyond max_engines."""
        engines = [p for p in self.directory.glob("*.engine") if p != kept and not p.is_symlink()]
        stale = [p for p in engines if p.name.startswith(key.family())]
        rest = sorted(set(engines) - set(stale), key=_mtime)
        stale += rest[:max(0, len(rest) + 1 - self.max_engines)]
        for p in stale:
            try:
                p.unlink()
            except OSError:
                continue
            with self._lock:
                self.evicted += 1
            log.info("engine cache: evicted %s", p.name)

    def _discard(self, path: Path, why: str) -> None:
        with self._lock:
            self.corrupt += 1
        log.warning("engine cache: %s is %s: deleting it, the engine will be rebuilt", path, why)
        try:
            path.unlink()
        except OSError:
            pass
