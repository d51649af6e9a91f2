"""The TensorRT C++ plugin library's enqueue on a GPU (no TensorRT needed): bench/trt_cpp_plugin.py
builds the library for this GPU and drives it as TensorRT would on the nuScenes rig (two
calibrations through one config) and two rig variants, FP16 and FP8, over NaN-poisoned outputs
against the FP64 reference, eager and from a CUDA graph, and bitwise against the NVRTC build."""

from __future__ import annotations

import importlib.util
import json

import pytest
import trt_cpp_cases as T

pytestmark = pytest.mark.gpu


def test_cpp_plugin_enqueue_matches_the_reference_and_the_nvrtc_build(tmp_path):
    if T.nvcc() is None:
        pytest.skip("no nvcc to build the plugin library")
    if T.headers("10.13") is None:
        pytest.skip(
            "TensorRT 10.13 headers not found (../shared/third_party or BEVPOOL_TRT_HEADERS)"
        )
    spec = importlib.util.spec_from_file_location(
        "trt_cpp_plugin", T.ROOT / "bench" / "trt_cpp_plugin.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rc = bench.main(
        ["--build-dir", str(tmp_path / "build"), "--iters", "20", "--out", str(tmp_path)]
    )
    report = json.loads(next(tmp_path.glob("trt_cpp_plugin*.json")).read_text())
    bad = {k: r for k, r in report["results"].items() if not r["ok"]}
    assert rc == 0 and report["all_ok"] and not bad, bad
