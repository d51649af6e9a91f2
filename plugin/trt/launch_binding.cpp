#include "launch_binding.h"

#include <cstring>

namespace bevpool {

LaunchPlan bind_plan(const PluginConfig& cfg, const std::vector<Shape>& shapes) {
  check_input_shapes(cfg, shapes, false);
  if (!cfg.dynamic()) return cfg.plan;
  LaunchPlan p = cfg.plan;
  PlanArg* ints[5] = {};
  size_t n = 0;
  for (PlanArg& a : p.args)  // plan_v3's i32 order: n_empty, compute_blocks, C, G, pair_stride
    if (a.kind == ArgKind::kI32 && n < 5) ints[n++] = &a;
  // groups per block, the kernel's own definition: (blockDim.x / 32) warps x (32 / G) groups
  const int64_t groups = p.block[0] / 32 * (32 / ints[3]->integer);
  const int64_t slots = shapes[2][0],
                empty = shapes[4][0] - 1;  // empty_cells ends with one pad entry
  if (slots % groups)
    throw ConfigError("BEVPool plugin: slots: " + std::to_string(slots) +
                      " rows is not a multiple of the block (" + std::to_string(groups) + ")");
  const int64_t compute_blocks = slots / groups;
  p.grid[0] = compute_blocks + (empty + groups - 1) / groups;
  ints[0]->integer = empty;
  ints[1]->integer = compute_blocks;
  return p;
}

void KernelArgs::prepare(const PluginConfig& cfg, const LaunchPlan& plan) {
  if (plan.args.size() > kMaxArgs) throw ConfigError("BEVPool plugin: too many kernel arguments");
  count_ = plan.args.size();
  for (size_t i = 0; i < count_; ++i) {
    const PlanArg& a = plan.args[i];
    std::memset(values_[i], 0, sizeof values_[i]);
    source_[i] = kScalar;
    if (a.kind == ArgKind::kBuffer) {
      source_[i] = kOutput;
      for (size_t k = 0; k < cfg.inputs.size(); ++k)
        if (cfg.inputs[k] == a.buffer) source_[i] = static_cast<int>(k);
    } else if (a.kind == ArgKind::kF32) {
      std::memcpy(values_[i], &a.real, sizeof a.real);
    } else if (a.kind == ArgKind::kI64) {
      std::memcpy(values_[i], &a.integer, sizeof a.integer);
    } else {  // i32 / u32: the low 4 bytes (both range-checked when read)
      const uint32_t v = static_cast<uint32_t>(a.integer);
      std::memcpy(values_[i], &v, sizeof v);
    }
  }
}

void** KernelArgs::bind(void const* const* inputs, void* output) {
  for (size_t i = 0; i < count_; ++i) {
    pointers_[i] =
        values_[i];  // set here, not in prepare: a copied plugin points at its own values
    if (source_[i] == kScalar) continue;
    const void* p = source_[i] == kOutput ? output : inputs[source_[i]];
    std::memcpy(values_[i], &p, sizeof p);
  }
  return pointers_;
}

}  // namespace bevpool
