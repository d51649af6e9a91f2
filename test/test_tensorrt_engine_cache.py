"""Engine cache: private folder, envelope check, corrupt/truncated/foreign files rebuilt, counted."""
from __future__ import annotations

import os
import stat

import pytest

from bevpool_ros.backends.tensorrt.engine_cache import EngineCache, EngineKey
from bevpool_ros.private_cache import MAGIC
from bevpool_ros.private_cache import seal as wrap
from bevpool_ros.private_cache import unseal as unwrap


def key(**kw):
    base = dict(rig="N6D59H16W44_Z1Y128X128_C80", arch="sm_89", gpu="aot", trt="tensorrt-rtx-1.7.1.116",
                precision="fp16", plugin="p1", kernel_sources="k1", nvrtc="13.0")
    base.update(kw)
    return EngineKey(**base)


class Builds:
    def __init__(self):
        self.n = 0

    def __call__(self):
        self.n += 1
        return b"engine-bytes-%d" % self.n


def test_miss_then_hit(tmp_path):
    cache, build = EngineCache(tmp_path / "c"), Builds()
    assert cache.get_or_build(key(), build) == (b"engine-bytes-1", False)
    assert cache.get_or_build(key(), build) == (b"engine-bytes-1", True)
    assert build.n == 1
    assert cache.stats()["hits"] == 1 and cache.stats()["misses"] == 1 and cache.stats()["stores"] == 1


def test_private_permissions(tmp_path):
    d = tmp_path / "c"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    cache = EngineCache(d)
    cache.store(key(), b"x")
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.path(key()).stat().st_mode) == 0o600


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "magic", "garbage", "extend"])
def test_damaged_file_is_detected_counted_and_rebuilt(tmp_path, damage, caplog):
    cache, build = EngineCache(tmp_path), Builds()
    cache.get_or_build(key(), build)
    p = cache.path(key())
    blob = p.read_bytes()
    bad = {"truncate": blob[:-3], "flip": blob[:-1] + bytes([blob[-1] ^ 1]), "empty": b"",
           "magic": b"XXXXXXXX" + blob[8:], "garbage": os.urandom(100), "extend": blob + b"!"}[damage]
    p.write_bytes(bad)
    data, cached = cache.get_or_build(key(), build)
    assert (data, cached) == (b"engine-bytes-2", False)
    assert cache.corrupt == 1
    assert "rebuilt" in caplog.text
    assert unwrap(p.read_bytes()) == b"engine-bytes-2"


def test_group_writable_or_non_regular_file_is_refused(tmp_path):
    cache, build = EngineCache(tmp_path), Builds()
    cache.get_or_build(key(), build)
    p = cache.path(key())
    os.chmod(p, 0o666)
    assert cache.load(key()) is None and cache.corrupt == 1
    p.unlink(missing_ok=True)
    os.symlink("/etc/hostname", p)
    assert cache.load(key()) is None and cache.corrupt == 2


def test_invalidate_counts_and_deletes(tmp_path):
    cache = EngineCache(tmp_path)
    cache.store(key(), b"intact but refused by TensorRT")
    cache.invalidate(key(), "refused by TensorRT")
    assert cache.corrupt == 1 and not cache.path(key()).exists()


def test_every_key_part_separates_entries(tmp_path):
    cache = EngineCache(tmp_path)
    # other families (rig shapes, target, precision) live side by side
    families = [key(), key(rig="N1D8H4W4_Z1Y8X8_C16"), key(arch="sm_120"), key(gpu="RTX 4090"), key(precision="fp8")]
    # within a family every other key part (TensorRT, plugin fields, kernel sources, NVRTC) is a new engine
    same_family = [key(trt="tensorrt-11.4"), key(plugin="p2"), key(kernel_sources="k2"), key(nvrtc="13.1")]
    variants = families + same_family
    assert len({k.filename() for k in variants}) == len(variants)
    assert len({k.family() for k in families}) == len(families)
    assert {k.family() for k in same_family} == {key().family()}
    for i, k in enumerate(families):
        cache.store(k, b"%d" % i)
    assert [cache.load(k) for k in families] == [b"%d" % i for i in range(len(families))]


def test_kernel_source_change_misses_and_evicts_the_stale_engine(tmp_path, monkeypatch):
    """Editing a kernel source changes the key (builder.kernel_identity): the old engine is not
    served, and storing the new one evicts it."""
    import bevpool_ros.device.nvrtc_build as nb
    from bevpool_ros.backends.tensorrt.builder import kernel_identity

    before = kernel_identity()
    sources = nb.source_bundle()
    name = sorted(sources)[0]
    monkeypatch.setattr(nb, "source_bundle", lambda: {**sources, name: sources[name] + b"\n// edited\n"})
    after = kernel_identity()
    assert after["kernel_sources"] != before["kernel_sources"] and after["nvrtc"] == before["nvrtc"]
    cache, build = EngineCache(tmp_path), Builds()
    old, new = key(kernel_sources=before["kernel_sources"]), key(kernel_sources=after["kernel_sources"])
    cache.get_or_build(old, build)
    data, cached = cache.get_or_build(new, build)
    assert not cached and build.n == 2
    assert cache.load(old) is None and cache.load(new) == data
    assert cache.evicted == 1 and len(list(tmp_path.glob("*.engine"))) == 1


def test_cache_is_bounded_least_recently_used_first(tmp_path):
    cache = EngineCache(tmp_path, max_engines=3)
    keys = [key(rig=f"rig{i}") for i in range(4)]
    for i, k in enumerate(keys[:3]):
        cache.store(k, b"%d" % i)
        os.utime(cache.path(k), (1000 + i, 1000 + i))  # deterministic ages
    assert cache.load(keys[0]) == b"0"  # used: now the most recent
    cache.store(keys[3], b"3")
    assert sorted(p.name for p in tmp_path.glob("*.engine")) == sorted(cache.path(k).name for k in
                                                                       (keys[0], keys[2], keys[3]))
    assert cache.evicted == 1 and cache.stats()["evicted"] == 1


def test_unusable_directory_disables_caching(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    cache, build = EngineCache(blocker / "sub"), Builds()
    assert cache.directory is None
    assert cache.get_or_build(key(), build) == (b"engine-bytes-1", False)
    assert cache.get_or_build(key(), build) == (b"engine-bytes-2", False)


def test_envelope():
    assert wrap(b"abc").startswith(MAGIC) and unwrap(wrap(b"abc")) == b"abc"
    assert unwrap(b"short") is None
