// The NVRTC translation unit, compiled by nvcc unchanged (so the machine code is the NVRTC
// build's; test/test_trt_cpp_plugin.py compares them), plus the name -> function table.
#include "bevpool_kernels.cu"
#include "kernel_functions.h"

namespace bevpool {
namespace {

struct KernelFunction {
  const char* name;
  const void* function;
};

const KernelFunction kFunctions[] = {
#define BEVPOOL_V3_KERNEL(NAME, ...) {#NAME, reinterpret_cast<const void*>(&NAME)},
#define BEVPOOL_OTHER_KERNEL(NAME) {#NAME, reinterpret_cast<const void*>(&NAME)},
#include "bevpool_kernel_table.inc"
#undef BEVPOOL_V3_KERNEL
#undef BEVPOOL_OTHER_KERNEL
};

}  // namespace

const void* kernel_function(const std::string& name) {
  for (const KernelFunction& k : kFunctions)
    if (name == k.name) return k.function;
  return nullptr;
}

}  // namespace bevpool
