// The GPU half of the driver: one run (a calibration) through an attached plugin's enqueue,
// eager and replayed from a CUDA graph, over a NaN-poisoned output, against the expected output;
// a build-phase plugin's enqueue; host time per enqueue call.
#pragma once
#include <NvInferRuntime.h>

#include <cstdint>

#include "driver_case.h"

namespace driver {

struct RunResult {
  bool ok = false, graph_ok = false, graph_same = false, timing_zeroes = false;
  double max_abs_err = 0;
  int64_t over_tolerance = 0, not_finite = 0;
  double host_us_p50 = 0, host_us_mean = 0, gpu_us_per_enqueue = 0;
};

// `timing`: a build-phase plugin (what the builder times): its enqueue must only zero the output.
RunResult run_on_gpu(nvinfer1::IPluginV3OneRuntime* rt, nvinfer1::IPluginV3OneRuntime* timing,
                     const bevpool::PluginConfig& cfg, const Run& run, int iters);

}  // namespace driver
