// The one NVRTC translation unit. The V3 entry points are not written here: nvrtc_build
// generates bevpool_entries.cuh from the kernel table in bevpool_ros/kernels/table.py
// (one source of truth for names, template arguments and launch bounds). Hand-written extern "C"
// kernels (baselines, helpers) come from the headers below; their names are listed in
// launch.HANDWRITTEN_KERNELS.
#include "bevpool_v2.cuh"
#include "bevpool_v2do.cuh"
#include "bevpool_v3.cuh"
#include "bevpool_entries.cuh"
#include "bevpool_convert.cuh"  // per-frame conversions and checks (backends/gpu/frame.py)

// Fixed cost of a launch: the floor's second term.
extern "C" __global__ void bevpool_empty_kernel() {}
