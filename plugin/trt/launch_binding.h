// A configured launch bound to the current map lengths (once per shape change, as the Python
// plugin's bind_plan), and its kernel arguments laid out once so enqueue only writes pointers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plugin_config.h"

namespace bevpool {

// The template plan with grid.x and the counts (n_empty, compute_blocks) for these input
// shapes (cfg.inputs order); a static plan is returned as configured. Throws ConfigError.
LaunchPlan bind_plan(const PluginConfig& cfg, const std::vector<Shape>& shapes);

class KernelArgs {
 public:
  static constexpr size_t kMaxArgs = 16;

  // Scalars are written now; buffers are recorded by position (input index or the output).
  void prepare(const PluginConfig& cfg, const LaunchPlan& plan);
  // The argument array for cudaLaunchKernel with these device pointers.
  void** bind(void const* const* inputs, void* output);
  size_t size() const { return count_; }

 private:
  static constexpr int kScalar = -2, kOutput = -1;
  alignas(8) unsigned char values_[kMaxArgs][8] = {};
  void* pointers_[kMaxArgs] = {};
  int source_[kMaxArgs] = {};  // input index, kOutput or kScalar
  size_t count_ = 0;
};

}  // namespace bevpool
