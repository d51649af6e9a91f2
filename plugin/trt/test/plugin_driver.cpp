// bevpool_trt_plugin_driver: drives libbevpool_trt_plugin.so the way TensorRT does, with no
// TensorRT library: dlopen -> setLoggerFinder/getCreators -> creator -> build-phase plugin from
// fields (output types and shapes, format combinations, configure, workspace) -> serialize ->
// runtime plugin from the serialized fields -> clone -> onShapeChange per calibration ->
// attachToContext -> enqueue (eager, then captured in a CUDA graph) against expected outputs.
//
//   bevpool_trt_plugin_driver LIB CASE_DIR [--gpu] [--iters N] [--launch-record FILE]
//
// CASE_DIR/case.json (written by test/trt_cpp_cases.py): the plugin fields (one file each) and
// runs (one calibration each: input files and shapes, expected output and tolerance as float64).
// Without --gpu everything but enqueue runs, and attachToContext must refuse (no CUDA device).
// Prints one JSON object: every step's result, per run the errors and host time per enqueue.
#include <NvInferRuntime.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "json_value.h"
#include "launch_binding.h"
#include "plugin_config.h"

namespace {

using bevpool::JsonValue;
using bevpool::Shape;
using nvinfer1::DataType;

// ---- what TensorRT would supply ----------------------------------------------------------------
class CountingLogger : public nvinfer1::ILogger {
 public:
  void log(Severity severity, char const* msg) noexcept override {
    if (severity <= Severity::kERROR) last_error = msg;
    errors += severity <= Severity::kERROR;
  }
  int errors = 0;
  std::string last_error;
};

class Finder : public nvinfer1::ILoggerFinder {
 public:
  nvinfer1::ILogger* findLogger() override { return &logger; }
  CountingLogger logger;
};

class ConstantExpr : public nvinfer1::apiv::VDimensionExpr {
 public:
  explicit ConstantExpr(int64_t v) : value_(v) {}
  bool isConstant() const override { return true; }
  int64_t getConstantValue() const override { return value_; }
  bool isSizeTensor() const override { return false; }

 private:
  int64_t value_;
};

class Expr : public nvinfer1::IDimensionExpr {
 public:
  explicit Expr(int64_t v) : impl_(v) { mImpl = &impl_; }

 private:
  ConstantExpr impl_;
};

// Constants only: the plugin's output shape does not depend on its inputs.
class ExprBuilderImpl : public nvinfer1::apiv::VExprBuilder {
 public:
  nvinfer1::IDimensionExpr const* constant(int64_t value) override {
    exprs_.push_back(std::make_unique<Expr>(value));
    return exprs_.back().get();
  }
  nvinfer1::IDimensionExpr const* operation(nvinfer1::DimensionOperation,
                                            nvinfer1::IDimensionExpr const&,
                                            nvinfer1::IDimensionExpr const&) override {
    return nullptr;
  }
  nvinfer1::IDimensionExpr const* declareSizeTensor(int32_t, nvinfer1::IDimensionExpr const&,
                                                    nvinfer1::IDimensionExpr const&) override {
    return nullptr;
  }

 private:
  std::vector<std::unique_ptr<Expr>> exprs_;
};

class ExprBuilder : public nvinfer1::IExprBuilder {
 public:
  ExprBuilder() { mImpl = &impl_; }

 private:
  ExprBuilderImpl impl_;
};

// ---- small helpers -----------------------------------------------------------------------------
std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_file(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!f) throw std::runtime_error("cannot write " + path);
}

nvinfer1::Dims dims_of(const Shape& s) {
  nvinfer1::Dims d{};
  d.nbDims = static_cast<int32_t>(s.size());
  for (size_t i = 0; i < s.size(); ++i) d.d[i] = s[i];
  return d;
}

int64_t volume(const Shape& s) {
  int64_t v = 1;
  for (int64_t x : s) v *= x;
  return v;
}

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

std::string json_text(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o + "\"";
}

// Step results, printed as the JSON object's "steps".
struct Report {
  std::vector<std::pair<std::string, bool>> steps;
  bool ok = true;
  void check(const std::string& what, bool good) {
    steps.emplace_back(what, good);
    ok = ok && good;
    if (!good) std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  }
};

struct Run {
  std::vector<Shape> shapes;
  std::vector<std::string> files;  // "" when absent (CPU cases carry shapes only)
  std::string expected, tolerance, output;
};

struct Case {
  std::vector<bevpool::RawField> fields;
  std::vector<Run> runs;
};

Case load_case(const std::string& dir) {
  const JsonValue doc = bevpool::parse_json(read_file(dir + "/case.json"));
  Case c;
  for (const JsonValue& f : bevpool::json_array(*doc.find("fields"), "fields")) {
    bevpool::RawField r;
    r.name = bevpool::json_string(*f.find("name"), "field name");
    const std::string bytes =
        read_file(dir + "/" + bevpool::json_string(*f.find("file"), "field file"));
    if (bevpool::is_int_field(r.name)) {
      r.ints.resize(bytes.size() / 4);
      std::memcpy(r.ints.data(), bytes.data(), r.ints.size() * 4);
    } else {
      r.text = bytes;
    }
    c.fields.push_back(r);
  }
  for (const JsonValue& r : bevpool::json_array(*doc.find("runs"), "runs")) {
    Run run;
    for (const JsonValue& in : bevpool::json_array(*r.find("inputs"), "inputs")) {
      Shape s;
      for (const JsonValue& d : bevpool::json_array(*in.find("shape"), "shape"))
        s.push_back(bevpool::json_int(d, "dim"));
      run.shapes.push_back(s);
      const JsonValue* file = in.find("file");
      run.files.push_back(file ? dir + "/" + bevpool::json_string(*file, "file") : "");
    }
    for (auto [key, dst] : {std::pair<const char*, std::string*>{"expected", &run.expected},
                            {"tolerance", &run.tolerance},
                            {"output", &run.output}})
      if (const JsonValue* v = r.find(key)) *dst = dir + "/" + bevpool::json_string(*v, key);
    c.runs.push_back(run);
  }
  return c;
}

std::vector<nvinfer1::PluginField> as_plugin_fields(const std::vector<bevpool::RawField>& raw) {
  std::vector<nvinfer1::PluginField> out;
  for (const auto& f : raw) {
    if (bevpool::is_int_field(f.name))
      out.emplace_back(f.name.c_str(), f.ints.data(), nvinfer1::PluginFieldType::kINT32,
                       static_cast<int32_t>(f.ints.size()));
    else
      out.emplace_back(f.name.c_str(), f.text.data(), nvinfer1::PluginFieldType::kCHAR,
                       static_cast<int32_t>(f.text.size()));
  }
  return out;
}

// What TensorRT keeps of getFieldsToSerialize: a deep copy of every field.
std::vector<bevpool::RawField> copy_fields(const nvinfer1::PluginFieldCollection* fc) {
  std::vector<bevpool::RawField> out;
  for (int32_t i = 0; fc && i < fc->nbFields; ++i) {
    const nvinfer1::PluginField& f = fc->fields[i];
    bevpool::RawField r;
    r.name = f.name;
    if (f.type == nvinfer1::PluginFieldType::kINT32)
      r.ints.assign(static_cast<const int32_t*>(f.data),
                    static_cast<const int32_t*>(f.data) + f.length);
    else
      r.text.assign(static_cast<const char*>(f.data), static_cast<size_t>(f.length));
    out.push_back(r);
  }
  return out;
}

bool same_fields(const std::vector<bevpool::RawField>& a, const std::vector<bevpool::RawField>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].ints != b[i].ints || a[i].text != b[i].text) return false;
  return true;
}

// The kernel argument bytes enqueue would pass, with input k at 0x1000 * (k + 1) and the output at
// 0xF000, from a copy of the prepared arguments (as a cloned plugin holds them): 8 bytes each, hex.
std::string packed_args(const bevpool::PluginConfig& cfg, const bevpool::LaunchPlan& plan) {
  bevpool::KernelArgs prepared;
  prepared.prepare(cfg, plan);
  bevpool::KernelArgs copy = prepared;
  std::vector<const void*> inputs;
  for (size_t k = 0; k < cfg.inputs.size(); ++k)
    inputs.push_back(reinterpret_cast<const void*>(0x1000 * (k + 1)));
  void** args = copy.bind(inputs.data(), reinterpret_cast<void*>(0xF000));
  std::ostringstream s;
  for (size_t i = 0; i < copy.size(); ++i) {
    const auto* at = static_cast<const unsigned char*>(args[i]);
    const auto* own = reinterpret_cast<const unsigned char*>(&copy);
    if (at < own || at >= own + sizeof copy) return "\"argument outside its KernelArgs\"";
    uint64_t v = 0;
    std::memcpy(&v, at, 8);
    char hex[24];
    std::snprintf(hex, sizeof hex, "\"%016llx\"", static_cast<unsigned long long>(v));
    s << (i ? ", " : "") << hex;
  }
  return "[" + s.str() + "]";
}

std::string launch_json(const bevpool::PluginConfig& cfg, const bevpool::LaunchPlan& p) {
  std::ostringstream s;
  s << "{\"packed\": " << packed_args(cfg, p) << ", ";
  s << "\"kernel\": " << json_text(p.kernel) << ", \"grid\": [" << p.grid[0] << ", " << p.grid[1]
    << ", " << p.grid[2] << "], \"block\": [" << p.block[0] << ", " << p.block[1] << ", "
    << p.block[2] << "], \"shared_bytes\": " << p.shared_bytes
    << ", \"out_dtype\": " << json_text(p.out_dtype)
    << ", \"zero_output_first\": " << (p.zero_output_first ? "true" : "false") << ", \"args\": [";
  const char* kinds[] = {"buf", "i32", "u32", "i64", "f32"};
  for (size_t i = 0; i < p.args.size(); ++i) {
    const bevpool::PlanArg& a = p.args[i];
    s << (i ? ", " : "") << "[\"" << kinds[static_cast<int>(a.kind)] << "\", ";
    if (a.kind == bevpool::ArgKind::kBuffer)
      s << json_text(a.buffer);
    else if (a.kind == bevpool::ArgKind::kF32) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(a.real));
      s << buf;
    } else
      s << a.integer;
    s << "]";
  }
  s << "]}";
  return s.str();
}

// ---- the GPU half
// --------------------------------------------------------------------------------
#define CUDA_OK(call)                                                               \
  do {                                                                              \
    const cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess)                                                          \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorString(e_)); \
  } while (0)

struct RunResult {
  bool ok = false, graph_ok = false, graph_same = false, timing_zeroes = false;
  double max_abs_err = 0;
  int64_t over_tolerance = 0, not_finite = 0;
  double host_us_p50 = 0, host_us_mean = 0, gpu_us_per_enqueue = 0;
};

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

// `timing`: a build-phase plugin (what the builder times): its enqueue must only zero the output.
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

std::vector<nvinfer1::DynamicPluginTensorDesc> build_descs(const bevpool::PluginConfig& cfg,
                                                           bool fp8, int64_t extra_rows) {
  std::vector<nvinfer1::DynamicPluginTensorDesc> d(cfg.inputs.size() + 1);
  for (size_t i = 0; i < cfg.inputs.size(); ++i) {
    Shape dims = cfg.input_shapes[i], mx = dims;
    if (cfg.dynamic() && i >= 2) {
      dims[0] = -1;  // the map lengths are dynamic at build time
      mx[0] += extra_rows;
    }
    d[i].desc.dims = dims_of(dims);
    d[i].desc.type = i >= 2 ? DataType::kINT32 : (fp8 ? DataType::kFP8 : DataType::kHALF);
    d[i].desc.format = nvinfer1::TensorFormat::kLINEAR;
    d[i].min = dims_of(cfg.profile_min(i));
    d[i].opt = d[i].max = dims_of(mx);
  }
  auto& out = d.back();
  out.desc.dims = out.min = out.opt = out.max = dims_of(cfg.output_shape());
  out.desc.type = fp8 ? DataType::kHALF : DataType::kFLOAT;
  out.desc.format = nvinfer1::TensorFormat::kLINEAR;
  return d;
}

int drive(const std::string& lib, const std::string& dir, bool gpu, int iters,
          const std::string& record_path) {
  Report rep;
  Finder finder;
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) throw std::runtime_error(std::string("dlopen: ") + dlerror());
  using GetCreators = nvinfer1::IPluginCreatorInterface* const* (*)(int32_t&);
  using SetLoggerFinder = void (*)(nvinfer1::ILoggerFinder*);
  auto get_creators = reinterpret_cast<GetCreators>(dlsym(handle, "getCreators"));
  auto set_finder = reinterpret_cast<SetLoggerFinder>(dlsym(handle, "setLoggerFinder"));
  rep.check("exports getCreators and setLoggerFinder", get_creators && set_finder);
  if (!get_creators || !set_finder)
    throw std::runtime_error("library lacks the TensorRT entry points");
  set_finder(&finder);
  int32_t n = 0;
  nvinfer1::IPluginCreatorInterface* const* creators = get_creators(n);
  rep.check("one creator", n == 1 && creators && creators[0]);
  const nvinfer1::InterfaceInfo info = creators[0]->getInterfaceInfo();
  rep.check("creator is IPluginCreatorV3One",
            std::string(info.kind) == "PLUGIN CREATOR_V3ONE" && info.major == 1);
  auto* creator = static_cast<nvinfer1::IPluginCreatorV3One*>(creators[0]);
  rep.check("name/version/namespace BEVPoolV3/1/''",
            std::string(creator->getPluginName()) == "BEVPoolV3" &&
                std::string(creator->getPluginVersion()) == "1" &&
                std::string(creator->getPluginNamespace()).empty());
  const nvinfer1::PluginFieldCollection* names = creator->getFieldNames();
  bool names_ok = names && names->nbFields == 7;
  for (int32_t i = 0; names_ok && i < 7; ++i)
    names_ok = std::string(names->fields[i].name) == bevpool::kFieldNames[i] &&
               (names->fields[i].type == nvinfer1::PluginFieldType::kINT32) ==
                   bevpool::is_int_field(names->fields[i].name);
  rep.check("field names and types", names_ok);

  const Case c = load_case(dir);
  std::vector<nvinfer1::PluginField> pf = as_plugin_fields(c.fields);
  nvinfer1::PluginFieldCollection fc{static_cast<int32_t>(pf.size()), pf.data()};

  // ---- build phase ----
  std::unique_ptr<nvinfer1::IPluginV3> built(
      creator->createPlugin("bevpool", &fc, nvinfer1::TensorRTPhase::kBUILD));
  rep.check("createPlugin (build)", built != nullptr);
  if (!built) throw std::runtime_error("createPlugin failed: " + finder.logger.last_error);
  const bevpool::PluginConfig cfg = bevpool::config_from_fields(c.fields);  // the test's own view
  auto* core = static_cast<nvinfer1::IPluginV3OneCore*>(
      built->getCapabilityInterface(nvinfer1::PluginCapabilityType::kCORE));
  auto* build = static_cast<nvinfer1::IPluginV3OneBuild*>(
      built->getCapabilityInterface(nvinfer1::PluginCapabilityType::kBUILD));
  rep.check("core and build capabilities",
            core && build && std::string(core->getPluginName()) == "BEVPoolV3");
  const int32_t nin = static_cast<int32_t>(cfg.inputs.size());
  rep.check("one output", build->getNbOutputs() == 1);
  std::vector<DataType> in_types(static_cast<size_t>(nin), DataType::kINT32);
  in_types[0] = in_types[1] = cfg.fp8() ? DataType::kFP8 : DataType::kHALF;
  DataType out_type = DataType::kINT8;
  rep.check("output type", build->getOutputDataTypes(&out_type, 1, in_types.data(), nin) == 0 &&
                               out_type == (cfg.fp8() ? DataType::kHALF : DataType::kFLOAT));
  ExprBuilder eb;
  std::vector<nvinfer1::DimsExprs> in_exprs(static_cast<size_t>(nin));
  nvinfer1::DimsExprs out_expr{};
  bool shape_ok = build->getOutputShapes(in_exprs.data(), nin, nullptr, 0, &out_expr, 1, eb) == 0 &&
                  out_expr.nbDims == 4;
  for (int32_t i = 0; shape_ok && i < 4; ++i)
    shape_ok = out_expr.d[i]->isConstant() &&
               out_expr.d[i]->getConstantValue() == cfg.output_shape()[static_cast<size_t>(i)];
  rep.check("output shape [Z, Y, X, C]", shape_ok);

  std::vector<nvinfer1::DynamicPluginTensorDesc> io = build_descs(cfg, cfg.fp8(), 0);
  bool formats = true;
  for (int32_t pos = 0; pos <= nin; ++pos) {
    formats = formats && build->supportsFormatCombination(pos, io.data(), nin, 1);
    auto wrong = io;
    wrong[static_cast<size_t>(pos)].desc.type = DataType::kINT8;
    formats = formats && !build->supportsFormatCombination(pos, wrong.data(), nin, 1);
    wrong = io;
    wrong[static_cast<size_t>(pos)].desc.format = nvinfer1::TensorFormat::kCHW32;
    formats = formats && !build->supportsFormatCombination(pos, wrong.data(), nin, 1);
  }
  rep.check("supportsFormatCombination: LINEAR, configured types only", formats);
  rep.check("configurePlugin", build->configurePlugin(io.data(), nin, &io.back(), 1) == 0);
  if (cfg.dynamic()) {
    auto beyond = build_descs(cfg, cfg.fp8(), 1);
    const int before = finder.logger.errors;
    rep.check("configurePlugin refuses a profile beyond the map bounds",
              build->configurePlugin(beyond.data(), nin, &beyond.back(), 1) != 0 &&
                  finder.logger.errors > before);
  }
  rep.check("workspace 0", build->getWorkspaceSize(io.data(), nin, &io.back(), 1) == 0);
  auto* build_rt = static_cast<nvinfer1::IPluginV3OneRuntime*>(
      built->getCapabilityInterface(nvinfer1::PluginCapabilityType::kRUNTIME));
  const std::vector<bevpool::RawField> serialized = copy_fields(build_rt->getFieldsToSerialize());
  rep.check("serialized fields equal the given fields", same_fields(serialized, c.fields));
  built.reset();

  // ---- runtime: deserialize (creator from the serialized fields), clone, per calibration ----
  std::vector<nvinfer1::PluginField> spf = as_plugin_fields(serialized);
  nvinfer1::PluginFieldCollection sfc{static_cast<int32_t>(spf.size()), spf.data()};
  std::unique_ptr<nvinfer1::IPluginV3> runtime(
      creator->createPlugin("bevpool", &sfc, nvinfer1::TensorRTPhase::kRUNTIME));
  rep.check("createPlugin (runtime) from serialized fields", runtime != nullptr);
  std::unique_ptr<nvinfer1::IPluginV3> twin(runtime->clone());
  runtime.reset();
  rep.check("clone outlives its original", twin != nullptr);
  auto* rt = static_cast<nvinfer1::IPluginV3OneRuntime*>(
      twin->getCapabilityInterface(nvinfer1::PluginCapabilityType::kRUNTIME));

  // attachToContext: the kernel is resolved for the current GPU (none: a logged refusal)
  const int before_attach = finder.logger.errors;
  std::unique_ptr<nvinfer1::IPluginV3> attached(rt->attachToContext(nullptr));
  if (gpu) {
    rep.check("attachToContext", attached != nullptr);
  } else {
    rep.check("attachToContext without a GPU: refused with a logged reason",
              attached == nullptr && finder.logger.errors > before_attach &&
                  finder.logger.last_error.find("cannot run on this GPU") != std::string::npos);
    attached.reset(twin->clone());  // the rest runs on an unattached clone: enqueue must refuse
  }
  auto* art = static_cast<nvinfer1::IPluginV3OneRuntime*>(
      attached->getCapabilityInterface(nvinfer1::PluginCapabilityType::kRUNTIME));

  std::ostringstream runs_json;
  std::vector<std::string> records;
  for (size_t k = 0; k < c.runs.size(); ++k) {
    const Run& run = c.runs[k];
    std::vector<nvinfer1::PluginTensorDesc> in(run.shapes.size());
    for (size_t i = 0; i < in.size(); ++i) in[i].dims = dims_of(run.shapes[i]);
    nvinfer1::PluginTensorDesc out{};
    out.dims = dims_of(cfg.output_shape());
    const std::string tag = "run " + std::to_string(k) + ": ";
    rep.check(tag + "onShapeChange",
              art->onShapeChange(in.data(), static_cast<int32_t>(in.size()), &out, 1) == 0);
    records.push_back(launch_json(cfg, bevpool::bind_plan(cfg, run.shapes)));  // onShapeChange's
    if (cfg.dynamic()) {  // a slots length off the block: refused, logged
      auto bad = in;
      bad[2].dims.d[0] -= 1;
      const int before = finder.logger.errors;
      rep.check(tag + "onShapeChange refuses a slots length off the block",
                art->onShapeChange(bad.data(), static_cast<int32_t>(bad.size()), &out, 1) != 0 &&
                    finder.logger.errors > before);
      rep.check(tag + "onShapeChange again",
                art->onShapeChange(in.data(), static_cast<int32_t>(in.size()), &out, 1) == 0);
    }
    if (!gpu) {
      void* fake = nullptr;
      rep.check(tag + "enqueue before attach refuses",
                art->enqueue(in.data(), &out, nullptr, &fake, nullptr, nullptr) != 0);
      continue;
    }
    std::unique_ptr<nvinfer1::IPluginV3> timing(
        creator->createPlugin("bevpool", &sfc, nvinfer1::TensorRTPhase::kBUILD));
    auto* timing_rt = static_cast<nvinfer1::IPluginV3OneRuntime*>(
        timing->getCapabilityInterface(nvinfer1::PluginCapabilityType::kRUNTIME));
    const RunResult r = run_on_gpu(art, timing_rt, cfg, run, iters);
    rep.check(tag + "output within tolerance of the FP64 reference", r.ok);
    rep.check(tag + "build-phase enqueue (builder timing) only zeroes the output", r.timing_zeroes);
    rep.check(tag + "CUDA graph replay within tolerance of the FP64 reference", r.graph_ok);
    char buf[480];
    std::snprintf(
        buf, sizeof buf,
        "%s{\"ok\": %s, \"graph_ok\": %s, \"graph_equals_eager\": %s, \"max_abs_err\": %.6g, "
        "\"over_tolerance\": %lld, \"not_finite\": %lld, \"host_us_per_enqueue_p50\": %.3f, "
        "\"host_us_per_enqueue_mean\": %.3f, \"gpu_us_per_enqueue\": %.3f}",
        k ? ", " : "", r.ok ? "true" : "false", r.graph_ok ? "true" : "false",
        r.graph_same ? "true" : "false", r.max_abs_err, static_cast<long long>(r.over_tolerance),
        static_cast<long long>(r.not_finite), r.host_us_p50, r.host_us_mean, r.gpu_us_per_enqueue);
    runs_json << buf;
  }
  if (!record_path.empty()) {
    std::string all = "[";
    for (size_t i = 0; i < records.size(); ++i) all += (i ? ",\n" : "") + records[i];
    all += "]\n";
    write_file(record_path, all.data(), all.size());
  }
  attached.reset();
  twin.reset();

  std::printf("{\"kernel\": %s, \"precision\": %s, \"gpu\": %s, \"runs\": [%s], \"steps\": {",
              json_text(cfg.plan.kernel).c_str(), json_text(cfg.precision).c_str(),
              gpu ? "true" : "false", runs_json.str().c_str());
  for (size_t i = 0; i < rep.steps.size(); ++i)
    std::printf("%s%s: %s", i ? ", " : "", json_text(rep.steps[i].first).c_str(),
                rep.steps[i].second ? "true" : "false");
  std::printf("}, \"ok\": %s}\n", rep.ok ? "true" : "false");
  return rep.ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s LIB CASE_DIR [--gpu] [--iters N] [--launch-record FILE]\n",
                 argv[0]);
    return 2;
  }
  bool gpu = false;
  int iters = 200;
  std::string record;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--gpu")
      gpu = true;
    else if (a == "--iters" && i + 1 < argc)
      iters = std::max(0, std::atoi(argv[++i]));
    else if (a == "--launch-record" && i + 1 < argc)
      record = argv[++i];
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    return drive(argv[1], argv[2], gpu, iters, record);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bevpool_trt_plugin_driver: %s\n", e.what());
    std::printf("{\"ok\": false, \"error\": %s}\n", json_text(e.what()).c_str());
    return 1;
  }
}
