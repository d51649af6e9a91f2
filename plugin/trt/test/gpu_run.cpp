#include "gpu_run.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace driver {
namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    v = man ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

#define CUDA_OK(call)                                                               \
  do {                                                                              \
    const cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

std::vector<double> output_values(const std::vector<unsigned char>& raw, bool half) {
  std::vector<double> v(raw.size() / (half ? 2 : 4));
  for (size_t i = 0; i < v.size(); ++i) {
    if (half) {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      v[i] = half_to_float(h);
    } else {
      float f;
      std::memcpy(&f, raw.data() + 4 * i, 4);
      v[i] = f;
    }
  }
  return v;
}

void compare(const std::vector<double>& out, const Run& run, RunResult& r) {
  const std::string exp = read_file(run.expected), tol = read_file(run.tolerance);
  if (exp.size() != out.size() * 8 || tol.size() != out.size() * 8)
    throw std::runtime_error("expected/tolerance files do not match the output size");
  const double* e = reinterpret_cast<const double*>(exp.data());
  const double* t = reinterpret_cast<const double*>(tol.data());
  r.max_abs_err = 0;
  r.over_tolerance = r.not_finite = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i])) {
      ++r.not_finite;
      continue;
    }
    const double err = std::fabs(out[i] - e[i]);
    r.max_abs_err = std::max(r.max_abs_err, err);
    r.over_tolerance += err > t[i];
  }
}

}  // namespace

RunResult run_on_gpu(nvinfer1::IPluginV3OneRuntime* rt, nvinfer1::IPluginV3OneRuntime* timing,
                     const bevpool::PluginConfig& cfg, const Run& run, int iters) {
  RunResult r;
  const size_t n_in = run.shapes.size();
  std::vector<void*> dev(n_in, nullptr);
  std::vector<nvinfer1::PluginTensorDesc> in_desc(n_in);
  for (size_t i = 0; i < n_in; ++i) {
    const std::string bytes = read_file(run.files[i]);
    const int64_t item = i >= 2 ? 4 : (cfg.fp8() ? 1 : 2);
    if (static_cast<int64_t>(bytes.size()) != volume(run.shapes[i]) * item)
      throw std::runtime_error(run.files[i] + ": size does not match its shape");
    CUDA_OK(cudaMalloc(&dev[i], bytes.size()));
    CUDA_OK(cudaMemcpy(dev[i], bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    in_desc[i].dims = dims_of(run.shapes[i]);
  }
  const size_t out_bytes = static_cast<size_t>(cfg.output_bytes());
  void* out = nullptr;
  CUDA_OK(cudaMalloc(&out, out_bytes));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreate(&stream));  // blocking: ordered after the copies above
  CUDA_OK(cudaDeviceSynchronize());
  nvinfer1::PluginTensorDesc out_desc{};
  out_desc.dims = dims_of(cfg.output_shape());
  std::vector<unsigned char> host(out_bytes);

  auto enqueue = [&]() {
    if (rt->enqueue(in_desc.data(), &out_desc, dev.data(), &out, nullptr, stream) != 0)
      throw std::runtime_error("enqueue returned an error");
  };
  auto result = [&]() {
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(host.data(), out, out_bytes, cudaMemcpyDeviceToHost));
    return output_values(host, cfg.fp8());
  };
  // eager: output poisoned with NaN (all ones) first, so an unwritten cell cannot pass
  CUDA_OK(cudaMemsetAsync(out, 0xff, out_bytes, stream));
  enqueue();
  const std::vector<double> eager = result();
  if (!run.output.empty()) write_file(run.output, host.data(), host.size());
  compare(eager, run, r);
  r.ok = r.not_finite == 0 && r.over_tolerance == 0;

  // captured in a CUDA graph (what TensorRT does under --useCudaGraph), replayed: within the
  // tolerance, and the same bytes unless the kernel sums with atomics (V2 plans)
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  enqueue();
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaMemsetAsync(out, 0xff, out_bytes, stream));
  CUDA_OK(cudaGraphLaunch(exec, stream));
  const std::vector<double> replayed = result();
  r.graph_same =
      std::equal(eager.begin(), eager.end(), replayed.begin(), replayed.end(),
                 [](double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); });
  RunResult replay_check;
  compare(replayed, run, replay_check);
  r.graph_ok = replay_check.not_finite == 0 && replay_check.over_tolerance == 0;

  CUDA_OK(cudaMemsetAsync(out, 0xff, out_bytes, stream));
  const bool timed =
      timing->enqueue(in_desc.data(), &out_desc, dev.data(), &out, nullptr, stream) == 0;
  const std::vector<double> timing_out = result();
  r.timing_zeroes =
      timed && std::all_of(timing_out.begin(), timing_out.end(), [](double v) { return v == 0; });

  // host time of one enqueue call (TensorRT calls it every inference without a graph)
  std::vector<double> us;
  cudaEvent_t t0, t1;
  CUDA_OK(cudaEventCreate(&t0));
  CUDA_OK(cudaEventCreate(&t1));
  CUDA_OK(cudaEventRecord(t0, stream));
  for (int i = 0; i < iters; ++i) {
    const auto a = std::chrono::steady_clock::now();
    enqueue();
    const auto b = std::chrono::steady_clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  CUDA_OK(cudaEventRecord(t1, stream));
  CUDA_OK(cudaEventSynchronize(t1));
  float ms = 0;
  CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
  std::sort(us.begin(), us.end());
  r.host_us_p50 = us.empty() ? 0 : us[us.size() / 2];
  for (double u : us) r.host_us_mean += u / static_cast<double>(us.size());
  r.gpu_us_per_enqueue = iters ? 1000.0 * ms / iters : 0;

  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  cudaFree(out);
  for (void* p : dev) cudaFree(p);
  return r;
}

}  // namespace driver
