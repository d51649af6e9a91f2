"""Every kernel compiles with NVRTC for every target arch (no GPU needed), and the disk cache
is private: world-writable or foreign cached files are refused and rebuilt."""
from __future__ import annotations

import os
import stat

import cuda.bindings.nvrtc  # noqa: E402,F401  (pinned in requirements.txt: missing = a real failure)
import pytest

from bevpool_ros.device import nvrtc_build  # noqa: E402
from bevpool_ros.kernels.table import ALL_KERNELS  # noqa: E402


@pytest.fixture(scope="session")
def kernel_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("kcache")


@pytest.fixture(scope="session")
def cubins(kernel_cache):
    return {arch: nvrtc_build.get_kernel_image(arch, cache_dir=kernel_cache)
            for arch in nvrtc_build.TARGET_ARCHS}


def test_nvrtc_is_pinned_to_13_0():
    # NVRTC newer than the driver's CUDA emits PTX the lent GPU's driver rejects
    assert tuple(nvrtc_build.nvrtc_version()) == (13, 0)


@pytest.mark.parametrize("arch", nvrtc_build.TARGET_ARCHS)
def test_every_kernel_compiles(cubins, arch):
    image = cubins[arch]
    assert image[:4] == b"\x7fELF", "expected a CUBIN (ELF)"
    for name in ALL_KERNELS:
        assert name.encode() in image, f"{name} missing from the {arch} CUBIN"


def test_ptx_entries_are_exactly_the_kernel_table():
    """PTX for forward compatibility, and no entry point the table does not know (or misses)."""
    import re

    ptx, _ = nvrtc_build.compile_source("compute_90", want="ptx")
    entries = set(re.findall(rb"\.entry\s+(\w+)", ptx))
    assert entries == {n.encode() for n in ALL_KERNELS}


def test_generated_header_and_defines_are_part_of_the_build():
    src = nvrtc_build.source_bundle()
    assert nvrtc_build.GENERATED_HEADER in src and b"#include \"bevpool_entries.cuh\"" in src["bevpool_kernels.cu"]
    # a build without the generated -D constant fails loudly instead of guessing
    with pytest.raises(nvrtc_build.CompileError, match="BEVPOOL_TEAM_FLAG_SHIFT"):
        nvrtc_build.compile_source("sm_90", sources=src, extra_options=("-UBEVPOOL_TEAM_FLAG_SHIFT",))


def test_cache_hit_and_private_dir(cubins, kernel_cache):
    assert stat.S_IMODE(kernel_cache.stat().st_mode) == 0o700
    files = list(kernel_cache.glob("bevpool_sm_90_*.cubin"))
    assert len(files) == 1
    assert stat.S_IMODE(files[0].stat().st_mode) == 0o600
    # a cache hit returns the stored (sealed) bytes without compiling
    from bevpool_ros.private_cache import unseal

    assert nvrtc_build.get_kernel_image("sm_90", cache_dir=kernel_cache) == unseal(files[0].read_bytes())


def test_corrupt_cache_file_recompiles(tmp_path):
    cache = tmp_path / "c"
    first = nvrtc_build.get_kernel_image("sm_90", cache_dir=cache)
    (path,) = cache.glob("*.cubin")
    path.write_bytes(path.read_bytes()[:100])  # truncated, still ours and 0600
    assert nvrtc_build.get_kernel_image("sm_90", cache_dir=cache) == first


def test_world_writable_cache_file_is_refused(tmp_path):
    cache = tmp_path / "c"
    first = nvrtc_build.get_kernel_image("sm_90", cache_dir=cache)
    (path,) = cache.glob("*.cubin")
    path.write_bytes(b"planted by someone else")
    os.chmod(path, 0o666)
    again = nvrtc_build.get_kernel_image("sm_90", cache_dir=cache)
    assert again == first  # rebuilt, the planted file was not used
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_cache_key_changes_with_inputs():
    src = nvrtc_build.source_bundle()
    k = nvrtc_build.cache_key("sm_90", ("a",), src)
    assert k != nvrtc_build.cache_key("sm_89", ("a",), src)
    assert k != nvrtc_build.cache_key("sm_90", ("b",), src)
    changed = dict(src, **{"bevpool_v3.cuh": src["bevpool_v3.cuh"] + b"\n// edit\n"})
    assert k != nvrtc_build.cache_key("sm_90", ("a",), changed)


def test_compile_error_carries_log():
    bad = dict(nvrtc_build.source_bundle())
    bad["bevpool_kernels.cu"] = b"this is not CUDA;"
    with pytest.raises(nvrtc_build.CompileError, match="NVRTC compile"):
        nvrtc_build.compile_source("sm_90", sources=bad)


def test_a_clean_compile_leaves_python_s_one_byte_strings_alone():
    """NVRTC writes its log (here just the NUL of an empty log) into the buffer it is given; a
    shared one-byte ``bytes`` there zeroed every b" " of the process (the separator of each later
    ``print`` came out as NUL: seen on the H200 as '(1, 128, 128, 80)\\x00float32')."""
    src = {nvrtc_build.MAIN_SOURCE: b'extern "C" __global__ void bevpool_nothing() {}\n'}
    for want in ("cubin", "ptx"):
        image, log = nvrtc_build.compile_source("sm_90", sources=src, want=want)
        assert image and log == ""
        for byte in range(256):  # every cached one-byte object still holds its own value
            assert bytes((byte,))[0] == byte and chr(byte).encode("latin-1")[0] == byte
        assert " ".encode() == bytes.fromhex("20")
