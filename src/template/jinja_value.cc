#include "template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "template/jinja_text.h"

namespace zen::jinja {
namespace {

constexpr int kMaxJsonDepth = 512;  // deeper input is refused, not recursed into

template <typename Json>
Value from_json_at_depth(const Json& j, int depth) {
  if (depth > kMaxJsonDepth) fail("chat template: context JSON nested deeper than ", kMaxJsonDepth);
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::null:
      return Value::none();
    case T::boolean:
      return Value::boolean(j.template get<bool>());
    case T::number_integer:
      return Value::integer(j.template get<int64_t>());
    case T::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::real(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Value::real(j.template get<double>());
    case T::string:
      return Value::string(j.template get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(from_json_at_depth(item, depth + 1));
      return Value::list(std::move(items));
    }
    case T::object: {
      auto data = std::make_shared<DictData>();
      data->entries.reserve(j.size());
      for (const auto& [key, item] : j.items())
        data->entries.emplace_back(Value::string(key), from_json_at_depth(item, depth + 1));
      return Value::dict(std::move(data));
    }
    default:
      fail("chat template: context holds a JSON value of unsupported type ", j.type_name());
  }
}

void append_hex(std::string& out, const char* prefix, unsigned value, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%0*x", digits, value);
  out += prefix;
  out += buf;
}

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char32_t quote = (has_single && !has_double) ? U'"' : U'\'';
  std::string out(1, static_cast<char>(quote));
  for (char32_t cp : decode_utf8(s)) {
    if (cp == quote || cp == U'\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (is_printable(cp)) {
      append_utf8(out, cp);
    } else if (cp < 0x100) {
      append_hex(out, "\\x", cp, 2);
    } else if (cp < 0x10000) {
      append_hex(out, "\\u", cp, 4);
    } else {
      append_hex(out, "\\U", cp, 8);
    }
  }
  out += static_cast<char>(quote);
  return out;
}

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  auto escape_code_unit = [&](unsigned u) { append_hex(out, "\\u", u, 4); };
  auto escape_simple = [&](char32_t cp) -> bool {
    switch (cp) {
      case U'"': out += "\\\""; return true;
      case U'\\': out += "\\\\"; return true;
      case U'\n': out += "\\n"; return true;
      case U'\r': out += "\\r"; return true;
      case U'\t': out += "\\t"; return true;
      case U'\b': out += "\\b"; return true;
      case U'\f': out += "\\f"; return true;
      default: return false;
    }
  };
  if (!ensure_ascii) {
    for (char c : s) {
      const auto u = static_cast<unsigned char>(c);
      if (escape_simple(u)) continue;
      if (u < 0x20) {
        escape_code_unit(u);
      } else {
        out += c;  // non-ASCII bytes pass through unchanged
      }
    }
  } else {
    for (char32_t cp : decode_utf8(s)) {
      if (escape_simple(cp)) continue;
      if (cp >= 0x20 && cp < 0x7F) {
        out += static_cast<char>(cp);
      } else if (cp < 0x10000) {
        escape_code_unit(cp);
      } else {
        const char32_t v = cp - 0x10000;
        escape_code_unit(0xD800 + (v >> 10));
        escape_code_unit(0xDC00 + (v & 0x3FF));
      }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return format_float(d);
}

[[noreturn]] void not_serializable(const Value& v) {
  fail("Object of type ", v.is_undefined() ? "Undefined" : type_name(v), " is not JSON serializable");
}

std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return key.as_string();
    case Value::Kind::kBool: return key.as_bool() ? "true" : "false";
    case Value::Kind::kNone: return "null";
    case Value::Kind::kInt: return std::to_string(key.as_int());
    case Value::Kind::kFloat: return json_float(key.as_double());
    default: fail("keys must be str, int, float, bool or None, not ", type_name(key));
  }
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonStyle& style) : style_(style) {
    if (style.separators) {
      item_sep_ = style.separators->first;
      key_sep_ = style.separators->second;
    } else {
      item_sep_ = style.indent ? "," : ", ";
      key_sep_ = ": ";
    }
  }

  void write(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::kNone: out_ += "null"; return;
      case Value::Kind::kBool: out_ += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out_ += std::to_string(v.as_int()); return;
      case Value::Kind::kFloat: out_ += json_float(v.as_double()); return;
      case Value::Kind::kString: json_string(out_, v.as_string(), style_.ensure_ascii); return;
      case Value::Kind::kList:
        if (v.is_generator()) not_serializable(v);
        write_list(v.items(), level);
        return;
      case Value::Kind::kDict: write_dict(v.dict_data(), level); return;
      default: not_serializable(v);
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    if (!style_.indent) return;
    out_ += '\n';
    for (int i = 0; i < level; ++i) out_ += *style_.indent;
  }

  void write_list(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    newline(level + 1);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) {
        out_ += item_sep_;
        newline(level + 1);
      }
      write(items[i], level + 1);
    }
    newline(level);
    out_ += ']';
  }

  void write_dict(const DictData& dict, int level) {
    if (dict.entries.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : dict.entries) entries.push_back(&e);
    if (style_.sort_keys)
      std::stable_sort(entries.begin(), entries.end(),
                       [](auto* a, auto* b) { return compare(a->first, b->first) < 0; });
    out_ += '{';
    newline(level + 1);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) {
        out_ += item_sep_;
        newline(level + 1);
      }
      json_string(out_, json_key(entries[i]->first), style_.ensure_ascii);
      out_ += key_sep_;
      write(entries[i]->second, level + 1);
    }
    newline(level);
    out_ += '}';
  }

  const JsonStyle& style_;
  std::string item_sep_, key_sep_;
  std::string out_;
};

int sign_of(double d) { return d < 0 ? -1 : (d > 0 ? 1 : 0); }

}  // namespace

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(const std::string& key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.string_ = std::move(hint);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  v.int_ = b ? 1 : 0;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::real(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.double_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::move(s);
  return v;
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ListData>(ListData{std::move(items), is_tuple});
  return v;
}

Value Value::generator(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.list_->is_generator = true;
  return v;
}

Value Value::failing_generator(std::string error) {
  Value v = generator({});
  v.list_->deferred_error = std::move(error);
  return v;
}

Value Value::dict(std::shared_ptr<DictData> data) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::move(data);
  return v;
}

Value Value::dict() { return dict(std::make_shared<DictData>()); }

Value Value::name_space(std::shared_ptr<DictData> attributes) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.dict_ = std::move(attributes);
  return v;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.function_ = std::make_shared<Function>(Function{std::move(name), std::move(call)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json_at_depth(j, 0); }
Value Value::from_json(const nlohmann::json& j) { return from_json_at_depth(j, 0); }

double Value::as_double() const {
  return kind_ == Kind::kFloat ? double_ : static_cast<double>(int_);
}

const void* Value::identity() const {
  if (list_) return list_.get();
  if (dict_) return dict_.get();
  if (function_) return function_.get();
  return nullptr;
}

void raise_undefined(const Value& v) {
  fail(v.as_string().empty() ? std::string("value is undefined") : v.as_string());
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return false;
    case Value::Kind::kBool: return v.as_bool();
    case Value::Kind::kInt: return v.as_int() != 0;
    case Value::Kind::kFloat: return v.as_double() != 0.0;
    case Value::Kind::kString: return !v.as_string().empty();
    case Value::Kind::kList: return v.is_generator() || !v.items().empty();
    case Value::Kind::kDict: return !v.dict_data().entries.empty();
    default: return true;
  }
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // "-1.2345e+02": shortest round-trip digits
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string sign;
  if (mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  const int n = static_cast<int>(digits.size());
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  if (decpt <= -4 || decpt > 16) {
    std::string out = sign + digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + exp_buf;
  }
  if (decpt <= 0) return sign + "0." + std::string(-decpt, '0') + digits;
  if (decpt >= n) return sign + digits + std::string(decpt - n, '0') + ".0";
  return sign + digits.substr(0, decpt) + "." + digits.substr(decpt);
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kNone: return "NoneType";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kList: return v.is_generator() ? "generator" : (v.is_tuple() ? "tuple" : "list");
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kNamespace: return "Namespace";
    case Value::Kind::kFunction: return "function";
  }
  return "object";
}

std::string object_description(const Value& v) {
  if (v.is_none()) return "'None'";
  return "'" + type_name(v) + " object'";
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "";
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt: return std::to_string(v.as_int());
    case Value::Kind::kFloat: return format_float(v.as_double());
    case Value::Kind::kString: return v.as_string();
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return "Undefined";
    case Value::Kind::kString: return repr_string(v.as_string());
    case Value::Kind::kList: {
      if (v.is_generator()) return "<generator object>";
      const bool tuple = v.is_tuple();
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) out += ", ";
        out += repr(v.items()[i]);
      }
      if (tuple && v.items().size() == 1) out += ",";
      return out + (tuple ? ")" : "]");
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      std::string out = v.is_namespace() ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [key, item] : v.dict_data().entries) {
        if (!first) out += ", ";
        first = false;
        out += repr(key) + ": " + repr(item);
      }
      return out + (v.is_namespace() ? "}>" : "}");
    }
    case Value::Kind::kFunction: return "<function " + v.function_data().name + ">";
    default: return to_str(v);
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.is_generator() || b.is_generator()) return a.identity() == b.identity();
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equals(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const auto& ea = a.dict_data().entries;
      if (ea.size() != b.dict_data().entries.size()) return false;
      for (const auto& [key, item] : ea) {
        const Value* other = b.dict_data().find(key);
        if (!other || !equals(item, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_undefined()) raise_undefined(a);
  if (b.is_undefined()) raise_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return sign_of(a.as_double() - b.as_double());
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : (a.as_string() == b.as_string() ? 0 : 1);
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_generator() && !b.is_generator()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail("'", op, "' not supported between instances of '", type_name(a), "' and '", type_name(b), "'");
}

std::string to_json(const Value& v, const JsonStyle& style) {
  JsonWriter writer(style);
  writer.write(v, 0);
  return writer.take();
}

}  // namespace zen::jinja
