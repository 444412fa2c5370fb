// The value model of the chat-template interpreter: Python objects as jinja2 sees them
// (None, bool, int, float, str, list/tuple, dict with insertion order, namespace, callables)
// plus jinja2's Undefined. Lists and dicts are shared and never mutated after construction
// (transformers renders in jinja2's ImmutableSandboxedEnvironment); namespaces are the one
// mutable object (`{% set ns.x = ... %}`).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace zen::jinja {

class Value;

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes how it prints: (1, 2) instead of [1, 2]
  // What jinja2's map/select/unique/... return: iterable, always true, no len(), no [i].
  bool is_generator = false;
  std::string deferred_error;  // a generator over a non-iterable fails only when iterated
};

struct DictData {
  std::vector<std::pair<Value, Value>> entries;  // insertion order, as Python dicts
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(Value key, Value value);
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct Function {
  std::string name;  // for messages: "raise_exception", "str.split", ...
  std::function<Value(CallArgs&)> call;
};

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // Undefined with no hint
  static Value undefined(std::string hint);  // hint: the error to raise when it is used
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value generator(std::vector<Value> items);
  static Value failing_generator(std::string error);
  static Value dict(std::shared_ptr<DictData> data);
  static Value dict();
  static Value name_space(std::shared_ptr<DictData> attributes);
  static Value function(std::string name, std::function<Value(CallArgs&)> call);
  // JSON -> Python objects (json.loads semantics); object key order is kept.
  static Value from_json(const nlohmann::ordered_json& j);
  static Value from_json(const nlohmann::json& j);  // keys arrive sorted: nlohmann::json sorts them

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kBool || kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }  // for kBool: 0/1
  double as_double() const;                // any number kind
  const std::string& as_string() const { return string_; }  // kString; Undefined's hint
  const std::vector<Value>& items() const { return list_->items; }
  bool is_tuple() const { return list_->is_tuple; }
  bool is_generator() const { return kind_ == Kind::kList && list_->is_generator; }
  const std::string& deferred_error() const { return list_->deferred_error; }
  const DictData& dict_data() const { return *dict_; }
  DictData& namespace_data() const { return *dict_; }
  const Function& function_data() const { return *function_; }
  // Identity for `is sameas` on shared objects.
  const void* identity() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0;
  std::string string_;
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<Function> function_;
};

// Python semantics.
bool truthy(const Value& v);
std::string to_str(const Value& v);   // str(v); Undefined prints as ""
std::string repr(const Value& v);     // repr(v)
std::string format_float(double d);   // repr(float)
std::string type_name(const Value& v);       // "str", "int", "dict", "NoneType", ...
std::string object_description(const Value& v);  // jinja2's "'dict object'", "'None'"
bool equals(const Value& a, const Value& b);
// <0, 0, >0 like Python's ordering; throws zen::Error for types Python cannot order (op
// names the operator in that message).
int compare(const Value& a, const Value& b, const char* op = "<");
// Throws the error an Undefined carries (jinja2's UndefinedError).
[[noreturn]] void raise_undefined(const Value& v);

// json.dumps(v, ensure_ascii, indent, separators, sort_keys).
struct JsonStyle {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None: one line
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace zen::jinja
