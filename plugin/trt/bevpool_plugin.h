// The BEVPoolV3 IPluginV3 (core, build and runtime capabilities) and its IPluginCreatorV3One:
// the C++ twin of bevpool_ros/backends/tensorrt/plugin.py, over the same fields and inputs.
//
// Build: output [Z, Y, X, C]; LINEAR only; depth/feat HALF (fp16) or FP8 (fp8), map inputs
// INT32, output FLOAT (fp16) or HALF (fp8). Runtime: onShapeChange binds the launch to the map
// lengths (once per calibration); attachToContext resolves the kernel for the current GPU;
// enqueue writes the device pointers into the prepared arguments and launches: no allocation, no
// synchronisation, no host reads, so it can be captured in a CUDA graph. A build-phase plugin's
// enqueue (the builder timing the layer, over inputs holding anything) only zeroes the output:
// the map inputs are indices, and no tactic depends on the timing.
#pragma once
#include <NvInferRuntime.h>

#include <vector>

#include "launch_binding.h"
#include "plugin_config.h"

namespace bevpool {

class BevPoolPlugin final : public nvinfer1::IPluginV3,
                            public nvinfer1::IPluginV3OneCore,
                            public nvinfer1::IPluginV3OneBuild,
                            public nvinfer1::IPluginV3OneRuntime {
 public:
  BevPoolPlugin(PluginConfig cfg, std::vector<RawField> fields, nvinfer1::TensorRTPhase phase);

  // IPluginV3
  nvinfer1::IPluginCapability* getCapabilityInterface(
      nvinfer1::PluginCapabilityType type) noexcept override;
  nvinfer1::IPluginV3* clone() noexcept override;

  // core
  char const* getPluginName() const noexcept override { return kPluginName; }
  char const* getPluginVersion() const noexcept override { return kPluginVersion; }
  char const* getPluginNamespace() const noexcept override { return kPluginNamespace; }

  // build
  int32_t getNbOutputs() const noexcept override { return 1; }
  int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs,
                             nvinfer1::DataType const* inputTypes,
                             int32_t nbInputs) const noexcept override;
  int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
                          nvinfer1::DimsExprs const* shapeInputs, int32_t nbShapeInputs,
                          nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
                          nvinfer1::IExprBuilder& exprBuilder) noexcept override;
  bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut,
                                 int32_t nbInputs, int32_t nbOutputs) noexcept override;
  int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
                          nvinfer1::DynamicPluginTensorDesc const* out,
                          int32_t nbOutputs) noexcept override;
  size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
                          nvinfer1::DynamicPluginTensorDesc const* outputs,
                          int32_t nbOutputs) const noexcept override;

  // runtime
  int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs,
                        nvinfer1::PluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
  int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc,
                  nvinfer1::PluginTensorDesc const* outputDesc, void const* const* inputs,
                  void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;
  nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
  nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

 private:
  nvinfer1::DataType input_type(int32_t index) const;
  nvinfer1::DataType output_type() const;
  void check_output(nvinfer1::Dims const& dims) const;

  PluginConfig cfg_;
  std::vector<RawField> fields_;  // INT32 / CHAR, as the Python plugin writes them
  std::vector<nvinfer1::PluginField> serialized_;
  nvinfer1::PluginFieldCollection collection_{};
  LaunchPlan launch_;              // bound to the current map lengths
  nvinfer1::TensorRTPhase phase_;  // kBUILD: enqueue is the builder timing the layer
  bool bound_ = false;
  KernelArgs args_;
  void const* function_ = nullptr;  // resolved in attachToContext
};

class BevPoolCreator final : public nvinfer1::IPluginCreatorV3One {
 public:
  BevPoolCreator();
  nvinfer1::IPluginV3* createPlugin(char const* name, nvinfer1::PluginFieldCollection const* fc,
                                    nvinfer1::TensorRTPhase phase) noexcept override;
  nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override { return &names_; }
  char const* getPluginName() const noexcept override { return kPluginName; }
  char const* getPluginVersion() const noexcept override { return kPluginVersion; }
  char const* getPluginNamespace() const noexcept override { return kPluginNamespace; }

 private:
  std::vector<nvinfer1::PluginField> fields_;
  nvinfer1::PluginFieldCollection names_{};
};

}  // namespace bevpool
