#!/usr/bin/env bash
# Build libbevpool_trt_plugin.so (plugin/CMakeLists.txt) and its test driver.
# Usage: scripts/build_trt_plugin.sh [TENSORRT_INCLUDE_DIR]
#   TENSORRT_INCLUDE_DIR  folder with NvInferRuntime.h; omitted: CMake searches the usual
#                         install places (JetPack/DriveOS: /usr/include/aarch64-linux-gnu)
#   BUILD_DIR             output folder (default <repo>/build/trt_plugin; relative: to the caller)
#   CUDA_ARCHS            e.g. "90-real" (default: 87 89 90 110 120, machine code only)
#   CUDACXX               nvcc to use (default: the one on PATH, else /usr/local/cuda/bin/nvcc)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$repo/build/trt_plugin}
mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
args=(-S "$repo/plugin" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release)
if [ $# -ge 1 ] && [ -n "$1" ]; then
  if [ ! -f "$1/NvInferRuntime.h" ]; then
    echo "build_trt_plugin: no NvInferRuntime.h in $1" >&2
    exit 2
  fi
  args+=("-DTENSORRT_INCLUDE_DIR=$(cd "$1" && pwd)")
fi
if [ -n "${CUDA_ARCHS:-}" ]; then args+=("-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS// /;}"); fi
if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
cmake "${args[@]}"
cmake --build "$build_dir" -j "$(nproc)"
echo "built $build_dir/libbevpool_trt_plugin.so"
