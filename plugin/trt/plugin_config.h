// The plugin's serialized fields, read and checked exactly as the Python plugin does
// (bevpool_ros/backends/tensorrt/plugin_config.py): same names, types and rules, so an engine or
// ONNX file made by either side loads in the other. Nothing here knows TensorRT.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernel_info.h"

namespace bevpool {

constexpr char kPluginName[] = "BEVPoolV3";
constexpr char kPluginVersion[] = "1";
constexpr char kPluginNamespace[] =
    "";  // the ONNX parser looks plugins up in the default namespace
constexpr char kOutputBuffer[] = "out";

// Every field name, in the Python plugin's order (plugin_config.FIELDS).
extern const char* const kFieldNames[7];
bool is_int_field(const std::string& name);  // INT32 fields; the others are CHAR text

class ConfigError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One field as given to the creator: INT32 values or CHAR bytes.
struct RawField {
  std::string name;
  std::vector<int32_t> ints;
  std::string text;
};

enum class ArgKind { kBuffer, kI32, kU32, kI64, kF32 };

struct PlanArg {
  ArgKind kind;
  std::string buffer;  // kBuffer: an input name or "out"
  int64_t integer;     // kI32 / kU32 / kI64
  float real;          // kF32
};

// kernels/table.LaunchPlan
struct LaunchPlan {
  std::string kernel;
  int64_t grid[3];
  int64_t block[3];
  std::vector<PlanArg> args;
  bool zero_output_first = false;
  std::string out_dtype;
  int64_t shared_bytes = 0;
};

using Shape = std::vector<int64_t>;

struct PluginConfig {
  std::string precision;  // fp16 | fp8
  Shape depth_shape;      // N, D, H, W
  Shape grid_shape;       // Z, Y, X
  int64_t channels = 0;
  std::vector<std::string> inputs;  // depth, feat, then the map arrays the plan binds
  std::vector<Shape> input_shapes;  // map arrays at their bound (V3) or exact length
  LaunchPlan plan;                  // a template (grid.x and the counts zero) for V3 kernels
  const KernelInfo* kernel = nullptr;

  bool dynamic() const { return kernel->v3; }  // map inputs of any length within the profile
  bool fp8() const { return precision == "fp8"; }
  Shape output_shape() const;             // Z, Y, X, C
  int64_t output_bytes() const;           // float32 (fp16) or float16 (fp8) grid
  Shape profile_min(size_t input) const;  // one row for dynamic map inputs
};

// Fields -> checked config; throws ConfigError with a one-line reason.
PluginConfig config_from_fields(const std::vector<RawField>& fields);

// depth/feat exactly as configured, map inputs within the profile; -1 allowed when `build`.
void check_input_shapes(const PluginConfig& cfg, const std::vector<Shape>& shapes, bool build);

std::string shape_text(const Shape& s);

}  // namespace bevpool
