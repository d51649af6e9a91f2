// What TensorRT hands a plugin, played without TensorRT: a logger (counting errors) found through
// an ILoggerFinder, and an IExprBuilder of constants (the plugin's output shape is constant).
#pragma once
#include <NvInferRuntime.h>

#include <memory>
#include <string>
#include <vector>

namespace driver {

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

}  // namespace driver
