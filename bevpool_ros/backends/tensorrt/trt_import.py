"""Find a TensorRT Python module: full TensorRT (``tensorrt``) or TensorRT-RTX.

Order: ``tensorrt`` (the target's own install: JetPack/DriveOS on Thor, a desktop TensorRT),
then ``tensorrt_rtx`` (the ``tensorrt-rtx-cu13`` package) and ``tensorrt_rtx_bindings`` (the
``tensorrt-rtx-cu13-bindings`` wheel). ``BEVPOOL_TRT_MODULE`` forces one of them.

TensorRT-RTX 1.7 wheel quirk: while parsing an ONNX custom (plugin) node, the libraries
``dlopen("libtensorrt_rtx.so")`` through their ``RPATH=$ORIGIN``; the wheel ships only
``libtensorrt_rtx.so.1``, so the lookup fails and the process aborts ("terminate called without
an active exception"). We never write into site-packages: we make a private 0700 folder of
symlinks (``.so.1`` and the unversioned ``.so``) and load both libraries from it *before* the
bindings are imported, so ``$ORIGIN`` is that folder. If the bindings were imported earlier by
someone else, the fix cannot apply any more and ``onnx_parser_safe`` is False.
"""
from __future__ import annotations

import ctypes
import importlib
import importlib.util
import logging
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ...private_cache import cache_root, require_private_dir

log = logging.getLogger(__name__)

FULL = "tensorrt"
RTX_MODULES = ("tensorrt_rtx", "tensorrt_rtx_bindings")
CANDIDATES = (FULL, *RTX_MODULES)
RTX_LIBS_PACKAGE = "tensorrt_rtx_libs"
RTX_LIBS = ("libtensorrt_rtx.so.1", "libtensorrt_onnxparser_rtx.so.1")
RTX_UNVERSIONED = "libtensorrt_rtx.so"
_applied: list[str] = []  # the folder the RTX libraries were loaded from by us, once per process


class TensorRTMissing(ImportError):
    """No usable TensorRT Python module; the message lists what was tried and why it failed."""


@dataclass(frozen=True)
class TrtLib:
    trt: object              # the imported module
    module_name: str         # tensorrt | tensorrt_rtx | tensorrt_rtx_bindings
    version: str
    onnx_parser_safe: bool   # False: parsing a plugin node would abort the process
    libfix: str = ""         # private symlink folder used for the RTX quirk, if any

    @property
    def is_rtx(self) -> bool:
        return self.module_name in RTX_MODULES

    @property
    def flavor(self) -> str:
        return "tensorrt-rtx" if self.is_rtx else "tensorrt"

    @property
    def has_add_plugin_v3(self) -> bool:
        # full TensorRT 10+/11 has INetworkDefinition.add_plugin_v3; the RTX Python API has not
        return hasattr(self.trt.INetworkDefinition, "add_plugin_v3")

    @property
    def tag(self) -> str:
        """Goes into engine cache keys: an engine is only valid for the library that built it."""
        return f"{self.flavor}-{self.version}"


def default_libfix_dir() -> Path:
    return cache_root() / "trt_rtx_libs"


def _rtx_libs_dir() -> Path | None:
    spec = importlib.util.find_spec(RTX_LIBS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _symlink(target: Path, link: Path) -> None:
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)  # atomic: a concurrent process never sees a half-made link


def prepare_rtx_libs(libfix_dir: Path | None = None) -> tuple[bool, str]:
    """Apply the unversioned-symlink fix if the RTX wheel needs it.

    Returns (parser_safe, folder_used). Must run before the RTX bindings are imported.
    """
    libs = _rtx_libs_dir()
    if libs is None:
        return True, ""  # no libs wheel: the libraries come from the system (a real install)
    if (libs / RTX_UNVERSIONED).exists():
        return True, ""  # already complete (e.g. a system package or an admin added it)
    if _applied:
        return True, _applied[0]  # we loaded the libraries from our folder earlier in this process
    if any(m in sys.modules for m in RTX_MODULES):
        log.warning("TensorRT-RTX was imported before bevpool_ros could load it from a fixed "
                    "library folder: ONNX plugin nodes would abort the process, so the tensorrt "
                    "backend will not parse them in this process")
        return False, ""
    if os.environ.get("BEVPOOL_TRT_NO_LIBFIX"):
        return False, ""
    try:
        d = require_private_dir(Path(libfix_dir) if libfix_dir else default_libfix_dir())
        for name in RTX_LIBS:
            _symlink(libs / name, d / name)
        _symlink(libs / RTX_LIBS[0], d / RTX_UNVERSIONED)
        # RTLD_GLOBAL + load order: the core library, then the parser (both dlopen by $ORIGIN)
        for name in RTX_LIBS:
            ctypes.CDLL(str(d / name), mode=ctypes.RTLD_GLOBAL)
        _applied.append(str(d))
    except OSError as e:
        log.warning("TensorRT-RTX library fix failed (%s): ONNX plugin nodes disabled", e)
        return False, ""
    return True, str(d)


def _try_import(name: str) -> tuple[object | None, str]:
    try:
        return importlib.import_module(name), ""
    except Exception as e:  # stub wheels raise all sorts (ImportError, OSError, RuntimeError)
        return None, f"{type(e).__name__}: {e}".splitlines()[0][:300]


def load_tensorrt(prefer: str | None = None) -> TrtLib:
    """The first importable TensorRT module (cached per process); TensorRTMissing otherwise."""
    prefer = prefer or os.environ.get("BEVPOOL_TRT_MODULE") or ""
    if prefer and prefer not in CANDIDATES:
        raise ValueError(f"BEVPOOL_TRT_MODULE: expected one of {CANDIDATES}, got {prefer!r}")
    return _load(prefer)


@lru_cache(maxsize=None)
def _load(prefer: str) -> TrtLib:
    order = (prefer,) if prefer else CANDIDATES
    errors = []
    for name in order:
        if importlib.util.find_spec(name) is None:
            errors.append(f"{name}: not installed")
            continue
        safe, fixdir = (prepare_rtx_libs() if name in RTX_MODULES else (True, ""))
        mod, err = _try_import(name)
        if mod is None:
            errors.append(f"{name}: {err}")
            continue
        if not hasattr(mod, "Builder"):
            errors.append(f"{name}: imported but has no Builder (stub package?)")
            continue
        lib = TrtLib(mod, name, str(getattr(mod, "__version__", "unknown")), safe, fixdir)
        log.info("TensorRT module: %s %s (onnx plugin nodes %s)", name, lib.version,
                 "ok" if safe else "disabled")
        return lib
    raise TensorRTMissing("no TensorRT Python module: " + "; ".join(errors))
