"""Finding TensorRT, and the TensorRT-RTX library fix (each case in a fresh interpreter)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_py(code: str, tmp_path, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"), **env)
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=e, capture_output=True, text=True,
                          timeout=120)


def rtx_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorrt_rtx_bindings") is not None


needs_rtx = pytest.mark.skipif(not rtx_installed(), reason="TensorRT-RTX wheels not installed")

BUILD = """
import json, sys
sys.path.insert(0, "test")
from tensorrt_helpers import tiny_map
from bevpool_ros.backends.tensorrt.trt_import import load_tensorrt
from bevpool_ros.backends.tensorrt.builder import build_engine, plugin_config_for
from bevpool_ros.backends.tensorrt.network import NetworkError
from bevpool_ros.backends.tensorrt.targets import known_target
lib = load_tensorrt()
try:
    cfg, _ = plugin_config_for(tiny_map(), "fp16", known_target("sm_89"))
    n = len(build_engine(lib, cfg, known_target("sm_89")).data)
except NetworkError as e:
    n = str(e)
print(json.dumps({"safe": lib.onnx_parser_safe, "fix": lib.libfix, "module": lib.module_name, "built": n}))
"""


@needs_rtx
def test_fresh_process_gets_the_private_fix_and_builds(tmp_path):
    r = run_py(BUILD, tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["module"] == "tensorrt_rtx_bindings" and isinstance(out["built"], int)
    libs = Path(__import__("importlib").util.find_spec("tensorrt_rtx_libs").submodule_search_locations[0])
    if (libs / "libtensorrt_rtx.so").exists():
        assert out["fix"] == ""  # the wheel folder is already complete: nothing to do
        return
    assert out["safe"] and out["fix"] == str(tmp_path / "xdg" / "bevpool_ros" / "trt_rtx_libs")
    fix = Path(out["fix"])
    assert stat.S_IMODE(fix.stat().st_mode) == 0o700
    assert os.readlink(fix / "libtensorrt_rtx.so") == str(libs / "libtensorrt_rtx.so.1")
    assert not (libs / "libtensorrt_rtx.so").exists()  # site-packages untouched


@needs_rtx
def test_bindings_imported_first_refuse_instead_of_abort(tmp_path):
    libs = Path(__import__("importlib").util.find_spec("tensorrt_rtx_libs").submodule_search_locations[0])
    if (libs / "libtensorrt_rtx.so").exists():
        pytest.skip("wheel folder already has libtensorrt_rtx.so: nothing can go wrong")
    r = run_py("import tensorrt_rtx_bindings\n" + BUILD, tmp_path)
    assert r.returncode == 0, r.stderr  # without the guard this process dies with SIGABRT (134)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["safe"] is False and "would abort" in out["built"]


def test_forcing_a_missing_module_names_it(tmp_path):
    code = ("from bevpool_ros.backends.tensorrt.trt_import import load_tensorrt, TensorRTMissing\n"
            "try:\n    load_tensorrt()\nexcept TensorRTMissing as e:\n    print('MISSING', e)\n")
    r = run_py(code, tmp_path, BEVPOOL_TRT_MODULE="tensorrt")
    assert r.returncode == 0, r.stderr
    assert "MISSING no TensorRT Python module: tensorrt:" in r.stdout


def test_unknown_module_name_is_a_config_error(tmp_path):
    code = ("from bevpool_ros.backends.tensorrt.trt_import import load_tensorrt\n"
            "try:\n    load_tensorrt()\nexcept ValueError as e:\n    print('BAD', e)\n")
    r = run_py(code, tmp_path, BEVPOOL_TRT_MODULE="tensorrt_llm")
    assert "BAD BEVPOOL_TRT_MODULE" in r.stdout


def test_no_gpu_means_tensorrt_is_never_loaded(tmp_path):
    """Node start-up on a CPU machine: backend 'best' must not pay for loading TensorRT (~0.8 s)."""
    code = ("import sys\nfrom bevpool_ros.device.driver import live_l2_bytes\n"
            "from bevpool_ros.backends import create_backend\n"
            "b = create_backend('best', 'fp16')\n"
            "print('GPU' if live_l2_bytes() else 'NOGPU', b.name, "
            "any(m.startswith('tensorrt') for m in sys.modules))\n")
    r = run_py(code, tmp_path)
    assert r.returncode == 0, r.stderr
    gpu, name, loaded = r.stdout.split()
    if gpu == "GPU":
        pytest.skip("a GPU is present")
    assert name == "cpu" and loaded == "False"
