"""Shared-memory segments that Fast DDS left behind when a process died without closing them.

Each Fast DDS participant maps one segment, ``/dev/shm/fastdds_<16 hex>`` (64 MiB under the
shipped profile, ``config/dds/fastdds_large_data.xml``), and holds an exclusive ``flock`` on its
companion ``<segment>_el`` while it lives. A clean exit unlinks both; a process killed with
SIGKILL (an OOM kill, a launch escalation, a crashed test) leaves them, and Fast DDS never
reclaims them: /dev/shm is RAM, so every such death costs up to 64 MiB until reboot. Seen here:
343 dead segments, 22 GiB, after a day of test runs, and a CI run killed for lack of memory.

A segment whose lock nobody holds belongs to a dead process: removing it is what
``fastdds shm clean`` does. No ROS import here.
"""
from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path

SHM_DIR = Path("/dev/shm")
SEGMENT = re.compile(r"fastdds_[0-9a-f]{16}")   # ports (fastdds_port*) are Fast DDS's own business
MIN_AGE_S = 10.0   # a segment this young may be one a live process has not locked yet


def _lock_is_free(lock_file: Path) -> bool:
    try:
        fd = os.open(lock_file, os.O_RDWR)
    except OSError:
        return False  # gone meanwhile, or not ours to judge
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # flock: conflicts with our own process too
    except OSError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def dead_segments(shm_dir: Path = SHM_DIR, min_age_s: float = MIN_AGE_S) -> list[Path]:
    """Fast DDS segments whose owner is gone (lock free, older than ``min_age_s``)."""
    try:
        names = os.listdir(shm_dir)
    except OSError:
        return []  # no /dev/shm (not Linux): nothing Fast DDS could have left
    now = time.time()
    dead = []
    for name in sorted(names):
        if not SEGMENT.fullmatch(name) or name + "_el" not in names:
            continue
        seg = shm_dir / name
        try:
            if now - seg.stat().st_mtime < min_age_s:
                continue
        except OSError:
            continue
        if _lock_is_free(shm_dir / (name + "_el")):
            dead.append(seg)
    return dead


def own_segments(maps_file: str = "/proc/self/maps") -> list[Path]:
    """The Fast DDS segments this process has mapped."""
    try:
        with open(maps_file) as f:
            names = {m.group(0) for m in SEGMENT.finditer(f.read())}
    except OSError:
        return []
    return sorted(SHM_DIR / n for n in names if (SHM_DIR / n).exists())


def _unlink(segments) -> tuple[int, int]:
    """Unlink each segment and its lock file; (segments unlinked, bytes of RAM they held)."""
    count = freed = 0
    for seg in segments:
        try:
            used = seg.stat().st_blocks * 512  # tmpfs: the pages actually held, not the file size
            seg.unlink()
        except OSError:
            continue  # another cleaner was faster, or not ours to remove
        count += 1
        freed += used
        Path(str(seg) + "_el").unlink(missing_ok=True)
    return count, freed


def release_own_segments() -> int:
    """Unlink this process's segments before it replaces itself with ``execve``: the new image
    knows nothing of them and no destructor runs, so they would outlive the process. The
    mappings stay valid until the exec drops them. How many were unlinked."""
    return _unlink(own_segments())[0]


def remove_dead_segments(shm_dir: Path = SHM_DIR, min_age_s: float = MIN_AGE_S) -> tuple[int, int]:
    """Unlink every dead segment and its lock file; (segments removed, bytes of RAM freed)."""
    return _unlink(dead_segments(shm_dir, min_age_s))
