"""tensorrt.plugin: which BEVPoolV3 plugin the tensorrt backend registers (plugin_source.py).

No full TensorRT can be installed here: its part is played by a module made of the stand-in base
classes (backends/tensorrt/standin.py) whose plugin registry also records load_library calls, the
way TensorRT's IPluginRegistry loads a plugin library."""

from __future__ import annotations

import types
from types import SimpleNamespace

import pytest

from bevpool_ros.backends import BackendUnavailable
from bevpool_ros.backends.tensorrt import plugin_source as S
from bevpool_ros.backends.tensorrt import standin
from bevpool_ros.backends.tensorrt.plugin import register_plugin


class Registry(standin._Registry):
    def __init__(self, accept: bool):
        super().__init__()
        self.accept, self.loaded = accept, []

    def load_library(self, path: str):
        self.loaded.append(path)
        if self.accept == "raise":
            raise RuntimeError("dlopen failed")
        return object() if self.accept else None


def full_tensorrt(accept: bool = True) -> SimpleNamespace:
    """A full-TensorRT stand-in with its own registry (one per test: registration is per module)."""
    trt = types.ModuleType("fake_tensorrt")
    trt.__dict__.update({k: v for k, v in vars(standin).items() if not k.startswith("__")})
    registry = Registry(accept)
    trt.get_plugin_registry = lambda: registry
    return SimpleNamespace(trt=trt, is_rtx=False, tag="tensorrt 10.13.0", registry=registry)


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A library file in one default folder; the others empty; no environment override."""
    monkeypatch.delenv("BEVPOOL_TRT_PLUGIN_LIBRARY", raising=False)
    dirs = [tmp_path / "build", tmp_path / "prefix_lib"]
    for d in dirs:
        d.mkdir()
    monkeypatch.setattr(S, "default_dirs", lambda: dirs)
    path = dirs[1] / S.LIBRARY_NAME
    path.write_bytes(b"\x7fELF")
    return path


def test_auto_takes_the_library_when_found(library):
    lib = full_tensorrt()
    got = S.select_and_install(lib, "auto")
    assert got == S.PluginSource("library", library.resolve())
    assert lib.registry.loaded == [str(library.resolve())]
    assert got.describe() == f"library {library.resolve()}"


def test_auto_without_library_runs_the_python_plugin(library):
    library.unlink()
    lib = full_tensorrt()
    got = S.select_and_install(lib, "auto")
    assert got.kind == "python" and "no libbevpool_trt_plugin.so found" in got.describe()
    assert lib.registry.loaded == [] and lib.registry.get_creator("BEVPoolV3", "1", "") is not None


def test_library_requested_but_missing_is_a_clear_error(library):
    library.unlink()
    with pytest.raises(
        S.PluginSourceError, match="not found .*searched .*prefix_lib.*build_trt_plugin.sh"
    ):
        S.select_and_install(full_tensorrt(), "library")


def test_an_explicit_path_that_does_not_exist_is_an_error_not_a_fallback(library, tmp_path):
    for requested in ("auto", "library"):
        with pytest.raises(S.PluginSourceError, match="no file"):
            S.choose(requested, full_tensorrt(), str(tmp_path / "nope.so"))


def test_explicit_path_and_environment_come_first(library, tmp_path, monkeypatch):
    other = tmp_path / "mine.so"
    other.write_bytes(b"\x7fELF")
    assert S.choose("library", full_tensorrt(), str(other)).library == other.resolve()
    monkeypatch.setenv("BEVPOOL_TRT_PLUGIN_LIBRARY", str(other))
    assert S.choose("auto", full_tensorrt()).library == other.resolve()


def test_python_requested_never_looks_for_the_library(library):
    lib = full_tensorrt()
    assert S.select_and_install(lib, "python") == S.PluginSource("python")
    assert lib.registry.loaded == []


def test_tensorrt_rtx_always_runs_the_python_plugin(library):
    rtx = SimpleNamespace(trt=None, is_rtx=True, tag="tensorrt-rtx 1.7")
    assert (
        S.choose("auto", rtx).describe() == "python (auto: tensorrt-rtx 1.7 runs the Python plugin)"
    )
    with pytest.raises(S.PluginSourceError, match="built for full TensorRT"):
        S.choose("library", rtx)


def test_a_refused_library_falls_back_only_under_auto(library):
    lib = full_tensorrt(accept=False)
    got = S.select_and_install(lib, "auto")
    assert got.kind == "python" and "refused" in got.reason
    with pytest.raises(S.PluginSourceError, match="refused"):
        S.select_and_install(full_tensorrt(accept=False), "library")
    raising = S.select_and_install(full_tensorrt(accept="raise"), "auto")
    assert raising.kind == "python" and "dlopen failed" in raising.reason


def test_one_plugin_per_process_and_module(library):
    lib = full_tensorrt()
    first = S.select_and_install(lib, "library")
    assert S.select_and_install(lib, "library") is first  # a second backend reuses it
    with pytest.raises(S.PluginSourceError, match="already registered"):
        S.select_and_install(lib, "python")
    py = full_tensorrt()
    register_plugin(
        py.trt
    )  # e.g. a network built with the Python plugin before the backend started
    with pytest.raises(S.PluginSourceError, match="Python plugin is already registered"):
        S.install(py, S.PluginSource("library", library))


def test_unknown_choice_is_refused():
    with pytest.raises(S.PluginSourceError, match="expected one of"):
        S.choose("cpp", full_tensorrt())


def test_backend_reports_the_plugin_and_refuses_a_missing_library(library, monkeypatch, tmp_path):
    """TensorRTBackend with the GPU faked and the TensorRT module played by the stand-in."""
    from test_tensorrt_backend import fake_rt

    import bevpool_ros.backends.gpu.base as GB
    import bevpool_ros.backends.tensorrt.backend as B
    from bevpool_ros.backends.tensorrt import TensorRTBackend

    monkeypatch.setattr(GB, "get_runtime", lambda ordinal, stream_priority="highest": fake_rt("sm_89"))
    monkeypatch.setattr(B, "_check_network_route", lambda lib: None)
    lib = full_tensorrt()
    monkeypatch.setattr(B, "load_tensorrt", lambda module=None: lib)
    monkeypatch.setattr(B, "check_runnable", lambda lib, arch: None)
    be = TensorRTBackend("fp16", cache_dir=tmp_path / "engines", autotune=False)
    assert be.describe()["trt_plugin"] == f"library {library.resolve()}"
    library.unlink()
    monkeypatch.setattr(B, "load_tensorrt", lambda module=None: full_tensorrt())
    with pytest.raises(
        BackendUnavailable, match="tensorrt.plugin=library: libbevpool_trt_plugin.so not found"
    ):
        TensorRTBackend(
            "fp16", cache_dir=tmp_path / "engines", autotune=False, trt_plugin="library"
        )
