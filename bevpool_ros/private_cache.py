"""Private on-disk caches (kernels, engines, measured choices, maps): one set of rules.

A cache directory is ours (owner uid) and 0700; a cached file is trusted only when it is a
regular file (not a link) that we own and that neither group nor others can write. Anything
else is refused and rebuilt: a cache must never let another user choose the code we load.
"""
from __future__ import annotations

import logging
import os
import stat
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
