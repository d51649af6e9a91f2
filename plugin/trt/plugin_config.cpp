#include "plugin_config.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "json_value.h"

namespace bevpool {

const char* const kFieldNames[7] = {"precision",   "depth_shape",  "grid_shape", "channels",
                                    "input_names", "input_shapes", "plan"};

bool is_int_field(const std::string& name) {
  return name == "depth_shape" || name == "grid_shape" || name == "channels";
}

namespace {

[[noreturn]] void fail(const std::string& why) { throw ConfigError("BEVPool plugin: " + why); }

const RawField& field(const std::vector<RawField>& fields, const char* name) {
  for (const RawField& f : fields)
    if (f.name == name) return f;
  fail(std::string("missing plugin field '") + name + "'");
}

std::string text(const std::vector<RawField>& fields, const char* name) {
  std::string t = field(fields, name).text;
  while (!t.empty() && t.back() == '\0') t.pop_back();  // a C string's terminator, if sent
  return t;
}

Shape ints(const std::vector<RawField>& fields, const char* name, size_t count) {
  const RawField& f = field(fields, name);
  if (f.ints.size() != count)
    fail(std::string(name) + ": expected " + std::to_string(count) + " ints, got " +
         std::to_string(f.ints.size()));
  Shape s(f.ints.begin(), f.ints.end());
  if (std::any_of(s.begin(), s.end(), [](int64_t v) { return v <= 0; }))
    fail(std::string(name) + " must be > 0");
  return s;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == ',')
      out.emplace_back();
    else
      out.back().push_back(c);
  }
  return out;
}

PlanArg plan_arg(const JsonValue& pair) {
  const auto& kv = json_array(pair, "plan arg");
  if (kv.size() != 2) fail("plan arg: expected [kind, value]");
  const std::string& kind = json_string(kv[0], "plan arg kind");
  PlanArg a{ArgKind::kBuffer, "", 0, 0.0f};
  if (kind == "buf") {
    a.buffer = json_string(kv[1], "plan buffer");
  } else if (kind == "f32") {
    if (kv[1].kind != JsonValue::Kind::kNumber) fail("plan f32 arg: expected a number");
    a.kind = ArgKind::kF32;
    a.real = static_cast<float>(kv[1].number);
  } else if (kind == "i32" || kind == "u32" || kind == "i64") {
    a.kind = kind == "i32" ? ArgKind::kI32 : kind == "u32" ? ArgKind::kU32 : ArgKind::kI64;
    a.integer = json_int(kv[1], "plan int arg");
    const bool fits =
        kind == "i64" || (kind == "i32" ? a.integer == static_cast<int32_t>(a.integer)
                                        : a.integer == static_cast<uint32_t>(a.integer));
    if (!fits) fail("plan " + kind + " arg out of range");
  } else {
    fail("plan arg kind '" + kind + "' unknown");
  }
  return a;
}

void triple(const JsonValue* v, const char* what, int64_t (&out)[3]) {
  if (v == nullptr) fail(std::string("plan has no ") + what);
  const auto& items = json_array(*v, what);
  if (items.size() != 3) fail(std::string("plan ") + what + ": expected 3 values");
  for (size_t i = 0; i < 3; ++i) out[i] = json_int(items[i], what);
}

LaunchPlan parse_plan(const std::string& json) {
  const JsonValue doc = parse_json(json);
  if (doc.kind != JsonValue::Kind::kObject) fail("plan: expected an object");
  static const std::set<std::string> known = {
      "kernel", "grid", "block", "args", "zero_output_first", "out_dtype", "shared_bytes"};
  for (const auto& m :
       doc.members)  // a plan from a newer launch description: refuse, never mis-launch
    if (!known.count(m.first)) fail("unknown LaunchPlan field '" + m.first + "'");
  LaunchPlan p;
  const JsonValue* kernel = doc.find("kernel");
  const JsonValue* args = doc.find("args");
  const JsonValue* out = doc.find("out_dtype");
  const JsonValue* zero = doc.find("zero_output_first");
  if (!kernel || !args || !out || !zero)
    fail("plan lacks kernel, args, out_dtype or zero_output_first");
  p.kernel = json_string(*kernel, "plan kernel");
  triple(doc.find("grid"), "grid", p.grid);
  triple(doc.find("block"), "block", p.block);
  for (const JsonValue& a : json_array(*args, "plan args")) p.args.push_back(plan_arg(a));
  p.out_dtype = json_string(*out, "plan out_dtype");
  if (zero->kind != JsonValue::Kind::kBool) fail("plan zero_output_first: expected true/false");
  p.zero_output_first = zero->boolean;
  if (const JsonValue* smem = doc.find("shared_bytes"))
    p.shared_bytes = json_int(*smem, "plan shared_bytes");
  return p;
}

std::vector<int64_t> plan_ints(const LaunchPlan& p, ArgKind kind) {
  std::vector<int64_t> out;
  for (const PlanArg& a : p.args)
    if (a.kind == kind) out.push_back(a.integer);
  return out;
}

// The V3 template must describe a launch its kernel can run for C channels: the plan's own
// numbers are checked (never recomputed), as launch.v3_geometry / plan_v3 produced them.
void check_v3_template(const PluginConfig& c) {
  const KernelInfo& k = *c.kernel;
  const LaunchPlan& p = c.plan;
  const std::vector<int64_t> i32 = plan_ints(p, ArgKind::kI32);
  int f32 = 0;
  for (const PlanArg& a : p.args) f32 += a.kind == ArgKind::kF32;
  if (p.args.size() != 12 || i32.size() != 5 || f32 != 1)
    fail(
        "plan args do not match a V3 entry (5 buffers, n_empty, blocks, C, G, pair_stride, scale, "
        "out)");
  const int64_t C = c.channels, G = i32[3], pair_stride = i32[4];
  if (k.precision != c.precision) fail(p.kernel + " is not a " + c.precision + " kernel");
  if (i32[2] != C) fail("plan C = " + std::to_string(i32[2]) + ", channels = " + std::to_string(C));
  if (G < 1 || G > 32 || (k.g_fixed && k.g_fixed != G))
    fail("plan G = " + std::to_string(G) + " invalid");
  if ((k.c_fixed && k.c_fixed != C) || C % k.vec || (C / k.vec) % G)
    fail(p.kernel + " cannot run C = " + std::to_string(C) + " with G = " + std::to_string(G));
  if (p.grid[1] * G * k.vec != C || p.grid[2] != 1)
    fail("plan grid.y/z do not cover C = " + std::to_string(C));
  const int64_t threads = p.block[0];
  if (threads % 32 || threads < 32 || threads > k.max_threads || p.block[1] != 1 || p.block[2] != 1)
    fail("plan block " + std::to_string(threads) + " invalid for " + p.kernel);
  if (p.shared_bytes < threads / 32 * G * k.vec * 4 || p.shared_bytes > 48 * 1024)
    fail("plan shared memory " + std::to_string(p.shared_bytes) + " does not fit the block");
  if (pair_stride < 0 || (pair_stride && !k.depth_pairs))
    fail(p.kernel + " cannot read depth pairs");
  const std::vector<std::string> want = {"depth", "feat", "slots", "pidx", "empty_cells"};
  if (c.inputs != want) fail("V3 plugin inputs must be depth,feat,slots,pidx,empty_cells");
  const std::vector<size_t> ranks = {4, 4, 2, 2, 1};
  for (size_t i = 2; i < want.size(); ++i)
    if (c.input_shapes[i].size() != ranks[i] ||
        (ranks[i] == 2 && c.input_shapes[i][1] != (i == 2 ? 4 : 2)))
      fail("input " + want[i] + " bound " + shape_text(c.input_shapes[i]) + " has the wrong shape");
}

void validate(PluginConfig& c) {
  if (c.precision != "fp16" && c.precision != "fp8")
    fail("precision must be fp16 or fp8, got '" + c.precision + "'");
  c.kernel = find_kernel(c.plan.kernel);
  if (c.kernel == nullptr) fail("plan names unknown kernel '" + c.plan.kernel + "'");
  const std::string out = c.fp8() ? "float16" : "float32";
  if (c.plan.out_dtype != out)
    fail("plan writes " + c.plan.out_dtype + ", " + c.precision + " output is " + out);
  if (c.inputs.size() < 2 || c.inputs[0] != "depth" || c.inputs[1] != "feat" ||
      c.inputs.size() != c.input_shapes.size())
    fail("inputs must start with depth,feat and have one shape each");
  const Shape feat = {c.depth_shape[0], c.depth_shape[2], c.depth_shape[3], c.channels};
  if (c.input_shapes[0] != c.depth_shape || c.input_shapes[1] != feat)
    fail("depth/feat shapes disagree with depth_shape/channels");
  for (const Shape& s : c.input_shapes)
    if (s.empty() || std::any_of(s.begin(), s.end(), [](int64_t v) { return v <= 0; }))
      fail("input shape " + shape_text(s) + " invalid");
  std::set<std::string> bound, have(c.inputs.begin(), c.inputs.end());
  for (const PlanArg& a : c.plan.args)
    if (a.kind == ArgKind::kBuffer) bound.insert(a.buffer);
  have.insert(kOutputBuffer);
  if (bound != have || have.size() != c.inputs.size() + 1)
    fail("plan binds other buffers than the inputs + out");
  const int64_t* b = c.plan.block;
  if (b[0] <= 0 || b[1] <= 0 || b[2] <= 0 || b[0] * b[1] * b[2] > 1024) fail("bad block");
  for (int64_t g : c.plan.grid)
    if (g < 0 || g > 0x7fffffff) fail("bad grid");
  if (c.dynamic()) check_v3_template(c);
}

}  // namespace

std::string shape_text(const Shape& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

Shape PluginConfig::output_shape() const {
  return {grid_shape[0], grid_shape[1], grid_shape[2], channels};
}

int64_t PluginConfig::output_bytes() const {
  const Shape s = output_shape();
  return s[0] * s[1] * s[2] * s[3] * (fp8() ? 2 : 4);
}

Shape PluginConfig::profile_min(size_t input) const {
  Shape s = input_shapes[input];
  if (dynamic() && input >= 2) s[0] = 1;
  return s;
}

PluginConfig config_from_fields(const std::vector<RawField>& fields) {
  PluginConfig c;
  try {
    c.precision = text(fields, "precision");
    c.depth_shape = ints(fields, "depth_shape", 4);
    c.grid_shape = ints(fields, "grid_shape", 3);
    c.channels = ints(fields, "channels", 1)[0];
    c.inputs = split_names(text(fields, "input_names"));
    const JsonValue shapes = parse_json(text(fields, "input_shapes"));  // alive for the loop
    for (const JsonValue& s : json_array(shapes, "input_shapes")) {
      Shape shape;
      for (const JsonValue& d : json_array(s, "input shape"))
        shape.push_back(json_int(d, "input shape"));
      c.input_shapes.push_back(shape);
    }
    c.plan = parse_plan(text(fields, "plan"));
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& e) {
    fail(std::string("malformed plugin fields: ") + e.what());
  }
  validate(c);
  return c;
}

void check_input_shapes(const PluginConfig& cfg, const std::vector<Shape>& shapes, bool build) {
  if (shapes.size() != cfg.inputs.size())
    fail(std::to_string(shapes.size()) + " inputs, configured " +
         std::to_string(cfg.inputs.size()));
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& g = shapes[i];
    const Shape lo = cfg.profile_min(i), &hi = cfg.input_shapes[i];
    bool ok = g.size() == hi.size();
    for (size_t d = 0; ok && d < g.size(); ++d)
      ok = (build && g[d] == -1) || (lo[d] <= g[d] && g[d] <= hi[d]);
    if (!ok)
      fail("input " + cfg.inputs[i] + ": shape " + shape_text(g) + " outside " + shape_text(lo) +
           ".." + shape_text(hi));
  }
}

}  // namespace bevpool
