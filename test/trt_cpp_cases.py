"""Cases for the C++ plugin's driver program (plugin/trt/test/plugin_driver.cpp), and its build.

A case is a folder with case.json, one file per plugin field (the bytes PluginConfig.to_fields
gives TensorRT) and, per run (one calibration through the same fields): the input shapes and,
for GPU runs, the inputs, the expected output and a per-element tolerance (float64).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np

from bevpool_ros.backends.tensorrt.builder import plugin_config_for
from bevpool_ros.backends.tensorrt.plugin_config import map_inputs
from bevpool_ros.kernels import fp8
from bevpool_ros.kernels.planning import FP8_KERNEL_OUT_SCALE
from bevpool_ros.kernels.precision import FP8_ATOL, FP8_RTOL
from bevpool_ros.reference import pool_reference

ROOT = Path(__file__).resolve().parent.parent
HEADERS = {
    v: ROOT.parent / "shared" / "third_party" / "tensorrt-oss-headers" / v / "include"
    for v in ("10.13", "11.1")
}
ALL_ARCHS = "87-real 89-real 90-real 110-real 120-real"


def nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc") if os.access(p, os.X_OK)),
        None,
    )


def headers(version: str) -> Path | None:
    """The TensorRT header set, from BEVPOOL_TRT_HEADERS (a folder holding 10.13/ and 11.1/) or
    ../shared/third_party (CI and these machines); None when absent."""
    base = os.environ.get("BEVPOOL_TRT_HEADERS")
    path = Path(base) / version / "include" if base else HEADERS[version]
    return path if (path / "NvInferRuntime.h").is_file() else None


def build(
    build_dir: Path, include_dir: Path, archs: str, timeout: float = 900
) -> tuple[Path, Path, str]:
    """(library, driver, build log) built by scripts/build_trt_plugin.sh."""
    env = {
        **os.environ,
        "BUILD_DIR": str(build_dir),
        "CUDA_ARCHS": archs,
        "CUDACXX": nvcc() or "nvcc",
    }
    proc = subprocess.run(
        [str(ROOT / "scripts" / "build_trt_plugin.sh"), str(include_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    log = proc.stdout + proc.stderr
    if proc.returncode:
        raise RuntimeError(f"build failed ({proc.returncode}):\n{log[-4000:]}")
    return build_dir / "libbevpool_trt_plugin.so", build_dir / "bevpool_trt_plugin_driver", log


def run_driver(
    driver: Path,
    lib: Path,
    case: Path,
    gpu: bool = False,
    record: Path | None = None,
    iters: int = 200,
    timeout: float = 300,
) -> dict:
    cmd = [str(driver), str(lib), str(case), "--iters", str(iters)] + ["--gpu"] * gpu
    if record is not None:
        cmd += ["--launch-record", str(record)]
    # without --gpu the driver checks the no-GPU path (attachToContext refused): on a GPU machine
    # the GPU is hidden from it, as on the CPU machines
    env = None if gpu else dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    lines = proc.stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"ok": False}
    result["returncode"], result["stderr"] = proc.returncode, proc.stderr[-2000:]
    return result


def out_scale(precision: str) -> float:
    return (
        FP8_KERNEL_OUT_SCALE if precision == "fp8" else 1.0
    )  # as TensorRTBackend builds its engines


def config(smaps, precision: str, target):
    """The one plugin config the calibrations share, and each calibration's schedule."""
    scale = out_scale(precision)
    pairs = [plugin_config_for(m, precision, target, out_scale=scale) for m in smaps]
    assert all(c == pairs[0][0] for c, _ in pairs), (
        "calibrations of one rig must share the plugin config"
    )
    return pairs[0][0], [s for _, s in pairs]


def v2_config(smap, target):
    """A static plan (BEVDet's V2 kernel: output zeroed first, then atomics) at this map's lengths:
    the other kind of plan the Python plugin serves (plugin_config.config_for_plan)."""
    from bevpool_ros.backends.tensorrt.plugin_config import config_for_plan
    from bevpool_ros.kernels.table import plan_v2

    _, sched = plugin_config_for(smap, "fp16", target)
    return config_for_plan(smap, sched, plan_v2(smap), "fp16"), [sched]


def random_inputs(smap, precision: str, seed: int):
    """(depth, feat) float32 and the plugin's input arrays (float16, or E4M3 bytes at scale 1)."""
    rng = np.random.default_rng(seed)
    depth = rng.random(smap.depth_shape).astype(np.float32)
    feat = rng.uniform(-1, 1, smap.feat_shape).astype(np.float32)
    if precision == "fp16":
        return depth, feat, depth.astype(np.float16), feat.astype(np.float16)
    return depth, feat, fp8.quantize(depth, 1.0), fp8.quantize(feat, 1.0)


def expected(smap, precision: str, depth, feat, d_in, f_in) -> tuple[np.ndarray, np.ndarray]:
    """FP64 reference and per-element tolerance, the project's rules (test_tensorrt_plugin_gpu):
    fp16 against the reference of the rounded inputs, atol 1e-2 + rtol 1e-3; fp8 against the
    unquantised inputs, FP8_ATOL + FP8_RTOL x sum|depth x feat|, both x the kernel's out scale."""
    scale = out_scale(precision)
    if precision == "fp16":
        ref = pool_reference(d_in, f_in, smap)
        return ref, 1e-2 + 1e-3 * np.abs(ref)
    ref = pool_reference(depth, feat, smap)
    abs_ref = pool_reference(np.abs(depth), np.abs(feat), smap)
    return ref * scale, (FP8_ATOL + FP8_RTOL * abs_ref) * scale


def write_case(directory: Path, cfg, smaps, scheds, with_data: bool = False, seed: int = 0) -> Path:
    """case.json + files; with_data adds inputs, expected outputs and tolerances (GPU runs)."""
    directory.mkdir(parents=True, exist_ok=True)
    fields = []
    for name, arr in cfg.to_fields().items():
        (directory / f"field_{name}.bin").write_bytes(np.ascontiguousarray(arr).tobytes())
        fields.append({"name": name, "file": f"field_{name}.bin"})
    runs = []
    for k, (smap, sched) in enumerate(zip(smaps, scheds)):
        arrays = map_inputs(cfg, smap, sched)
        run = {
            "inputs": [
                {"name": "depth", "shape": list(cfg.input_shapes[0])},
                {"name": "feat", "shape": list(cfg.input_shapes[1])},
            ]
            + [{"name": n, "shape": list(a.shape)} for n, a in arrays.items()]
        }
        if with_data:
            depth, feat, d_in, f_in = random_inputs(smap, cfg.precision, seed + k)
            data = [np.asarray(d_in), np.asarray(f_in), *arrays.values()]
            for spec, arr in zip(run["inputs"], data):
                spec["file"] = f"run{k}_{spec['name']}.bin"
                (directory / spec["file"]).write_bytes(np.ascontiguousarray(arr).tobytes())
            ref, tol = expected(smap, cfg.precision, depth, feat, d_in, f_in)
            for key, arr in (("expected", ref), ("tolerance", tol)):
                run[key] = f"run{k}_{key}.f64"
                (directory / run[key]).write_bytes(np.ascontiguousarray(arr, np.float64).tobytes())
            run["output"] = f"run{k}_out.bin"
        runs.append(run)
    (directory / "case.json").write_text(json.dumps({"fields": fields, "runs": runs}, indent=1))
    return directory


def read_output(directory: Path, k: int, precision: str, shape) -> np.ndarray:
    dtype = np.float16 if precision == "fp8" else np.float32
    return np.fromfile(directory / f"run{k}_out.bin", dtype=dtype).reshape(shape)
