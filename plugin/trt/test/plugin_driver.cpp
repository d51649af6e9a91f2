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
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "driver_case.h"
#include "fake_tensorrt.h"
#include "gpu_run.h"
#include "launch_binding.h"
#include "plugin_config.h"

namespace {

using namespace driver;
using nvinfer1::DataType;

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
