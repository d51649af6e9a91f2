"""bevpool_ros/heap.py: the node's glibc settings keep freed multi-megabyte buffers mapped, in a
fresh process each (mallopt settings are process-wide)."""
import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import ctypes, json
from bevpool_ros import heap
state = heap.keep_freed_memory()
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
before = libc.mallinfo2()
buf = libc.malloc(4 << 20)  # a BevFeature-sized payload
during = libc.mallinfo2()
libc.free(buf)
after = libc.mallinfo2()
# what free() gave to the heap's free lists: the buffer itself, whatever was free before (the
# allocation may have taken part of it, a few KiB on some hosts) left out
print(json.dumps({"state": state, "mmapped": during.hblkhd - before.hblkhd,
                  "free_kept": after.fordblks - during.fordblks}))
"""


def probe(**env):
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES",
                                                                      "BEVPOOL_HEAP"))}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def glibc_with_mallinfo2() -> bool:
    import ctypes

    return hasattr(ctypes.CDLL(None), "mallinfo2")


@pytest.mark.skipif(not sys.platform.startswith("linux") or not glibc_with_mallinfo2(),
                    reason="glibc >= 2.33 (mallinfo2) only")
def test_tuned_heap_serves_and_keeps_a_4_mib_buffer_default_heap_maps_and_unmaps_it():
    tuned = probe()
    assert tuned["state"].startswith("freed buffers kept")
    assert tuned["mmapped"] == 0                 # from the heap, not a fresh mapping
    assert tuned["free_kept"] >= 4 << 20         # and still there after free()
    default = probe(BEVPOOL_HEAP_TUNING="0")
    assert default["state"] == "glibc defaults (BEVPOOL_HEAP_TUNING=0)"
    assert default["mmapped"] >= 4 << 20         # glibc's default: its own mapping, unmapped at free()
    assert default["free_kept"] < 4 << 20


def test_the_users_malloc_environment_is_left_alone():
    state = probe(MALLOC_TRIM_THRESHOLD_="1000000")["state"]
    assert state == "the environment's (MALLOC_TRIM_THRESHOLD_)"
