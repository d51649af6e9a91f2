"""Run-time compilation of plugin/*.cu with NVRTC (cuda-python), cached on disk.

The V3 entry points and the constants the kernels share with Python are generated from the
kernel table (launch.V3_KERNELS): a header ``bevpool_entries.cuh`` added to the sources and -D
options (``generated_sources`` / ``generated_options``), so the table is the one source of truth.

Cache key = sha256(every plugin source + arch + NVRTC version + options). The cache lives in a
private directory (0700, ours); a cached file that is world-writable or owned by someone else is
refused and rebuilt, because loading it would run someone else's code on the GPU.
"""
from __future__ import annotations

import hashlib
import logging
import os
from functools import lru_cache
from pathlib import Path

from .. import private_cache

log = logging.getLogger(__name__)

MAIN_SOURCE = "bevpool_kernels.cu"
# Every kernel must compile for these (CI test): Ampere desktop, Ada, Hopper, DRIVE Thor, Blackwell RTX.
TARGET_ARCHS = ("sm_86", "sm_89", "sm_90", "sm_110", "sm_120")
BASE_OPTIONS = ("-std=c++17", "-default-device")


class CompileError(RuntimeError):
    """NVRTC rejected the source; the message carries its log."""


def plugin_dir() -> Path:
    from ..paths import plugin_dir as shipped_plugin_dir  # checkout, colcon/ament or pip share

    return shipped_plugin_dir()


@lru_cache(maxsize=1)
def cuda_include_dir() -> Path:
    """cuda_fp16.h / cuda_fp8.h: the pinned nvidia-cuda-runtime wheel, else CUDA_HOME."""
    candidates = []
    try:
        import nvidia  # namespace package of the nvidia-* wheels

        for root in nvidia.__path__:
            candidates += [Path(root) / "cu13" / "include", Path(root) / "cuda_runtime" / "include"]
    except ImportError:
        pass
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for c in candidates:
        if (c / "cuda_fp8.h").is_file():
            return c
    raise CompileError("no CUDA headers (cuda_fp8.h) found: pip install nvidia-cuda-runtime==13.0.*")


def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    _check(err, "nvrtcVersion")
    return int(major), int(minor)


def _check(err, what: str, log_text: str = "") -> None:
    from cuda.bindings import nvrtc

    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"{what} failed: {err}\n{log_text}")


GENERATED_HEADER = "bevpool_entries.cuh"


def generated_sources() -> dict[str, bytes]:
    from ..kernels.table import entry_points_source

    return {GENERATED_HEADER: entry_points_source().encode()}


def generated_options() -> tuple[str, ...]:
    from ..kernels.table import compile_defines

    return compile_defines()


def source_bundle() -> dict[str, bytes]:
    """Every plugin source plus the generated entry-point header."""
    d = plugin_dir()
    files = sorted(list(d.glob("*.cu")) + list(d.glob("*.cuh")))
    return {**{f.name: f.read_bytes() for f in files}, **generated_sources()}


def cache_key(arch: str, options: tuple[str, ...], sources: dict[str, bytes] | None = None) -> str:
    sources = source_bundle() if sources is None else sources
    h = hashlib.sha256()
    for name, text in sorted(sources.items()):
        h.update(name.encode() + b"\0" + hashlib.sha256(text).digest())
    h.update(repr((arch, nvrtc_version(), tuple(options))).encode())
    return h.hexdigest()[:32]


def default_cache_dir() -> Path:
    return private_cache.cache_dir("BEVPOOL_KERNEL_CACHE", "kernels")


def compile_source(arch: str, extra_options: tuple[str, ...] = (), sources: dict[str, bytes] | None = None,
                   want: str = "cubin") -> tuple[bytes, str]:
    """Compile the plugin TU for ``arch`` (e.g. 'sm_90'); returns (cubin or ptx, compile log)."""
    from cuda.bindings import nvrtc

    sources = source_bundle() if sources is None else sources
    names = [n for n in sources if n != MAIN_SOURCE]
    opts = [f"--gpu-architecture={arch}", *BASE_OPTIONS, *generated_options(), f"-I{cuda_include_dir()}",
            *extra_options]
    err, prog = nvrtc.nvrtcCreateProgram(sources[MAIN_SOURCE], MAIN_SOURCE.encode(), len(names),
                                         [sources[n] for n in names], [n.encode() for n in names])
    _check(err, "nvrtcCreateProgram")
    try:
        bopts = [o.encode() for o in opts]
        (cerr,) = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        err, n = nvrtc.nvrtcGetProgramLogSize(prog)
        # NVRTC writes into the buffer it is given: always a fresh bytearray. A bytes object such as
        # b" " * n is shared when n == 1 (CPython's one-byte singleton): an empty log (just its NUL)
        # turned every b" " of the process into b"\0", e.g. the separator of each later print()
        buf = bytearray(n)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        text = buf.decode(errors="replace").rstrip("\0 \n")
        _check(cerr, f"NVRTC compile for {arch}", text)
        if want == "cubin":
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            _check(err, "nvrtcGetCUBINSize")
            out = bytearray(size)
            (err,) = nvrtc.nvrtcGetCUBIN(prog, out)
            _check(err, "nvrtcGetCUBIN")
        else:
            err, size = nvrtc.nvrtcGetPTXSize(prog)
            _check(err, "nvrtcGetPTXSize")
            out = bytearray(size)
            (err,) = nvrtc.nvrtcGetPTX(prog, out)
            _check(err, "nvrtcGetPTX")
        return bytes(out), text
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def get_kernel_image(arch: str, extra_options: tuple[str, ...] = (), cache_dir: Path | None = None,
                     want: str = "cubin") -> bytes:
    """Cached compile: the CUBIN (default) for ``arch``; a cache miss compiles and stores it."""
    sources = source_bundle()
    options = (*BASE_OPTIONS, *generated_options(), *extra_options, want)
    key = cache_key(arch, options, sources)
    directory = private_cache.private_dir(Path(cache_dir) if cache_dir else default_cache_dir(), "kernel cache")
    path = directory / f"bevpool_{arch}_{key}.{want}" if directory else None
    if path is not None:
        data = private_cache.read_trusted(path, "cached kernel")
        if data:
            log.debug("kernel cache hit %s", path)
            return data
    image, text = compile_source(arch, extra_options, sources, want)
    if text:
        log.debug("NVRTC log (%s): %s", arch, text)
    if path is not None:
        private_cache.write_trusted(path, image, "cached kernel")
    return image
