"""Which BEVPoolV3 plugin a process registers with TensorRT: the C++ library or the Python one.

``tensorrt.plugin`` (node parameter, TensorRTBackend ``trt_plugin``):
  auto     the library when it is found and the TensorRT is full TensorRT, else the Python plugin
  library  the library, or BackendUnavailable saying where it was looked for
  python   the Python plugin (backends/tensorrt/plugin.py)

Both implement the same op (name, version, fields, inputs), so an engine built with one runs
with the other. The library is built for full TensorRT (plugin/CMakeLists.txt); TensorRT-RTX
always gets the Python plugin. Search order for the library: ``tensorrt.plugin_library``
(``trt_plugin_library``), $BEVPOOL_TRT_PLUGIN_LIBRARY, the checkout's build/trt_plugin/,
<sys.prefix>/lib, /usr/local/lib. A process registers one of them, once per TensorRT module:
TensorRT's registry refuses a second creator of the same name.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

PLUGIN_SOURCES = ("auto", "library", "python")
LIBRARY_NAME = "libbevpool_trt_plugin.so"
_CHECKOUT_BUILD = Path(__file__).resolve().parents[3] / "build" / "trt_plugin"
_installed: dict = {}  # trt module -> the PluginSource this process registered with it


class PluginSourceError(RuntimeError):
    """The requested plugin cannot be registered (library missing, unloadable or refused)."""


@dataclass(frozen=True)
class PluginSource:
    kind: str  # library | python
    library: Path | None = None
    reason: str = ""  # why python runs when auto was asked

    def describe(self) -> str:
        if self.kind == "library":
            return f"library {self.library}"
        return f"python ({self.reason})" if self.reason else "python"


def default_dirs() -> list[Path]:
    """Where a build or an install puts the library (build_trt_plugin.sh, cmake --install)."""
    return [_CHECKOUT_BUILD, Path(sys.prefix) / "lib", Path("/usr/local/lib")]


def candidate_paths(explicit: str | None = None) -> list[Path]:
    paths = [Path(p) for p in (explicit, os.environ.get("BEVPOOL_TRT_PLUGIN_LIBRARY")) if p]
    return paths + [d / LIBRARY_NAME for d in default_dirs()]


def choose(requested: str, lib, explicit: str | None = None) -> PluginSource:
    """The plugin for ``requested`` with TensorRT module ``lib`` (trt_import), from the files."""
    if requested not in PLUGIN_SOURCES:
        raise PluginSourceError(
            f"tensorrt.plugin: expected one of {PLUGIN_SOURCES}, got {requested!r}"
        )
    if requested == "python":
        return PluginSource("python")
    if lib.is_rtx:
        if requested == "library":
            raise PluginSourceError(
                f"tensorrt.plugin=library: {LIBRARY_NAME} is built for full TensorRT, "
                f"this is {lib.tag}"
            )
        return PluginSource("python", reason=f"auto: {lib.tag} runs the Python plugin")
    searched = candidate_paths(explicit)
    if (
        explicit and not Path(explicit).is_file()
    ):  # a configured path that is wrong is an error, not a fallback
        raise PluginSourceError(f"tensorrt.plugin_library: no file {explicit}")
    found = next((p for p in searched if p.is_file()), None)
    if found is not None:
        return PluginSource("library", found.resolve())
    if requested == "library":
        raise PluginSourceError(
            f"tensorrt.plugin=library: {LIBRARY_NAME} not found (searched "
            f"{', '.join(map(str, searched))}); build it with scripts/build_trt_plugin.sh"
        )
    return PluginSource("python", reason=f"auto: no {LIBRARY_NAME} found")


def install(lib, source: PluginSource) -> PluginSource:
    """Register ``source``'s creator with ``lib``'s plugin registry (once per process and module);
    returns what is registered. An auto choice of a library that TensorRT refuses falls back."""
    from .plugin import _registered, register_plugin

    trt = lib.trt
    held = _installed.get(trt)
    if held is not None:
        if held.kind != source.kind:
            raise PluginSourceError(
                f"the {held.describe()} plugin is already registered in this process"
            )
        return held
    if source.kind == "library":
        if (
            id(trt) in _registered
        ):  # the Python creator came first: TensorRT would refuse the library's
            raise PluginSourceError("the Python plugin is already registered in this process")
        try:
            handle = trt.get_plugin_registry().load_library(str(source.library))
        except Exception as e:  # the bindings may raise instead of returning None
            raise PluginSourceError(f"TensorRT refused {source.library}: {e}") from e
        if handle is None:
            raise PluginSourceError(f"TensorRT refused {source.library} (see its log)")
    else:
        register_plugin(trt)
    _installed[trt] = source
    return source


def select_and_install(lib, requested: str, explicit: str | None = None) -> PluginSource:
    """choose + install; ``auto`` falls back to the Python plugin when the library is refused."""
    source = choose(requested, lib, explicit)
    try:
        return install(lib, source)
    except PluginSourceError as e:
        if requested != "auto" or source.kind != "library":
            raise
        return install(lib, PluginSource("python", reason=f"auto: {e}"))
