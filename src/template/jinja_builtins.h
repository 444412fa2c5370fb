// What jinja2 (in transformers' sandboxed chat-template environment) offers templates:
// filters, tests, attribute and item access with Python's str/dict/list methods, and globals.
#pragma once
#include <string>
#include <string_view>

#include "template/jinja_value.h"

namespace zen::jinja {

using FilterFn = Value (*)(const Value& value, CallArgs& args);
using TestFn = bool (*)(const Value& value, CallArgs& args);

// Filters/tests jinja2 (plus transformers' tojson) defines. A known name may still be
// unimplemented here: find_* then returns nullptr and rendering reports it if reached.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// Applies a filter or test by name (error if unknown or unsupported).
Value apply_filter(const std::string& name, const Value& value, CallArgs& args);
bool apply_test(const std::string& name, const Value& value, CallArgs& args);

// jinja2's environment.getattr (obj.name: methods first, then items) and getitem
// (obj[key]: items first, then methods). Missing -> Undefined carrying jinja2's message;
// Undefined obj -> throws.
Value get_attribute(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Python iteration: list/tuple items, dict keys, str code points; Undefined is empty.
std::vector<Value> iterate(const Value& v);

// Python's `str % args` (printf-style formatting).
std::string percent_format(const std::string& format, const Value& args);

// Globals other than namespace(): range, dict, raise_exception, strftime_now, joiner.
void add_globals(DictData& globals);

// Reads call arguments by position or keyword, like a Python signature.
class ArgReader {
 public:
  ArgReader(std::string what, CallArgs& args, std::initializer_list<std::string_view> names);
  const Value* get(size_t index) const;  // nullptr when not passed
  Value get_or(size_t index, Value fallback) const;

 private:
  std::vector<const Value*> bound_;
};

}  // namespace zen::jinja
