#include "bevpool_plugin.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "kernel_functions.h"
#include "plugin_log.h"

namespace bevpool {
namespace {

using nvinfer1::DataType;
using nvinfer1::PluginFieldType;

nvinfer1::IPluginV3* const kNoPlugin = nullptr;

// An unknown rank (nbDims -1) reads as an empty shape, which every shape check refuses.
Shape shape_of(nvinfer1::Dims const& d) {
  return Shape(d.d, d.d + std::clamp<int32_t>(d.nbDims, 0, nvinfer1::Dims::MAX_DIMS));
}

// Every interface method is noexcept: a failure is logged and reported by TensorRT's convention.
template <typename F, typename R>
R guarded(F&& body, R on_error) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    log_error(e.what());
  } catch (...) {
    log_error("BEVPool plugin: unknown error");
  }
  return on_error;
}

// PluginField -> RawField; integer fields may arrive as any integer type (ONNX attributes).
RawField read_field(nvinfer1::PluginField const& f) {
  RawField r;
  r.name = f.name != nullptr ? f.name : "";
  if (f.length < 0 || (f.length > 0 && f.data == nullptr))
    throw ConfigError("BEVPool plugin: field " + r.name + " has no data");
  const auto n = static_cast<size_t>(f.length);
  if (is_int_field(r.name)) {
    for (size_t i = 0; i < n; ++i) {
      int64_t v = 0;
      switch (f.type) {
        case PluginFieldType::kINT32:
          v = static_cast<int32_t const*>(f.data)[i];
          break;
        case PluginFieldType::kINT64:
          v = static_cast<int64_t const*>(f.data)[i];
          break;
        case PluginFieldType::kINT16:
          v = static_cast<int16_t const*>(f.data)[i];
          break;
        case PluginFieldType::kINT8:
          v = static_cast<int8_t const*>(f.data)[i];
          break;
        default:
          throw ConfigError("BEVPool plugin: field " + r.name + " must hold integers");
      }
      if (v != static_cast<int32_t>(v))
        throw ConfigError("BEVPool plugin: field " + r.name + " out of int32 range");
      r.ints.push_back(static_cast<int32_t>(v));
    }
  } else {
    if (f.type != PluginFieldType::kCHAR && f.type != PluginFieldType::kINT8 &&
        f.type != PluginFieldType::kUNKNOWN)
      throw ConfigError("BEVPool plugin: field " + r.name + " must be text (CHAR)");
    r.text.assign(static_cast<char const*>(f.data), n);
  }
  return r;
}

}  // namespace

BevPoolPlugin::BevPoolPlugin(PluginConfig cfg, std::vector<RawField> fields,
                             nvinfer1::TensorRTPhase phase)
    : cfg_(std::move(cfg)), fields_(std::move(fields)), phase_(phase) {
  if (!cfg_.dynamic()) {  // a static plan (fixed map lengths) needs no binding
    launch_ = cfg_.plan;
    args_.prepare(cfg_, launch_);
    bound_ = true;
  }
}

nvinfer1::IPluginCapability* BevPoolPlugin::getCapabilityInterface(
    nvinfer1::PluginCapabilityType type) noexcept {
  switch (type) {
    case nvinfer1::PluginCapabilityType::kCORE:
      return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case nvinfer1::PluginCapabilityType::kBUILD:
      return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME:
      return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
  }
  return nullptr;
}

nvinfer1::IPluginV3* BevPoolPlugin::clone() noexcept {
  return guarded([&]() -> nvinfer1::IPluginV3* { return new BevPoolPlugin(*this); }, kNoPlugin);
}

DataType BevPoolPlugin::input_type(int32_t index) const {
  if (index >= 2) return DataType::kINT32;
  return cfg_.fp8() ? DataType::kFP8 : DataType::kHALF;
}

DataType BevPoolPlugin::output_type() const {
  return cfg_.fp8() ? DataType::kHALF : DataType::kFLOAT;
}

void BevPoolPlugin::check_output(nvinfer1::Dims const& dims) const {
  if (shape_of(dims) != cfg_.output_shape())
    throw ConfigError("BEVPool plugin: output " + shape_text(shape_of(dims)) +
                      " != " + shape_text(cfg_.output_shape()));
}

int32_t BevPoolPlugin::getOutputDataTypes(DataType* outputTypes, int32_t nbOutputs,
                                          DataType const* /*inputTypes*/,
                                          int32_t /*nbInputs*/) const noexcept {
  if (nbOutputs != 1) return -1;
  outputTypes[0] = output_type();
  return 0;
}

int32_t BevPoolPlugin::getOutputShapes(nvinfer1::DimsExprs const* /*inputs*/, int32_t nbInputs,
                                       nvinfer1::DimsExprs const* /*shapeInputs*/,
                                       int32_t /*nbShapeInputs*/, nvinfer1::DimsExprs* outputs,
                                       int32_t nbOutputs,
                                       nvinfer1::IExprBuilder& exprBuilder) noexcept {
  if (nbOutputs != 1 || nbInputs != static_cast<int32_t>(cfg_.inputs.size())) return -1;
  const Shape out = cfg_.output_shape();
  outputs[0].nbDims = static_cast<int32_t>(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    outputs[0].d[i] = exprBuilder.constant(out[i]);
    if (outputs[0].d[i] == nullptr) return -1;
  }
  return 0;
}

bool BevPoolPlugin::supportsFormatCombination(int32_t pos,
                                              nvinfer1::DynamicPluginTensorDesc const* inOut,
                                              int32_t nbInputs, int32_t nbOutputs) noexcept {
  if (pos < 0 || pos >= nbInputs + nbOutputs || nbOutputs != 1) return false;
  nvinfer1::PluginTensorDesc const& d = inOut[pos].desc;
  const DataType want = pos < nbInputs ? input_type(pos) : output_type();
  return d.format == nvinfer1::TensorFormat::kLINEAR && d.type == want;
}

int32_t BevPoolPlugin::configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in,
                                       int32_t nbInputs,
                                       nvinfer1::DynamicPluginTensorDesc const* out,
                                       int32_t nbOutputs) noexcept {
  return guarded(
      [&]() {
        std::vector<Shape> dims, maxima;
        for (int32_t i = 0; i < nbInputs; ++i) {
          dims.push_back(shape_of(in[i].desc.dims));
          maxima.push_back(shape_of(in[i].max));
        }
        check_input_shapes(cfg_, dims, true);
        // a profile beyond the bounds would fail at run time: refuse it now
        check_input_shapes(cfg_, maxima, true);
        if (nbOutputs != 1) throw ConfigError("BEVPool plugin: one output");
        check_output(out[0].desc.dims);
        return 0;
      },
      -1);
}

size_t BevPoolPlugin::getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* /*inputs*/,
                                       int32_t /*nbInputs*/,
                                       nvinfer1::DynamicPluginTensorDesc const* /*outputs*/,
                                       int32_t /*nbOutputs*/) const noexcept {
  return 0;  // the schedule arrays are inputs; the kernel needs no scratch
}

int32_t BevPoolPlugin::onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs,
                                     nvinfer1::PluginTensorDesc const* out,
                                     int32_t nbOutputs) noexcept {
  return guarded(
      [&]() {
        // a new calibration (map lengths): the launch is re-bound here, never in enqueue
        std::vector<Shape> shapes;
        for (int32_t i = 0; i < nbInputs; ++i) shapes.push_back(shape_of(in[i].dims));
        if (nbOutputs != 1) throw ConfigError("BEVPool plugin: one output");
        check_output(out[0].dims);
        bound_ = false;
        launch_ = bind_plan(cfg_, shapes);
        args_.prepare(cfg_, launch_);
        bound_ = true;
        return 0;
      },
      -1);
}

nvinfer1::IPluginV3* BevPoolPlugin::attachToContext(
    nvinfer1::IPluginResourceContext* /*context*/) noexcept {
  return guarded(
      [&]() -> nvinfer1::IPluginV3* {
        std::unique_ptr<BevPoolPlugin> twin(new BevPoolPlugin(*this));
        // resolve (and load) the kernel for the current GPU now, not in the first enqueue
        twin->function_ = kernel_function(cfg_.plan.kernel);
        cudaFuncAttributes attr{};
        const cudaError_t err = twin->function_ ? cudaFuncGetAttributes(&attr, twin->function_)
                                                : cudaErrorInvalidDeviceFunction;
        if (err != cudaSuccess) {
          cudaGetLastError();  // not sticky: leave the caller's error state clean
          throw ConfigError("BEVPool plugin: kernel " + cfg_.plan.kernel +
                            " cannot run on this GPU: " + cudaGetErrorString(err));
        }
        if (attr.maxThreadsPerBlock < cfg_.plan.block[0] * cfg_.plan.block[1] * cfg_.plan.block[2])
          throw ConfigError("BEVPool plugin: kernel " + cfg_.plan.kernel + " allows " +
                            std::to_string(attr.maxThreadsPerBlock) + " threads per block");
        return twin.release();
      },
      kNoPlugin);
}

int32_t BevPoolPlugin::enqueue(nvinfer1::PluginTensorDesc const* /*inputDesc*/,
                               nvinfer1::PluginTensorDesc const* /*outputDesc*/,
                               void const* const* inputs, void* const* outputs, void* /*workspace*/,
                               cudaStream_t stream) noexcept {
  if (phase_ == nvinfer1::TensorRTPhase::kBUILD) {  // builder timing: never read the map inputs
    const cudaError_t err =
        cudaMemsetAsync(outputs[0], 0, static_cast<size_t>(cfg_.output_bytes()), stream);
    if (err != cudaSuccess) log_error(std::string("BEVPool plugin: ") + cudaGetErrorString(err));
    return err == cudaSuccess ? 0 : -1;
  }
  if (function_ == nullptr || !bound_) {
    log_error("BEVPool plugin: enqueue before attachToContext / onShapeChange");
    return -1;
  }
  if (launch_.zero_output_first) {  // static (V2-style) plans; a memset is a stream op, graph-safe
    const cudaError_t err =
        cudaMemsetAsync(outputs[0], 0, static_cast<size_t>(cfg_.output_bytes()), stream);
    if (err != cudaSuccess) {
      log_error(std::string("BEVPool plugin: cudaMemsetAsync: ") + cudaGetErrorString(err));
      return -1;
    }
  }
  const dim3 grid(static_cast<unsigned>(launch_.grid[0]), static_cast<unsigned>(launch_.grid[1]),
                  static_cast<unsigned>(launch_.grid[2]));
  const dim3 block(static_cast<unsigned>(launch_.block[0]), static_cast<unsigned>(launch_.block[1]),
                   static_cast<unsigned>(launch_.block[2]));
  const cudaError_t err = cudaLaunchKernel(function_, grid, block, args_.bind(inputs, outputs[0]),
                                           static_cast<size_t>(launch_.shared_bytes), stream);
  if (err != cudaSuccess) {
    log_error("BEVPool plugin: launch of " + launch_.kernel + ": " + cudaGetErrorString(err));
    return -1;
  }
  return 0;
}

nvinfer1::PluginFieldCollection const* BevPoolPlugin::getFieldsToSerialize() noexcept {
  // kept on this object: TensorRT reads the field buffers after this call returns
  serialized_.clear();
  for (RawField const& f : fields_) {
    if (is_int_field(f.name))
      serialized_.emplace_back(f.name.c_str(), f.ints.data(), PluginFieldType::kINT32,
                               static_cast<int32_t>(f.ints.size()));
    else
      serialized_.emplace_back(f.name.c_str(), f.text.data(), PluginFieldType::kCHAR,
                               static_cast<int32_t>(f.text.size()));
  }
  collection_.nbFields = static_cast<int32_t>(serialized_.size());
  collection_.fields = serialized_.data();
  return &collection_;
}

BevPoolCreator::BevPoolCreator() {
  for (char const* name : kFieldNames)
    fields_.emplace_back(name, nullptr,
                         is_int_field(name) ? PluginFieldType::kINT32 : PluginFieldType::kCHAR, 0);
  names_.nbFields = static_cast<int32_t>(fields_.size());
  names_.fields = fields_.data();
}

nvinfer1::IPluginV3* BevPoolCreator::createPlugin(char const* name,
                                                  nvinfer1::PluginFieldCollection const* fc,
                                                  nvinfer1::TensorRTPhase phase) noexcept {
  return guarded(
      [&]() -> nvinfer1::IPluginV3* {
        if (fc == nullptr || fc->nbFields < 0 || (fc->nbFields > 0 && fc->fields == nullptr))
          throw ConfigError("BEVPool plugin: no fields");
        std::vector<RawField> fields;
        for (char const* wanted :
             kFieldNames) {  // keep ours, in the Python plugin's order; ignore others
          for (int32_t i = 0; i < fc->nbFields; ++i)
            if (fc->fields[i].name != nullptr && std::string(fc->fields[i].name) == wanted) {
              fields.push_back(read_field(fc->fields[i]));
              break;
            }
        }
        try {
          PluginConfig cfg = config_from_fields(fields);
          return new BevPoolPlugin(std::move(cfg), std::move(fields), phase);
        } catch (const ConfigError& e) {
          throw ConfigError(std::string(e.what()) + " (layer " + (name ? name : "?") + ")");
        }
      },
      kNoPlugin);
}

}  // namespace bevpool
