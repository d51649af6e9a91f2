"""Private on-disk caches (kernels, engines, measured choices, maps): one set of rules.

A cache directory is ours (owner uid) and 0700; a cached file is trusted only when it is a
regular file (not a link) that we own and that neither group nor others can write. Anything
else is refused and rebuilt: a cache must never let another user choose the code we load.
"""
from __future__ import annotations

import hashlib
import logging
import os
import stat
import struct
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def cache_root() -> Path:
    """$XDG_CACHE_HOME/bevpool_ros (default ~/.cache/bevpool_ros)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "bevpool_ros"


def cache_dir(env_var: str, name: str) -> Path:
    """``$env_var`` when set, else ``cache_root() / name``."""
    return Path(os.environ.get(env_var) or cache_root() / name)


def require_private_dir(path: Path) -> Path:
    """Create or verify a 0700 directory we own; OSError when it cannot be made private."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.getuid():
        raise OSError(f"{path} is owned by uid {st.st_uid}, not us")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)
    return path


def private_dir(path: Path, what: str = "cache") -> Path | None:
    """``require_private_dir`` that logs and returns None (run without caching) instead of raising."""
    try:
        return require_private_dir(Path(path))
    except OSError as e:
        log.warning("%s %s unusable (%s): running without it", what, path, e)
        return None


def trusted_file(path: Path) -> bool:
    """A regular file (not a symlink) of ours that group and others cannot write."""
    try:
        st = Path(path).lstat()
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022


# --- one trusted read/write for every cache -------------------------------------------------
# Envelope: magic | u64 payload length | sha256(payload) | payload. A truncated, corrupted or
# foreign file fails the check and reads as a miss; it never reaches a parser or the GPU.
MAGIC = b"BEVPOOL1"
_HEADER = struct.Struct("<8sQ32s")


def seal(payload: bytes) -> bytes:
    return _HEADER.pack(MAGIC, len(payload), hashlib.sha256(payload).digest()) + payload


def unseal(blob: bytes) -> bytes | None:
    """The payload when the envelope is intact, else None."""
    if len(blob) < _HEADER.size:
        return None
    magic, n, digest = _HEADER.unpack_from(blob)
    payload = blob[_HEADER.size:]
    if magic != MAGIC or n != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


def read_trusted(path: Path, what: str = "cache entry") -> bytes | None:
    """The payload of a sealed private file, or None (missing, untrusted or corrupt).

    An untrusted or corrupt file is logged and deleted so that the caller's rebuild replaces it.
    """
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return None
    why = None
    if not trusted_file(path):
        why = "not a private regular file of ours"
    else:
        try:
            payload = unseal(path.read_bytes())
        except OSError as e:
            payload, why = None, f"unreadable ({e})"
        if payload is not None:
            return payload
        why = why or "truncated or corrupt"
    log.warning("%s %s is %s: deleting it, it will be rebuilt", what, path, why)
    try:
        path.unlink()
    except OSError:
        pass
    return None


def write_trusted(path: Path, payload: bytes, what: str = "cache entry") -> bool:
    """Seal and write atomically (0600, readers see the old file or the whole new one).

    The directory must be private (``private_dir``); False (logged) when the write fails.
    """
    return write_private(path, seal(payload), what)


def write_private(path: Path, data: bytes, what: str = "file") -> bool:
    """Write ``data`` as is (no envelope: for files another program reads, e.g. a Fast DDS
    profile) atomically, 0600, into a private directory; False (logged) when that fails."""
    path = Path(path)
    if private_dir(path.parent, what) is None:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        return True
    except OSError as e:
        log.warning("could not store %s %s: %s", what, path, e)
        Path(tmp).unlink(missing_ok=True)
        return False
