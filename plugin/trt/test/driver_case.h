// The driver's cases (test/trt_cpp_cases.py writes them: case.json, one file per plugin field,
// per run the input shapes and, for GPU runs, input files, expected output and tolerance), plugin
// fields as TensorRT passes and keeps them, and the launch record the tests compare with Python.
#pragma once
#include <NvInferRuntime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "launch_binding.h"
#include "plugin_config.h"

namespace driver {

using bevpool::Shape;

struct Run {
  std::vector<Shape> shapes;
  std::vector<std::string> files;  // "" when absent (CPU cases carry shapes only)
  std::string expected, tolerance, output;
};

struct Case {
  std::vector<bevpool::RawField> fields;
  std::vector<Run> runs;
};

std::string read_file(const std::string& path);
void write_file(const std::string& path, const void* data, size_t n);
nvinfer1::Dims dims_of(const Shape& s);
int64_t volume(const Shape& s);
std::string json_text(const std::string& s);  // a JSON string literal

Case load_case(const std::string& dir);
std::vector<nvinfer1::PluginField> as_plugin_fields(const std::vector<bevpool::RawField>& raw);
// What TensorRT keeps of getFieldsToSerialize: a deep copy of every field.
std::vector<bevpool::RawField> copy_fields(const nvinfer1::PluginFieldCollection* fc);
bool same_fields(const std::vector<bevpool::RawField>& a, const std::vector<bevpool::RawField>& b);
// The bound launch as JSON, with the kernel argument bytes enqueue would pass ("packed").
std::string launch_json(const bevpool::PluginConfig& cfg, const bevpool::LaunchPlan& p);

}  // namespace driver
