#include "driver_case.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "json_value.h"

namespace driver {

using bevpool::JsonValue;

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

std::string json_text(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) o += c;
  }
  return o + "\"";
}

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
static std::string packed_args(const bevpool::PluginConfig& cfg, const bevpool::LaunchPlan& plan) {
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

}  // namespace driver
