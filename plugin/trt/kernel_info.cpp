#include "kernel_info.h"

namespace bevpool {
namespace {

constexpr KernelInfo kKernels[] = {
#define BEVPOOL_V3_KERNEL(NAME, PRECISION, VEC, G_FIXED, C_FIXED, DEPTH_PAIRS, MAX_THREADS) \
  {#NAME, true, PRECISION, VEC, G_FIXED, C_FIXED, DEPTH_PAIRS, MAX_THREADS},
#define BEVPOOL_OTHER_KERNEL(NAME) {#NAME, false, "", 0, 0, 0, false, 1024},
#include "bevpool_kernel_table.inc"
#undef BEVPOOL_V3_KERNEL
#undef BEVPOOL_OTHER_KERNEL
};

}  // namespace

const KernelInfo* find_kernel(const std::string& name) {
  for (const KernelInfo& k : kKernels)
    if (name == k.name) return &k;
  return nullptr;
}

}  // namespace bevpool
