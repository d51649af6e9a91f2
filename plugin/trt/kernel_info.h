// The kernel table as the C++ side sees it: one row per kernel the library contains, generated
// from bevpool_ros's kernel table (plugin/generated/bevpool_kernel_table.inc).
#pragma once
#include <string>

namespace bevpool {

struct KernelInfo {
  const char* name;
  bool v3;                // a V3 entry (map inputs of any length); else a hand-written kernel
  const char* precision;  // V3 rows: "fp16" | "fp8"
  int vec;                // channels per lane
  int g_fixed;            // lanes per group compiled in (0: from the launch)
  int c_fixed;            // compiled for this channel count only (0: any)
  bool depth_pairs;       // reads depth-pair schedules
  int max_threads;        // __launch_bounds__
};

// nullptr for a name the library does not contain
const KernelInfo* find_kernel(const std::string& name);

}  // namespace bevpool
