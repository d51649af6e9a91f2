#include "json_value.h"

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace bevpool {
namespace {

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("trailing characters");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 32;  // the plan nests three levels; refuse hostile nesting

  [[noreturn]] void fail(const char* why) const {
    throw std::runtime_error("json: " + std::string(why) + " at offset " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool word(const char* w) {
    const std::string k(w);
    if (s_.compare(pos_, k.size(), k) != 0) return false;
    pos_ += k.size();
    return true;
  }

  JsonValue value(int depth) {
    if (depth > kMaxDepth) fail("nested too deeply");
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end");
    JsonValue v;
    const char c = s_[pos_];
    if (c == '{') {
      ++pos_;
      v.kind = JsonValue::Kind::kObject;
      if (eat('}')) return v;
      do {
        skip_space();
        std::string key = string();
        if (!eat(':')) fail("expected ':'");
        v.members.emplace_back(std::move(key), value(depth + 1));
      } while (eat(','));
      if (!eat('}')) fail("expected '}'");
    } else if (c == '[') {
      ++pos_;
      v.kind = JsonValue::Kind::kArray;
      if (eat(']')) return v;
      do v.items.push_back(value(depth + 1));
      while (eat(','));
      if (!eat(']')) fail("expected ']'");
    } else if (c == '"') {
      v.kind = JsonValue::Kind::kString;
      v.text = string();
    } else if (word("true")) {
      v.kind = JsonValue::Kind::kBool;
      v.boolean = true;
    } else if (word("false")) {
      v.kind = JsonValue::Kind::kBool;
    } else if (word("null")) {
      v.kind = JsonValue::Kind::kNull;
    } else {
      v.kind = JsonValue::Kind::kNumber;
      v.number = number();
    }
    return v;
  }

  std::string string() {
    if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\') {  // the fields hold names and numbers: simple escapes only
        if (pos_ >= s_.size()) break;
        const char e = s_[pos_++];
        const char* simple = "\"\\/bfnrt";
        const char* mapped = "\"\\/\b\f\n\r\t";
        const char* hit = std::char_traits<char>::find(simple, 8, e);
        if (hit == nullptr) fail("unsupported escape");
        c = mapped[hit - simple];
      }
      out.push_back(c);
    }
    if (pos_ >= s_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  double number() {
    const char* begin = s_.data() + pos_;
    const char* end = s_.data() + s_.size();
    double d = 0.0;
    // from_chars: no locale (a host process may have set a decimal comma)
    const auto r = std::from_chars(begin, end, d);
    if (r.ec != std::errc() || r.ptr == begin) fail("expected a value");
    pos_ += static_cast<size_t>(r.ptr - begin);
    return d;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& m : members)
    if (m.first == key) return &m.second;
  return nullptr;
}

JsonValue parse_json(const std::string& text) { return Reader(text).document(); }

long long json_int(const JsonValue& v, const char* what) {
  const bool integral = v.kind == JsonValue::Kind::kNumber &&
                        std::nearbyint(v.number) == v.number && std::fabs(v.number) < 9.0e15;
  if (!integral) throw std::runtime_error(std::string(what) + ": expected an integer");
  return static_cast<long long>(v.number);
}

const std::string& json_string(const JsonValue& v, const char* what) {
  if (v.kind != JsonValue::Kind::kString)
    throw std::runtime_error(std::string(what) + ": expected a string");
  return v.text;
}

const std::vector<JsonValue>& json_array(const JsonValue& v, const char* what) {
  if (v.kind != JsonValue::Kind::kArray)
    throw std::runtime_error(std::string(what) + ": expected a list");
  return v.items;
}

}  // namespace bevpool
