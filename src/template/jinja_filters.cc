// jinja2's built-in filters and tests (plus transformers' tojson), with jinja2's argument
// names and Python semantics.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/error.h"
#include "template/jinja_builtins.h"
#include "template/jinja_text.h"

namespace zen::jinja {
namespace {

// ---- helpers ----

Value attribute_path(const Value& item, const Value& attribute, const Value& fallback) {
  // jinja2's make_attrgetter: "a.b.0" looks up a, then b, then index 0, with getitem.
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string& s = attribute.as_string();
    size_t start = 0;
    while (true) {
      const size_t dot = s.find('.', start);
      std::string part = s.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(numeric ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  Value v = item;
  for (const auto& part : parts) {
    v = get_item(v, part);
    if (!fallback.is_undefined() && !fallback.is_none() && v.is_undefined()) v = fallback;
  }
  return v;
}

Value lower_if_string(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value::string(str_lower(v.as_string())) : v;
}

Value key_of(const Value& item, const Value* attribute, bool case_sensitive) {
  const Value v = attribute ? attribute_path(item, *attribute, Value()) : item;
  return lower_if_string(v, case_sensitive);
}

Value no_more_args(const char* name, CallArgs& a) {
  ArgReader r(name, a, {});
  return Value();
}

// Python int(str): optional sign, digits with single underscores, surrounding whitespace.
std::optional<int64_t> parse_python_int(const std::string& text, int base) {
  std::string s = str_strip(text, nullptr, StripSide::kBoth);
  std::string digits;
  bool negative = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (i + 1 < s.size() && s[i] == '0') {
      const char p = static_cast<char>(s[i + 1] | 0x20);
      const int prefixed = p == 'x' ? 16 : (p == 'o' ? 8 : (p == 'b' ? 2 : 0));
      if (prefixed != 0 && (base == 0 || base == prefixed)) {
        base = prefixed;
        i += 2;
        if (i < s.size() && s[i] == '_') ++i;
      }
    }
    if (base == 0) base = 10;
  }
  for (; i < s.size(); ++i) {
    if (s[i] == '_' && !digits.empty() && i + 1 < s.size() && s[i + 1] != '_') continue;
    digits += s[i];
  }
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    const int d = (c >= '0' && c <= '9') ? c - '0' : ((c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10 : 99);
    if (d >= base) return std::nullopt;
  }
  errno = 0;
  const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
  if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX)) fail("integer too large");
  return negative ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
}

// Python float(str).
std::optional<double> parse_python_float(const std::string& text) {
  std::string s = str_strip(text, nullptr, StripSide::kBoth);
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  const std::string lower = str_lower(s);
  for (const char* special : {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}) {
    if (lower == special) return std::strtod(lower.c_str(), nullptr);
  }
  if (lower.find_first_not_of("0123456789+-.e") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

// ---- filters ----

Value f_abs(const Value& v, CallArgs& a) {
  no_more_args("abs", a);
  if (v.is_float()) return Value::real(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) fail("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_undefined()) raise_undefined(v);
  fail("bad operand type for abs(): '", type_name(v), "'");
}

Value f_attr(const Value& v, CallArgs& a) {
  ArgReader r("attr", a, {"name"});
  const std::string name = to_str(r.get_or(0, Value()));
  if (v.is_dict()) {  // getattr() only: dict items are not attributes
    const Value m = get_attribute(v, name);
    if (m.is_function() || m.is_undefined()) return m;
    return Value::undefined(object_description(v) + " has no attribute '" + name + "'");
  }
  return get_attribute(v, name);
}

Value f_batch(const Value& v, CallArgs& a) {
  ArgReader r("batch", a, {"linecount", "fill_with"});
  const Value count_v = r.get_or(0, Value());
  if (!count_v.is_int() || count_v.as_int() <= 0) fail("batch: linecount must be a positive integer");
  const auto count = static_cast<size_t>(count_v.as_int());
  const Value fill = r.get_or(1, Value::none());
  std::vector<Value> rows, row;
  for (auto& item : iterate(v)) {
    if (row.size() == count) {
      rows.push_back(Value::list(std::move(row)));
      row.clear();
    }
    row.push_back(std::move(item));
  }
  if (!row.empty()) {
    if (!fill.is_none())
      while (row.size() < count) row.push_back(fill);
    rows.push_back(Value::list(std::move(row)));
  }
  return Value::generator(std::move(rows));
}

Value f_capitalize(const Value& v, CallArgs& a) {
  no_more_args("capitalize", a);
  return Value::string(str_capitalize(to_str(v)));
}

Value f_center(const Value& v, CallArgs& a) {
  ArgReader r("center", a, {"width"});
  CallArgs method_args;
  method_args.positional.push_back(r.get_or(0, Value::integer(80)));
  return get_attribute(Value::string(to_str(v)), "center").function_data().call(method_args);
}

Value f_length(const Value& v, CallArgs& a) {
  no_more_args("length", a);
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value::integer(0);
    case Value::Kind::kString: return Value::integer(static_cast<int64_t>(code_point_count(v.as_string())));
    case Value::Kind::kList:
      if (v.is_generator()) break;
      return Value::integer(static_cast<int64_t>(v.items().size()));
    case Value::Kind::kDict: return Value::integer(static_cast<int64_t>(v.dict_data().entries.size()));
    default: break;
  }
  fail("object of type '", type_name(v), "' has no len()");
}

Value f_default(const Value& v, CallArgs& a) {
  ArgReader r("default", a, {"default_value", "boolean"});
  const bool boolean = truthy(r.get_or(1, Value::boolean(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return r.get_or(0, Value::string(""));
  return v;
}

Value f_dictsort(const Value& v, CallArgs& a) {
  ArgReader r("dictsort", a, {"case_sensitive", "by", "reverse"});
  const bool case_sensitive = truthy(r.get_or(0, Value::boolean(false)));
  const std::string by = to_str(r.get_or(1, Value::string("key")));
  const bool reverse = truthy(r.get_or(2, Value::boolean(false)));
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  if (!v.is_dict()) fail("dictsort: a mapping is required, not ", type_name(v));
  std::vector<Value> pairs;
  for (const auto& [k, item] : v.dict_data().entries) pairs.push_back(Value::list({k, item}, true));
  const size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const int c = compare(lower_if_string(x.items()[pos], case_sensitive), lower_if_string(y.items()[pos], case_sensitive));
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(pairs));
}

Value f_escape(const Value& v, CallArgs& a) {
  no_more_args("escape", a);
  std::string out;
  for (char c : to_str(v)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::string(std::move(out));
}

Value f_first(const Value& v, CallArgs& a) {
  no_more_args("first", a);
  if (v.is_list() && !v.items().empty()) return v.items().front();
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(const Value& v, CallArgs& a) {
  no_more_args("last", a);
  if (v.is_generator()) fail("'generator' object is not reversible");
  if (v.is_list() && !v.items().empty()) return v.items().back();
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_float(const Value& v, CallArgs& a) {
  ArgReader r("float", a, {"default"});
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_number()) return Value::real(v.as_double());
  if (v.is_string())
    if (auto d = parse_python_float(v.as_string())) return Value::real(*d);
  return r.get_or(0, Value::real(0.0));
}

Value f_format(const Value& v, CallArgs& a) {
  if (!a.positional.empty() && !a.keyword.empty()) fail("can't handle positional and keyword arguments at the same time");
  if (!a.keyword.empty()) {
    auto kwargs = std::make_shared<DictData>();
    for (auto& [k, item] : a.keyword) kwargs->set(Value::string(k), item);
    return Value::string(percent_format(to_str(v), Value::dict(std::move(kwargs))));
  }
  return Value::string(percent_format(to_str(v), Value::list(a.positional, true)));
}

Value f_indent(const Value& v, CallArgs& a) {
  ArgReader r("indent", a, {"width", "first", "blank"});
  const Value width = r.get_or(0, Value::integer(4));
  const bool first = truthy(r.get_or(1, Value::boolean(false)));
  const bool blank = truthy(r.get_or(2, Value::boolean(false)));
  std::string indention;
  if (width.is_string()) {
    indention = width.as_string();
  } else if (width.is_int() || width.is_bool()) {
    indention = std::string(static_cast<size_t>(std::clamp<int64_t>(width.as_int(), 0, 1 << 20)), ' ');
  } else {
    fail("indent: width must be an int or a string");
  }
  if (v.is_undefined()) raise_undefined(v);
  if (!v.is_string()) fail("unsupported operand type(s) for +=: '", type_name(v), "' and 'str'");
  CallArgs no_args;
  const Value lines_v = get_attribute(Value::string(v.as_string() + "\n"), "splitlines").function_data().call(no_args);
  const auto& lines = lines_v.items();
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" + indention : "") + lines[i].as_string();
  } else {
    out = lines.empty() ? "" : lines[0].as_string();
    for (size_t i = 1; i < lines.size(); ++i) {
      const std::string& line = lines[i].as_string();
      out += "\n" + (line.empty() ? line : indention + line);
    }
  }
  if (first) out = indention + out;
  return Value::string(std::move(out));
}

Value f_int(const Value& v, CallArgs& a) {
  ArgReader r("int", a, {"default", "base"});
  const Value fallback = r.get_or(0, Value::integer(0));
  const Value base_v = r.get_or(1, Value::integer(10));
  if (!base_v.is_int()) fail("int: base must be an integer");
  if (v.is_undefined()) raise_undefined(v);
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) fail("cannot convert float ", format_float(v.as_double()), " to integer");
    if (!(std::fabs(std::trunc(v.as_double())) < 9223372036854775808.0))  // Python's are unbounded; ours 64-bit
      fail("int: ", format_float(v.as_double()), " is too large for a 64-bit integer");
    return Value::integer(static_cast<int64_t>(std::trunc(v.as_double())));
  }
  if (v.is_string()) {
    if (auto i = parse_python_int(v.as_string(), static_cast<int>(base_v.as_int()))) return Value::integer(*i);
    if (auto d = parse_python_float(v.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
      return Value::integer(static_cast<int64_t>(std::trunc(*d)));
  }
  return fallback;
}

Value f_join(const Value& v, CallArgs& a) {
  ArgReader r("join", a, {"d", "attribute"});
  const std::string sep = to_str(r.get_or(0, Value::string("")));
  const Value* attribute = r.get(1);
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute ? attribute_path(item, *attribute, Value()) : item);
  }
  return Value::string(std::move(out));
}

Value f_list(const Value& v, CallArgs& a) {
  no_more_args("list", a);
  return Value::list(iterate(v));
}

Value f_lower(const Value& v, CallArgs& a) {
  no_more_args("lower", a);
  return Value::string(str_lower(to_str(v)));
}

Value f_upper(const Value& v, CallArgs& a) {
  no_more_args("upper", a);
  return Value::string(str_upper(to_str(v)));
}

Value f_items(const Value& v, CallArgs& a) {
  no_more_args("items", a);
  if (v.is_undefined()) return Value::generator({});
  if (!v.is_dict()) return Value::failing_generator("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [k, item] : v.dict_data().entries) pairs.push_back(Value::list({k, item}, true));
  return Value::generator(std::move(pairs));
}

Value f_map(const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (a.positional.empty()) {
    const Value* attribute = nullptr;
    Value fallback = Value::none();
    for (const auto& [k, item] : a.keyword) {
      if (k == "attribute") {
        attribute = &item;
      } else if (k == "default") {
        fallback = item;
      } else {
        fail("Unexpected keyword argument '", k, "'");
      }
    }
    if (!attribute) fail("map requires a filter name or attribute=");
    if (truthy(v))
      for (const auto& item : iterate(v)) out.push_back(attribute_path(item, *attribute, fallback));
    return Value::generator(std::move(out));
  }
  const std::string name = to_str(a.positional[0]);
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  if (truthy(v)) {
    for (const auto& item : iterate(v)) {
      CallArgs copy = rest;
      out.push_back(apply_filter(name, item, copy));
    }
  }
  return Value::generator(std::move(out));
}

Value min_or_max(const Value& v, CallArgs& a, const char* name, bool want_max) {
  ArgReader r(name, a, {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(r.get_or(0, Value::boolean(false)));
  const Value* attribute = r.get(1);
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = key_of(items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key_of(items[i], attribute, case_sensitive);
    const int c = compare(k, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

Value f_min(const Value& v, CallArgs& a) { return min_or_max(v, a, "min", false); }
Value f_max(const Value& v, CallArgs& a) { return min_or_max(v, a, "max", true); }

Value f_pprint(const Value& v, CallArgs& a) {
  no_more_args("pprint", a);
  return Value::string(repr(v));
}

// select / reject / selectattr / rejectattr.
Value select_items(const Value& v, CallArgs& a, bool by_attribute, bool keep_when) {
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (a.positional.empty()) fail("selectattr/rejectattr require an attribute name");
    attribute = a.positional[next++];
  }
  std::string test;
  if (next < a.positional.size()) test = to_str(a.positional[next++]);
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next), a.positional.end());
  test_args.keyword = a.keyword;
  std::vector<Value> out;
  for (const auto& item : iterate(v)) {
    const Value subject = by_attribute ? attribute_path(item, attribute, Value()) : item;
    bool passed = false;
    if (test.empty()) {
      passed = truthy(subject);
    } else {
      CallArgs copy = test_args;
      passed = apply_test(test, subject, copy);
    }
    if (passed == keep_when) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value f_select(const Value& v, CallArgs& a) { return select_items(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_items(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_items(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_items(v, a, true, false); }

Value f_replace(const Value& v, CallArgs& a) {
  ArgReader r("replace", a, {"old", "new", "count"});
  CallArgs method_args;
  method_args.positional = {Value::string(to_str(r.get_or(0, Value()))), Value::string(to_str(r.get_or(1, Value())))};
  const Value count = r.get_or(2, Value::none());
  if (!count.is_none()) method_args.positional.push_back(count);
  return get_attribute(Value::string(to_str(v)), "replace").function_data().call(method_args);
}

Value f_reverse(const Value& v, CallArgs& a) {
  no_more_args("reverse", a);
  if (v.is_string()) {
    std::u32string cps = decode_utf8(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(encode_utf8(cps));
  }
  if (v.is_generator()) fail("'generator' object is not reversible");
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::generator(std::move(items));  // a reverse iterator in Python
}

Value f_round(const Value& v, CallArgs& a) {
  ArgReader r("round", a, {"precision", "method"});
  const Value precision_v = r.get_or(0, Value::integer(0));
  const std::string method = to_str(r.get_or(1, Value::string("common")));
  if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  if (!precision_v.is_int()) fail("round: precision must be an integer");
  if (v.is_undefined()) raise_undefined(v);
  if (!v.is_number()) fail("type ", type_name(v), " doesn't define __round__ method");
  const int64_t precision = std::clamp<int64_t>(precision_v.as_int(), -308, 308);
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.as_int());  // round(int, n) stays int for n >= 0
    const double d = v.as_double();
    if (!std::isfinite(d)) return v;
    if (precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), d);
      return Value::real(std::strtod(buf, nullptr));  // printf rounds the exact value, half to even
    }
    const double scale = std::pow(10.0, static_cast<double>(-precision));
    return Value::real(std::nearbyint(d / scale) * scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_double() * scale;
  return Value::real((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value f_safe(const Value& v, CallArgs& a) {
  no_more_args("safe", a);
  return Value::string(to_str(v));  // Markup(value): a string from here on
}

Value f_sort(const Value& v, CallArgs& a) {
  ArgReader r("sort", a, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = truthy(r.get_or(0, Value::boolean(false)));
  const bool case_sensitive = truthy(r.get_or(1, Value::boolean(false)));
  const Value* attribute = r.get(2);
  std::vector<Value> items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(key_of(item, attribute, case_sensitive), std::move(item));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    const int c = compare(x.first, y.first);
    return reverse ? c > 0 : c < 0;
  });
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Value f_string(const Value& v, CallArgs& a) {
  no_more_args("string", a);
  return Value::string(to_str(v));
}

Value f_sum(const Value& v, CallArgs& a) {
  ArgReader r("sum", a, {"attribute", "start"});
  const Value* attribute = r.get(0);
  Value total = r.get_or(1, Value::integer(0));
  for (const auto& item : iterate(v)) {
    const Value x = attribute ? attribute_path(item, *attribute, Value()) : item;
    if (x.is_undefined()) raise_undefined(x);
    if (!total.is_number() || !x.is_number())
      fail("unsupported operand type(s) for +: '", type_name(total), "' and '", type_name(x), "'");
    if (total.is_float() || x.is_float()) {
      total = Value::real(total.as_double() + x.as_double());
    } else {
      int64_t s = 0;
      if (__builtin_add_overflow(total.as_int(), x.as_int(), &s)) fail("integer overflow");
      total = Value::integer(s);
    }
  }
  return total;
}

Value f_title(const Value& v, CallArgs& a) {
  no_more_args("title", a);
  // jinja2 splits on runs of [-\s({[<] and capitalizes every piece.
  const std::u32string cps = decode_utf8(to_str(v));
  auto is_separator = [](char32_t c) {
    return is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool sep = is_separator(cps[i]);
    while (j < cps.size() && is_separator(cps[j]) == sep) ++j;
    const std::u32string piece = cps.substr(i, j - i);
    out += str_upper(encode_utf8(piece.substr(0, 1)));  // "ß" -> "SS" as in Python
    out += str_lower(encode_utf8(std::u32string_view(piece).substr(1)));
    i = j;
  }
  return Value::string(std::move(out));
}

Value f_tojson(const Value& v, CallArgs& a) {
  ArgReader r("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonStyle style;
  style.ensure_ascii = truthy(r.get_or(0, Value::boolean(false)));
  const Value indent = r.get_or(1, Value::none());
  if (indent.is_string()) {
    style.indent = indent.as_string();
  } else if (indent.is_int() || indent.is_bool()) {
    style.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_int(), 0, 1 << 16)), ' ');
  } else if (!indent.is_none()) {
    fail("tojson: indent must be an int or a string");
  }
  const Value separators = r.get_or(2, Value::none());
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.items().size() != 2 || !separators.items()[0].is_string() ||
        !separators.items()[1].is_string())
      fail("tojson: separators must be a pair of strings");
    style.separators = std::make_pair(separators.items()[0].as_string(), separators.items()[1].as_string());
  }
  style.sort_keys = truthy(r.get_or(3, Value::boolean(false)));
  return Value::string(to_json(v, style));
}

Value f_trim(const Value& v, CallArgs& a) {
  ArgReader r("trim", a, {"chars"});
  const Value chars = r.get_or(0, Value::none());
  const std::string set = chars.is_none() ? "" : to_str(chars);
  return Value::string(str_strip(to_str(v), chars.is_none() ? nullptr : &set, StripSide::kBoth));
}

Value f_truncate(const Value& v, CallArgs& a) {
  ArgReader r("truncate", a, {"length", "killwords", "end", "leeway"});
  const int64_t length = r.get_or(0, Value::integer(255)).as_int();
  const bool killwords = truthy(r.get_or(1, Value::boolean(false)));
  const std::u32string end = decode_utf8(to_str(r.get_or(2, Value::string("..."))));
  const int64_t leeway = r.get_or(3, Value::integer(5)).as_int();
  const std::u32string s = decode_utf8(to_str(v));
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value::string(to_str(v));
  const int64_t keep = std::max<int64_t>(0, length - static_cast<int64_t>(end.size()));
  std::u32string head = s.substr(0, static_cast<size_t>(keep));
  if (!killwords) {
    const size_t space = head.rfind(U' ');
    if (space != std::u32string::npos) head.resize(space);
  }
  return Value::string(encode_utf8(head + end));
}

Value f_unique(const Value& v, CallArgs& a) {
  ArgReader r("unique", a, {"case_sensitive", "attribute"});
  const bool case_sensitive = truthy(r.get_or(0, Value::boolean(false)));
  const Value* attribute = r.get(1);
  std::vector<Value> seen, out;
  for (const auto& item : iterate(v)) {
    Value k = key_of(item, attribute, case_sensitive);
    if ((k.is_list() && !k.is_tuple()) || k.is_dict()) fail("unhashable type: '", type_name(k), "'");
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(std::move(k));
    out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value f_wordcount(const Value& v, CallArgs& a) {
  no_more_args("wordcount", a);
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : decode_utf8(to_str(v))) {
    const bool word_char = is_alpha(c) || is_digit(c) || c == '_' || c >= 0x80;
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

// jinja2's generator filters (map, select, unique, batch, items, ...) only fail once
// iterated: any error is deferred into the generator.
template <FilterFn F, bool kFalsyIsEmpty = false>
Value lazy(const Value& v, CallArgs& a) {
  if (kFalsyIsEmpty && !truthy(v)) {  // map and select* start with `if value:`
    CallArgs none;
    return F(Value::list({}), a.positional.empty() && a.keyword.empty() ? none : a);
  }
  try {
    return F(v, a);
  } catch (const Error& e) {
    return Value::failing_generator(e.what());
  }
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;  // nullptr: jinja2 has it, this renderer does not
};

constexpr NamedFilter kFilters[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", lazy<f_batch>}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"filesizeformat", nullptr},
    {"first", f_first}, {"float", f_float}, {"forceescape", f_escape}, {"format", f_format},
    {"groupby", nullptr}, {"indent", f_indent}, {"int", f_int}, {"join", f_join}, {"last", f_last},
    {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"items", lazy<f_items>}, {"map", lazy<f_map, true>},
    {"min", f_min}, {"max", f_max}, {"pprint", f_pprint}, {"random", nullptr}, {"reject", lazy<f_reject, true>},
    {"rejectattr", lazy<f_rejectattr, true>}, {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round},
    {"safe", f_safe}, {"select", lazy<f_select, true>}, {"selectattr", lazy<f_selectattr, true>}, {"slice", nullptr},
    {"sort", f_sort}, {"string", f_string}, {"striptags", nullptr}, {"sum", f_sum}, {"title", f_title},
    {"trim", f_trim}, {"truncate", f_truncate}, {"unique", lazy<f_unique>}, {"upper", f_upper},
    {"urlencode", nullptr}, {"urlize", nullptr}, {"wordcount", f_wordcount}, {"wordwrap", nullptr},
    {"xmlattr", nullptr}, {"tojson", f_tojson},
};

// ---- tests ----

const Value& test_arg(CallArgs& a, const char* name) {
  if (a.positional.size() != 1 || !a.keyword.empty()) fail("test '", name, "' takes exactly one argument");
  return a.positional[0];
}

void no_test_args(CallArgs& a, const char* name) {
  if (!a.positional.empty() || !a.keyword.empty()) fail("test '", name, "' takes no arguments");
}

// value % divisor as Python computes it (numbers only; str % x would be formatting).
double python_mod(const Value& v, const Value& divisor) {
  if (v.is_undefined()) raise_undefined(v);
  if (divisor.is_undefined()) raise_undefined(divisor);
  if (v.is_string()) fail("not all arguments converted during string formatting");
  if (!v.is_number() || !divisor.is_number())
    fail("unsupported operand type(s) for %: '", type_name(v), "' and '", type_name(divisor), "'");
  if (!v.is_float() && !divisor.is_float()) {
    const int64_t d = divisor.as_int();
    if (d == 0) fail("integer modulo by zero");
    if (d == -1) return 0;
    int64_t m = v.as_int() % d;
    if (m != 0 && ((m < 0) != (d < 0))) m += d;
    return static_cast<double>(m);
  }
  const double d = divisor.as_double();
  if (d == 0) fail("float modulo");
  double m = std::fmod(v.as_double(), d);
  if (m != 0 && ((m < 0) != (d < 0))) m += d;
  return m;
}

bool t_odd(const Value& v, CallArgs& a) { no_test_args(a, "odd"); return python_mod(v, Value::integer(2)) == 1; }
bool t_even(const Value& v, CallArgs& a) { no_test_args(a, "even"); return python_mod(v, Value::integer(2)) == 0; }
bool t_divisibleby(const Value& v, CallArgs& a) { return python_mod(v, test_arg(a, "divisibleby")) == 0; }
bool t_defined(const Value& v, CallArgs& a) { no_test_args(a, "defined"); return !v.is_undefined(); }
bool t_undefined(const Value& v, CallArgs& a) { no_test_args(a, "undefined"); return v.is_undefined(); }
bool t_filter(const Value& v, CallArgs& a) { no_test_args(a, "filter"); return v.is_string() && is_known_filter(v.as_string()); }
bool t_test(const Value& v, CallArgs& a) { no_test_args(a, "test"); return v.is_string() && is_known_test(v.as_string()); }
bool t_none(const Value& v, CallArgs& a) { no_test_args(a, "none"); return v.is_none(); }
bool t_boolean(const Value& v, CallArgs& a) { no_test_args(a, "boolean"); return v.is_bool(); }
bool t_false(const Value& v, CallArgs& a) { no_test_args(a, "false"); return v.is_bool() && !v.as_bool(); }
bool t_true(const Value& v, CallArgs& a) { no_test_args(a, "true"); return v.is_bool() && v.as_bool(); }
bool t_integer(const Value& v, CallArgs& a) { no_test_args(a, "integer"); return v.is_int(); }
bool t_float(const Value& v, CallArgs& a) { no_test_args(a, "float"); return v.is_float(); }
bool t_lower(const Value& v, CallArgs& a) {
  no_test_args(a, "lower");
  CallArgs none;
  return truthy(get_attribute(Value::string(to_str(v)), "islower").function_data().call(none));
}
bool t_upper(const Value& v, CallArgs& a) {
  no_test_args(a, "upper");
  CallArgs none;
  return truthy(get_attribute(Value::string(to_str(v)), "isupper").function_data().call(none));
}
bool t_string(const Value& v, CallArgs& a) { no_test_args(a, "string"); return v.is_string(); }
bool t_mapping(const Value& v, CallArgs& a) { no_test_args(a, "mapping"); return v.is_dict(); }
bool t_number(const Value& v, CallArgs& a) { no_test_args(a, "number"); return v.is_number(); }
bool t_sequence(const Value& v, CallArgs& a) {
  no_test_args(a, "sequence");
  return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_generator()) || v.is_dict();
}
bool t_iterable(const Value& v, CallArgs& a) {
  no_test_args(a, "iterable");
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_callable(const Value& v, CallArgs& a) {
  no_test_args(a, "callable");
  return v.is_function() || v.is_undefined();  // jinja2's Undefined defines __call__
}
bool t_sameas(const Value& v, CallArgs& a) {
  const Value& other = test_arg(a, "sameas");
  if (v.kind() != other.kind()) return false;
  if (v.identity() != nullptr) return v.identity() == other.identity();
  return equals(v, other);
}
bool t_escaped(const Value&, CallArgs& a) { no_test_args(a, "escaped"); return false; }
bool t_in(const Value& v, CallArgs& a) {
  const Value& seq = test_arg(a, "in");
  if (seq.is_string()) {
    if (!v.is_string()) fail("'in <string>' requires string as left operand, not ", type_name(v));
    return seq.as_string().find(v.as_string()) != std::string::npos;
  }
  if (seq.is_dict()) return seq.dict_data().find(v) != nullptr;
  for (const auto& item : iterate(seq))
    if (equals(item, v)) return true;
  return false;
}
bool t_eq(const Value& v, CallArgs& a) { return equals(v, test_arg(a, "eq")); }
bool t_ne(const Value& v, CallArgs& a) { return !equals(v, test_arg(a, "ne")); }
bool t_gt(const Value& v, CallArgs& a) { return compare(v, test_arg(a, "gt"), ">") > 0; }
bool t_ge(const Value& v, CallArgs& a) { return compare(v, test_arg(a, "ge"), ">=") >= 0; }
bool t_lt(const Value& v, CallArgs& a) { return compare(v, test_arg(a, "lt"), "<") < 0; }
bool t_le(const Value& v, CallArgs& a) { return compare(v, test_arg(a, "le"), "<=") <= 0; }

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

constexpr NamedTest kTests[] = {
    {"odd", t_odd}, {"even", t_even}, {"divisibleby", t_divisibleby}, {"defined", t_defined},
    {"undefined", t_undefined}, {"filter", t_filter}, {"test", t_test}, {"none", t_none},
    {"boolean", t_boolean}, {"false", t_false}, {"true", t_true}, {"integer", t_integer},
    {"float", t_float}, {"lower", t_lower}, {"upper", t_upper}, {"string", t_string},
    {"mapping", t_mapping}, {"number", t_number}, {"sequence", t_sequence}, {"iterable", t_iterable},
    {"callable", t_callable}, {"sameas", t_sameas}, {"escaped", t_escaped}, {"in", t_in},
    {"==", t_eq}, {"eq", t_eq}, {"equalto", t_eq}, {"!=", t_ne}, {"ne", t_ne}, {">", t_gt},
    {"gt", t_gt}, {"greaterthan", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"<", t_lt}, {"lt", t_lt},
    {"lessthan", t_lt}, {"<=", t_le}, {"le", t_le},
};

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::any_of(std::begin(kFilters), std::end(kFilters), [&](const NamedFilter& f) { return f.name == name; });
}

bool is_known_test(std::string_view name) {
  return std::any_of(std::begin(kTests), std::end(kTests), [&](const NamedTest& t) { return t.name == name; });
}

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

Value apply_filter(const std::string& name, const Value& value, CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (!fn) {
    if (is_known_filter(name)) fail("filter '", name, "' is not supported by this renderer");
    fail("No filter named '", name, "'.");
  }
  return fn(value, args);
}

bool apply_test(const std::string& name, const Value& value, CallArgs& args) {
  const TestFn fn = find_test(name);
  if (!fn) fail("No test named '", name, "'.");
  return fn(value, args);
}

}  // namespace zen::jinja
