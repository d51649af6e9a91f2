// A small JSON reader for the plugin's text fields (`plan`, `input_shapes`), written by Python's
// json.dumps. Objects keep their keys in order; numbers are doubles (every value the plan holds
// is an int below 2^53 or a float32 written as its shortest double).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace bevpool {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0.0;
  std::string text;
  std::vector<JsonValue> items;                            // kArray
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject

  // nullptr when absent (or not an object)
  const JsonValue* find(const std::string& key) const;
};

// Throws std::runtime_error("json: ...") on malformed text or trailing garbage.
JsonValue parse_json(const std::string& text);

// Accessors that throw std::runtime_error naming `what` when the value has another kind.
long long json_int(const JsonValue& v, const char* what);
const std::string& json_string(const JsonValue& v, const char* what);
const std::vector<JsonValue>& json_array(const JsonValue& v, const char* what);

}  // namespace bevpool
