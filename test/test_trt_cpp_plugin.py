"""The TensorRT C++ plugin library (plugin/CMakeLists.txt) on a machine without TensorRT or GPU.

Built against both TensorRT header sets with warnings as errors (10.13, JetPack 7 / Thor: all five
architectures; 11.1: sm_90 only, to keep CI short). The driver program then plays TensorRT's
part through the library's exported entry points for the nuScenes rig and two rig variants at
FP16 and FP8: everything but enqueue (test_trt_cpp_plugin_gpu.py runs that on a GPU). The
launch it binds per calibration is compared with the Python plugin's bind_plan, its machine code
with the NVRTC build's, and bad fields are refused by both plugins alike.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import cubin_elf
import numpy as np
import pytest
import rig_variants as V
import trt_cpp_cases as T
from tensorrt_helpers import recalibrated

from bevpool_ros.backends.tensorrt import cpp_tables
from bevpool_ros.backends.tensorrt.cpp_tables import kernel_table as L  # the one import
from bevpool_ros.backends.tensorrt.plugin_config import (
    PluginConfig,
    PluginConfigError,
    bind_plan,
    map_inputs,
)
from bevpool_ros.backends.tensorrt.targets import known_target
from bevpool_ros.scatter_map import build_scatter_map
from bevpool_ros.workloads import base_rig

BUILDS = {"10.13": T.ALL_ARCHS, "11.1": "90-real"}
SMS = {87, 89, 90, 110, 120}
# Kernels whose sm_90 machine code differs between nvcc and NVRTC 13.0: the PTX of the two front
# ends (cudafe++ vs NVRTC) already differs for them (operand order, register numbering), same
# arithmetic. Every other kernel is byte-identical; outputs are compared on the GPU.
FRONTEND_DIFFERENT = {k.name for k in L.V3_KERNELS.values() if k.g_fixed} | {"bevconv_f32_to_f16"}


def test_generated_files_are_current():
    assert cpp_tables.stale_files() == [], "run: python -m bevpool_ros.backends.tensorrt.cpp_tables"


def test_generator_check_mode_reports_a_stale_file(tmp_path):
    cpp_tables.write(tmp_path)
    assert cpp_tables.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "bevpool_kernel_table.inc").write_text("// edited\n")
    assert cpp_tables.main(["--check", "--dir", str(tmp_path)]) == 1


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    if T.nvcc() is None:
        pytest.skip("no nvcc (install the CUDA toolkit's nvcc to build the plugin library)")
    out = {}
    for version, archs in BUILDS.items():
        include = T.headers(version)
        if include is None:
            pytest.skip(
                f"TensorRT {version} headers not found "
                "(../shared/third_party or BEVPOOL_TRT_HEADERS)"
            )
        t0 = time.monotonic()
        lib, driver, log = T.build(tmp_path_factory.mktemp(f"trt{version}"), include, archs)
        out[version] = {"lib": lib, "driver": driver, "log": log, "seconds": time.monotonic() - t0}
    return out


@pytest.mark.parametrize("version", sorted(BUILDS))
def test_builds_without_warnings(builds, version):
    b = builds[version]
    assert b["lib"].is_file() and b["driver"].is_file()
    assert "warning" not in b["log"].lower(), b["log"][-3000:]


@pytest.mark.parametrize("version", sorted(BUILDS))
def test_library_exports_the_tensorrt_entry_points_and_links_no_tensorrt(builds, version):
    lib = str(builds[version]["lib"])
    dynamic = subprocess.run(
        ["readelf", "-d", lib], capture_output=True, text=True, check=True
    ).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert not any("nvinfer" in n or "cudart" in n or "cuda" in n for n in needed), needed
    symbols = subprocess.run(
        ["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True
    ).stdout
    assert sorted(line.split()[-1] for line in symbols.splitlines()) == [
        "getCreators",
        "setLoggerFinder",
    ]


def test_library_holds_every_kernel_for_every_architecture(builds):
    images = cubin_elf.embedded(builds["10.13"]["lib"].read_bytes())
    assert set(images) == SMS
    for sm, image in images.items():
        assert set(image.code) == set(L.ALL_KERNELS), sm


def test_machine_code_equals_the_nvrtc_build(builds):
    pytest.importorskip("cuda.bindings.nvrtc")
    from bevpool_ros.device.nvrtc_build import compile_source

    nvrtc = cubin_elf.parse(compile_source("sm_90")[0])
    ours = cubin_elf.embedded(builds["11.1"]["lib"].read_bytes())[90]
    assert set(ours.code) == set(nvrtc.code) == set(L.ALL_KERNELS)
    identical = {k for k in nvrtc.code if ours.code[k] == nvrtc.code[k]}
    assert set(nvrtc.code) - identical <= FRONTEND_DIFFERENT
    assert {k: ours.registers[k] for k in identical} == {k: nvrtc.registers[k] for k in identical}
    for k in set(nvrtc.code) - identical:  # same source, same launch bounds: close register use
        assert abs(ours.registers[k] - nvrtc.registers[k]) <= 4, (
            k,
            ours.registers[k],
            nvrtc.registers[k],
        )


# floating-point instructions of a PTX entry (type, rounding), in program order
FP_OP = re.compile(
    r"^\s*(?:@!?%p\w* )?((?:add|sub|mul|fma|mad|cvt|neg|abs|min|max|div|rcp|sqrt)"
    r"\.\S*(?:f16|f32|f64|bf16|e4m3)\S*)",
    re.M,
)


def fp_sequences(ptx: str) -> dict[str, list[str]]:
    out = {}
    for m in re.finditer(r"\.entry (\w+)\(", ptx):
        out[m.group(1)] = FP_OP.findall(ptx[m.start() : ptx.index("\n}\n", m.start())])
    return out


def test_ptx_does_the_same_arithmetic_as_the_nvrtc_build(tmp_path):
    """nvcc on the library's kernel source with its flags vs NVRTC: every entry performs the same
    floating-point instructions in the same order (the front ends differ only in register
    numbering and address arithmetic), so the two builds compute the same bits."""
    pytest.importorskip("cuda.bindings.nvrtc")
    if T.nvcc() is None:
        pytest.skip("no nvcc")
    from bevpool_ros.device.nvrtc_build import compile_source

    out = tmp_path / "kernels.ptx"
    defines = list(cpp_tables.kernel_table.compile_defines())  # "-D..." as NVRTC gets them
    plugin = T.ROOT / "plugin"
    subprocess.run(
        [
            T.nvcc(),
            "-ptx",
            "-arch=sm_90",
            "-std=c++17",
            "-O3",
            "-DNDEBUG",
            *defines,
            f"-I{plugin}",
            f"-I{plugin / 'generated'}",
            "-o",
            str(out),
            str(plugin / "trt" / "kernel_functions.cu"),
        ],
        check=True,
        timeout=600,
    )
    ours = fp_sequences(out.read_text())
    nvrtc = fp_sequences(compile_source("sm_90", want="ptx")[0].decode(errors="replace"))
    assert set(ours) == set(nvrtc) == set(L.ALL_KERNELS)
    assert sum(len(v) for v in nvrtc.values()) > 1000
    assert {k for k in nvrtc if ours[k] != nvrtc[k]} == set()


def cases():
    rig = base_rig()
    yield "nuscenes", [build_scatter_map(rig), build_scatter_map(recalibrated(rig))]
    for name in ("tri_c17", "quad_c64_d40_z2"):
        yield name, [build_scatter_map(V.rig(name))]


CASES = dict(cases())


def packed(cfg, plan) -> list[str]:
    """The argument bytes driver.launch_args hands cuLaunchKernel (pointer or _SCALAR dtype),
    with input k at 0x1000 * (k + 1) and the output at 0xF000, as 8-byte hex words."""
    from bevpool_ros.device.driver import _SCALAR

    address = {name: 0x1000 * (k + 1) for k, name in enumerate(cfg.inputs)} | {"out": 0xF000}
    words = []
    for kind, value in plan.args:
        if kind == "buf":
            raw = np.array([address[value]], np.uint64).tobytes()
        else:
            raw = np.array([value], _SCALAR[kind]).tobytes()
        words.append(f"{int.from_bytes(raw.ljust(8, bytes(1)), 'little'):016x}")
    return words


def launch_as_record(cfg, plan) -> dict:
    return {
        "packed": packed(cfg, plan),
        "kernel": plan.kernel,
        "grid": list(plan.grid),
        "block": list(plan.block),
        "shared_bytes": plan.shared_bytes,
        "out_dtype": plan.out_dtype,
        "zero_output_first": plan.zero_output_first,
        "args": [[k, float(np.float32(v)) if k == "f32" else v] for k, v in plan.args],
    }


@pytest.mark.parametrize("precision", ["fp16", "fp8"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_driver_plays_tensorrt_and_binds_the_python_launch(builds, tmp_path, name, precision):
    maps = CASES[name]
    cfg, scheds = T.config(maps, precision, known_target("sm_89"))
    case = T.write_case(tmp_path / "case", cfg, maps, scheds)
    for version, b in builds.items():
        record = tmp_path / f"launch_{version}.json"
        result = T.run_driver(b["driver"], b["lib"], case, record=record)
        assert result["ok"] and result["returncode"] == 0, (version, result)
        failed = [step for step, ok in result["steps"].items() if not ok]
        assert not failed and len(result["steps"]) >= 20, failed
        assert "attachToContext without a GPU: refused with a logged reason" in result["steps"]
        python = []  # what the Python plugin's on_shape_change binds, per calibration
        for smap, sched in zip(maps, scheds):
            shapes = [
                *cfg.input_shapes[:2],
                *(a.shape for a in map_inputs(cfg, smap, sched).values()),
            ]
            python.append(launch_as_record(cfg, bind_plan(cfg, shapes)))
        assert json.loads(record.read_text()) == python


def test_driver_runs_a_static_v2_plan(builds, tmp_path):
    """A V2 plan (fixed map lengths, output zeroed by a memset first) through the same steps."""
    smap = CASES["nuscenes"][0]
    cfg, scheds = T.v2_config(smap, known_target("sm_89"))
    assert not cfg.dynamic and cfg.plan.zero_output_first
    case = T.write_case(tmp_path / "case", cfg, [smap], scheds)
    record = tmp_path / "launch.json"
    result = T.run_driver(builds["11.1"]["driver"], builds["11.1"]["lib"], case, record=record)
    assert result["ok"], result
    assert json.loads(record.read_text()) == [launch_as_record(cfg, cfg.plan)]


def mutate(fields: dict, name: str, edit) -> dict:
    out = dict(fields)
    if fields[name].dtype == np.int32:
        out[name] = np.asarray(edit(fields[name].tolist()), np.int32)
    else:
        out[name] = np.frombuffer(edit(fields[name].tobytes().decode()).encode(), np.int8).copy()
    return out


def plan_edit(**changes):
    def edit(text):
        plan = json.loads(text)
        plan.update(changes)
        return json.dumps(plan, sort_keys=True)

    return edit


BAD_FIELDS = {
    "unknown kernel": ("plan", plan_edit(kernel="bevpool_v3_fp16_nope")),
    "plan field from a newer launch description": ("plan", plan_edit(stream_priority=1)),
    "fp32 precision": ("precision", lambda t: "fp32"),
    "channels disagree with feat": ("channels", lambda v: [v[0] + 1]),
    "inputs out of order": ("input_names", lambda t: "feat,depth," + t.split(",", 2)[2]),
    "output dtype of the other precision": ("plan", plan_edit(out_dtype="float16")),
    "malformed input shapes": ("input_shapes", lambda t: t[:-1]),
}


@pytest.mark.parametrize("what", sorted(BAD_FIELDS))
def test_both_plugins_refuse_the_same_bad_fields(builds, tmp_path, what):
    smap = CASES["nuscenes"][0]
    cfg, scheds = T.config([smap], "fp16", known_target("sm_89"))
    field, edit = BAD_FIELDS[what]
    fields = mutate(cfg.to_fields(), field, edit)
    with pytest.raises(PluginConfigError):
        PluginConfig.from_fields(fields)
    case = T.write_case(tmp_path / "case", cfg, [smap], scheds)
    for name, arr in fields.items():
        (case / f"field_{name}.bin").write_bytes(arr.tobytes())
    result = T.run_driver(builds["11.1"]["driver"], builds["11.1"]["lib"], case)
    assert not result["ok"] and result["returncode"] == 1
    assert result["error"].startswith("createPlugin failed: BEVPool plugin:"), result


def test_trtexec_inputs_and_the_onnx_node_drive_the_library(builds, tmp_path):
    """bevpool-trtexec-inputs: input files of the engine's dtypes and the schedule's shapes, flags
    naming them; its ONNX node's attributes are the plugin fields the library accepts."""
    import onnx

    from bevpool_ros.backends.tensorrt import trtexec_inputs

    rig = T.ROOT / "config" / "rigs" / "nuscenes_bevdet_r50.yaml"
    onnx_path = tmp_path / "op.onnx"
    args = ["--rig", str(rig), "--precision", "fp8", "--arch", "sm_89", "--out", str(tmp_path)]
    assert trtexec_inputs.main([*args, "--onnx", str(onnx_path)]) == 0
    from bevpool_ros.backends.tensorrt.builder import plugin_config_for

    smap = CASES["nuscenes"][0]
    cfg, sched = plugin_config_for(smap, "fp8", known_target("sm_89"))  # as bevpool-onnx-insert
    scheds = [sched]
    arrays = map_inputs(cfg, smap, sched)
    for name, arr in arrays.items():
        assert (tmp_path / f"{name}.bin").read_bytes() == arr.tobytes()
    assert (tmp_path / "depth.bin").stat().st_size == int(np.prod(cfg.depth_shape))  # E4M3 bytes
    (node,) = onnx.load(str(onnx_path)).graph.node
    fields = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    as_fields = {
        k: np.asarray(v, np.int32) if isinstance(v, list) else np.frombuffer(v, np.int8).copy()
        for k, v in fields.items()
    }
    assert PluginConfig.from_fields(as_fields) == cfg
    case = T.write_case(tmp_path / "case", cfg, [smap], scheds)
    for name, arr in as_fields.items():
        (case / f"field_{name}.bin").write_bytes(arr.tobytes())
    result = T.run_driver(builds["11.1"]["driver"], builds["11.1"]["lib"], case)
    assert result["ok"], result
