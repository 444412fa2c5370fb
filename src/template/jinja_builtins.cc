// Attribute and item access, Python str/dict/list methods, iteration, globals and
// printf-style formatting. Filters and tests are in jinja_filters.cc.
#include "template/jinja_builtins.h"

#include <cmath>
#include <cstdio>
#include <ctime>

#include "base/error.h"
#include "template/jinja_text.h"

namespace zen::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE

bool is_index(const Value& v) { return v.is_int() || v.is_bool(); }

Value undefined_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(object_description(obj) + " has no attribute " + repr(Value::string(name)));
}

Value undefined_element(const Value& obj, const Value& key) {
  if (key.is_string()) return undefined_attribute(obj, key.as_string());
  std::string what = object_description(obj);
  what = what.substr(1, what.size() - 2);  // unquoted, as jinja2 prints it here
  return Value::undefined(what + " has no element " + repr(key));
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
}

// Python index normalization; returns false when out of range.
bool normalize_index(int64_t& i, size_t size) {
  const auto n = static_cast<int64_t>(size);
  if (i < 0) i += n;
  return i >= 0 && i < n;
}

std::string require_string(const Value& v, const char* what) {
  if (!v.is_string()) fail(what, " must be str, not ", type_name(v));
  return v.as_string();
}

int64_t require_int(const Value& v, const char* what) {
  if (!is_index(v)) fail(what, ": '", type_name(v), "' object cannot be interpreted as an integer");
  return v.as_int();
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

// ---- str methods ----

std::vector<std::string> split_whitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  std::u32string cps = decode_utf8(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      std::u32string rest = cps.substr(i);  // Python keeps the remainder's outer whitespace
      if (from_right) std::reverse(rest.begin(), rest.end());
      parts.push_back(encode_utf8(rest));
      i = cps.size();
      break;
    }
    size_t j = i;
    while (j < cps.size() && !is_space(cps[j])) ++j;
    std::u32string word = cps.substr(i, j - i);
    if (from_right) std::reverse(word.begin(), word.end());
    parts.push_back(encode_utf8(word));
    i = j;
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> split_on(const std::string& s, const std::string& sep, int64_t maxsplit, bool from_right) {
  if (sep.empty()) fail("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t hit = s.find(sep, start);
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(start, hit - start));
      start = hit + sep.size();
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep.size()) break;
    const size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  parts.push_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> split_lines(const std::string& s, bool keepends) {
  const std::u32string cps = decode_utf8(s);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool is_break = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1C && c <= 0x1E) ||
                          c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) continue;
    size_t end = i + 1;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
    lines.push_back(encode_utf8(std::u32string_view(cps).substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) lines.push_back(encode_utf8(std::u32string_view(cps).substr(start)));
  return lines;
}

std::string replace_all(const std::string& s, const std::string& old, const std::string& replacement, int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts between every code point
    const std::u32string cps = decode_utf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      if (i < cps.size()) append_utf8(out, cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, start);
    if (hit == std::string::npos) break;
    out.append(s, start, hit - start);
    out += replacement;
    start = hit + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  return out;
}

int64_t count_occurrences(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(code_point_count(s)) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

bool affix_matches(const std::string& s, const Value& affix, bool at_start) {
  auto one = [&](const Value& a) {
    const std::string& x = require_string(a, at_start ? "startswith argument" : "endswith argument");
    if (x.size() > s.size()) return false;
    return at_start ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list() && affix.is_tuple()) {
    for (const auto& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

template <typename Pred>
bool all_code_points(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (char32_t c : decode_utf8(s))
    if (!pred(c)) return false;
  return true;
}

bool cased_check(const std::string& s, bool want_upper) {
  bool any_cased = false;
  for (char32_t c : decode_utf8(s)) {
    if (is_upper(c)) {
      if (!want_upper) return false;
      any_cased = true;
    } else if (is_lower(c)) {
      if (want_upper) return false;
      any_cased = true;
    }
  }
  return any_cased;
}

std::string pad(const std::string& s, int64_t width, const std::string& fill, int align) {
  const auto len = static_cast<int64_t>(code_point_count(s));
  if (width <= len) return s;
  const int64_t total = width - len;
  int64_t left = align < 0 ? 0 : (align > 0 ? total : total / 2 + (total & width & 1));
  int64_t right = total - left;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < right; ++i) out += fill;
  return out;
}

std::string format_method(const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else fail("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("Single '{' encountered in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) fail("str.format: format specs and conversions are not supported");
    const Value* v = nullptr;
    if (field.empty() || std::isdigit(static_cast<unsigned char>(field[0]))) {
      const size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= a.positional.size()) fail("Replacement index ", idx, " out of range for positional args tuple");
      v = &a.positional[idx];
    } else {
      for (const auto& [k, kv] : a.keyword)
        if (k == field) v = &kv;
      if (!v) fail("KeyError: '", field, "'");
    }
    out += to_str(*v);
    i = close;
  }
  return out;
}

Value call_str_method(const std::string& s, const std::string& name, CallArgs& a) {
  const std::string what = "str." + name;
  if (name == "startswith" || name == "endswith") {
    ArgReader r(what, a, {"prefix", "start", "end"});
    if (!r.get(0)) fail(what, "() takes at least 1 argument");
    return Value::boolean(affix_matches(s, *r.get(0), name == "startswith"));
  }
  if (name == "split" || name == "rsplit") {
    ArgReader r(what, a, {"sep", "maxsplit"});
    const Value sep = r.get_or(0, Value::none());
    const int64_t maxsplit = require_int(r.get_or(1, Value::integer(-1)), "maxsplit");
    if (sep.is_none()) return string_list(split_whitespace(s, maxsplit, name == "rsplit"));
    return string_list(split_on(s, require_string(sep, "separator"), maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") {
    ArgReader r(what, a, {"keepends"});
    return string_list(split_lines(s, truthy(r.get_or(0, Value::boolean(false)))));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgReader r(what, a, {"chars"});
    const Value chars = r.get_or(0, Value::none());
    std::string set;
    if (!chars.is_none()) set = require_string(chars, "strip arg");
    const StripSide side = name == "strip" ? StripSide::kBoth : (name == "lstrip" ? StripSide::kLeft : StripSide::kRight);
    return Value::string(str_strip(s, chars.is_none() ? nullptr : &set, side));
  }
  if (name == "replace") {
    ArgReader r(what, a, {"old", "new", "count"});
    if (!r.get(0) || !r.get(1)) fail(what, "() takes at least 2 arguments");
    return Value::string(replace_all(s, require_string(*r.get(0), "replace() argument 1"),
                                     require_string(*r.get(1), "replace() argument 2"),
                                     require_int(r.get_or(2, Value::integer(-1)), "count")));
  }
  if (name == "upper") return Value::string(str_upper(s));
  if (name == "lower" || name == "casefold") return Value::string(str_lower(s));
  if (name == "title") return Value::string(str_title(s));
  if (name == "capitalize") return Value::string(str_capitalize(s));
  if (name == "swapcase") {
    std::string out;
    for (char32_t c : decode_utf8(s)) append_utf8(out, is_upper(c) ? to_lower(c) : to_upper(c));
    return Value::string(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    ArgReader r(what, a, {"sub"});
    const std::string sub = require_string(r.get_or(0, Value()), "substring");
    const size_t hit = (name[0] == 'r') ? s.rfind(sub) : s.find(sub);
    if (hit == std::string::npos) {
      if (name.find("index") != std::string::npos) fail("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, hit))));
  }
  if (name == "count") {
    ArgReader r(what, a, {"sub"});
    return Value::integer(count_occurrences(s, require_string(r.get_or(0, Value()), "substring")));
  }
  if (name == "join") {
    ArgReader r(what, a, {"iterable"});
    std::string out;
    size_t i = 0;
    for (const auto& item : iterate(r.get_or(0, Value()))) {
      if (!item.is_string()) fail("sequence item ", i, ": expected str instance, ", type_name(item), " found");
      if (i++ > 0) out += s;
      out += item.as_string();
    }
    return Value::string(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgReader r(what, a, {"affix"});
    const std::string x = require_string(r.get_or(0, Value()), what.c_str());
    const bool prefix = name == "removeprefix";
    if (x.size() <= s.size() && affix_matches(s, Value::string(x), prefix))
      return Value::string(prefix ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
    return Value::string(s);
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return Value::boolean(all_code_points(s, is_digit));
  if (name == "isalpha") return Value::boolean(all_code_points(s, is_alpha));
  if (name == "isalnum") return Value::boolean(all_code_points(s, [](char32_t c) { return is_alpha(c) || is_digit(c); }));
  if (name == "isspace") return Value::boolean(all_code_points(s, is_space));
  if (name == "isupper") return Value::boolean(cased_check(s, true));
  if (name == "islower") return Value::boolean(cased_check(s, false));
  if (name == "center" || name == "ljust" || name == "rjust") {
    ArgReader r(what, a, {"width", "fillchar"});
    const int64_t width = require_int(r.get_or(0, Value()), "width");
    const std::string fill = require_string(r.get_or(1, Value::string(" ")), "fillchar");
    if (code_point_count(fill) != 1) fail("The fill character must be exactly one character long");
    return Value::string(pad(s, width, fill, name == "center" ? 0 : (name == "ljust" ? -1 : 1)));
  }
  if (name == "zfill") {
    ArgReader r(what, a, {"width"});
    const int64_t width = require_int(r.get_or(0, Value()), "width");
    const auto len = static_cast<int64_t>(code_point_count(s));
    if (width <= len) return Value::string(s);
    const bool sign = !s.empty() && (s[0] == '-' || s[0] == '+');
    return Value::string((sign ? s.substr(0, 1) : "") + std::string(static_cast<size_t>(width - len), '0') +
                         (sign ? s.substr(1) : s));
  }
  if (name == "partition" || name == "rpartition") {
    ArgReader r(what, a, {"sep"});
    const std::string sep = require_string(r.get_or(0, Value()), "separator");
    if (sep.empty()) fail("empty separator");
    const size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    std::vector<Value> parts;
    if (hit == std::string::npos) {
      const bool left = name == "partition";
      parts = {Value::string(left ? s : ""), Value::string(""), Value::string(left ? "" : s)};
    } else {
      parts = {Value::string(s.substr(0, hit)), Value::string(sep), Value::string(s.substr(hit + sep.size()))};
    }
    return Value::list(std::move(parts), true);
  }
  if (name == "format") return Value::string(format_method(s, a));
  fail("str.", name, "() is not supported");
}

constexpr std::string_view kStrMethods[] = {
    "startswith", "endswith", "split",   "rsplit",     "splitlines",   "strip",   "lstrip",  "rstrip",
    "replace",    "upper",    "lower",   "casefold",   "title",        "capitalize", "swapcase", "find",
    "rfind",      "index",    "rindex",  "count",      "join",         "removeprefix", "removesuffix",
    "isdigit",    "isnumeric", "isdecimal", "isalpha", "isalnum",      "isspace", "isupper", "islower",
    "center",     "ljust",    "rjust",   "zfill",      "partition",    "rpartition", "format"};

bool in_list(std::string_view name, const std::string_view* list, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (list[i] == name) return true;
  return false;
}
template <size_t N>
bool in_list(std::string_view name, const std::string_view (&list)[N]) {
  return in_list(name, list, N);
}

// ---- dict and list methods ----
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values", "copy"};
constexpr std::string_view kDictMutators[] = {"pop", "popitem", "setdefault", "update", "clear"};
constexpr std::string_view kListMethods[] = {"index", "count", "copy"};
constexpr std::string_view kListMutators[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

Value call_dict_method(const Value& d, const std::string& name, CallArgs& a) {
  const std::string what = "dict." + name;
  if (name == "get") {
    ArgReader r(what, a, {"key", "default"});
    if (!r.get(0)) fail("get expected at least 1 argument, got 0");
    const Value* found = d.dict_data().find(*r.get(0));
    return found ? *found : r.get_or(1, Value::none());
  }
  ArgReader r(what, a, {});
  if (name == "copy") return Value::dict(std::make_shared<DictData>(d.dict_data()));
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict_data().entries) {
    if (name == "items") {
      out.push_back(Value::list({k, v}, true));
    } else {
      out.push_back(name == "keys" ? k : v);
    }
  }
  return Value::list(std::move(out));
}

Value call_list_method(const Value& l, const std::string& name, CallArgs& a) {
  const std::string what = "list." + name;
  if (name == "copy") {
    ArgReader r(what, a, {});
    return Value::list(l.items(), l.is_tuple());
  }
  ArgReader r(what, a, {"value"});
  const Value x = r.get_or(0, Value());
  int64_t count = 0;
  for (size_t i = 0; i < l.items().size(); ++i) {
    if (!equals(l.items()[i], x)) continue;
    if (name == "index") return Value::integer(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") fail(repr(x), " is not in list");
  return Value::integer(count);
}

Value bound_method(const Value& obj, const std::string& name) {
  const std::string full = type_name(obj) + "." + name;
  switch (obj.kind()) {
    case Value::Kind::kString:
      return Value::function(full, [s = obj.as_string(), name](CallArgs& a) { return call_str_method(s, name, a); });
    case Value::Kind::kDict:
      return Value::function(full, [obj, name](CallArgs& a) { return call_dict_method(obj, name, a); });
    default:
      return Value::function(full, [obj, name](CallArgs& a) { return call_list_method(obj, name, a); });
  }
}

// obj.name as Python's getattr sees it: methods (and namespace attributes), or nullopt.
std::optional<Value> python_attribute(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kString:
      if (in_list(name, kStrMethods)) return bound_method(obj, name);
      return std::nullopt;
    case Value::Kind::kDict:
      if (in_list(name, kDictMethods)) return bound_method(obj, name);
      if (in_list(name, kDictMutators)) return unsafe(obj, name);
      return std::nullopt;
    case Value::Kind::kList:
      if (obj.is_generator()) return std::nullopt;
      if (name == "index" || name == "count" || (!obj.is_tuple() && name == "copy")) return bound_method(obj, name);
      if (!obj.is_tuple() && in_list(name, kListMutators)) return unsafe(obj, name);
      return std::nullopt;
    case Value::Kind::kNamespace:
      if (const Value* v = obj.namespace_data().find(name)) return *v;
      return std::nullopt;
    default: return std::nullopt;
  }
}

// ---- printf-style formatting ----
class PercentFormatter {
 public:
  PercentFormatter(const std::string& fmt, const Value& args) : fmt_(fmt), args_(args) {
    if (args.is_list() && args.is_tuple()) {
      positional_ = args.items();
    } else {
      positional_ = {args};
    }
    // Python skips the "not all arguments converted" check for anything with __getitem__
    // that is not a tuple or str (lists, dicts, jinja2's Undefined).
    mapping_like_ = args.is_dict() || args.is_undefined() || (args.is_list() && !args.is_tuple() && !args.is_generator());
  }

  std::string run() {
    std::string out;
    for (size_t i = 0; i < fmt_.size(); ++i) {
      if (fmt_[i] != '%') {
        out += fmt_[i];
        continue;
      }
      i = conversion(i + 1, out);
    }
    if (next_ < positional_.size() && !mapping_like_) fail("not all arguments converted during string formatting");
    return out;
  }

 private:
  const Value& next_arg() {
    if (next_ >= positional_.size()) fail("not enough arguments for format string");
    return positional_[next_++];
  }

  // Parses one conversion starting after '%'; returns the index of its last character.
  size_t conversion(size_t i, std::string& out) {
    const Value* mapped = nullptr;
    if (i < fmt_.size() && fmt_[i] == '(') {
      const size_t close = fmt_.find(')', i);
      if (close == std::string::npos) fail("incomplete format key");
      if (!args_.is_dict()) fail("format requires a mapping");
      mapped = args_.dict_data().find(fmt_.substr(i + 1, close - i - 1));
      if (!mapped) fail("KeyError: '", fmt_.substr(i + 1, close - i - 1), "'");
      i = close + 1;
    }
    std::string flags;
    while (i < fmt_.size() && std::string_view("-+ 0#").find(fmt_[i]) != std::string_view::npos) flags += fmt_[i++];
    int64_t width = -1, precision = -1;
    auto number = [&](int64_t& target) {
      if (i < fmt_.size() && fmt_[i] == '*') {
        target = require_int(next_arg(), "* wants int");
        ++i;
        return;
      }
      if (i < fmt_.size() && std::isdigit(static_cast<unsigned char>(fmt_[i]))) {
        target = 0;
        while (i < fmt_.size() && std::isdigit(static_cast<unsigned char>(fmt_[i])))
          target = std::min<int64_t>(target * 10 + (fmt_[i++] - '0'), 1 << 20);
      }
    };
    number(width);
    if (i < fmt_.size() && fmt_[i] == '.') {
      ++i;
      precision = 0;
      number(precision);
    }
    while (i < fmt_.size() && (fmt_[i] == 'h' || fmt_[i] == 'l' || fmt_[i] == 'L')) ++i;
    if (i >= fmt_.size()) fail("incomplete format");
    const char conv = fmt_[i];
    if (conv == '%') {
      out += '%';
      return i;
    }
    const Value& arg = mapped ? *mapped : next_arg();
    if (arg.is_undefined()) raise_undefined(arg);
    out += convert(conv, arg, flags, width, precision);
    return i;
  }

  static std::string convert(char conv, const Value& arg, const std::string& flags, int64_t width, int64_t precision) {
    const bool left = flags.find('-') != std::string::npos;
    std::string body;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        body = conv == 's' ? to_str(arg) : repr(arg);
        if (precision >= 0) body = encode_utf8(decode_utf8(body).substr(0, static_cast<size_t>(precision)));
        return pad(body, width, " ", left ? -1 : 1);
      }
      case 'c': {
        if (arg.is_string() && code_point_count(arg.as_string()) == 1) return pad(arg.as_string(), width, " ", left ? -1 : 1);
        const int64_t cp = require_int(arg, "%c requires int or char");
        std::string s;
        append_utf8(s, static_cast<char32_t>(cp));
        return pad(s, width, " ", left ? -1 : 1);
      }
      case 'd': case 'i': case 'u': case 'o': case 'x': case 'X': {
        if (!arg.is_number()) fail("%", conv, " format: a real number is required, not ", type_name(arg));
        if (arg.is_float() && !std::isfinite(arg.as_double())) fail("cannot convert float to integer");
        // Python formats any integer; ours are 64-bit, so a float beyond them is refused.
        if (arg.is_float() && !(std::fabs(std::trunc(arg.as_double())) < 9223372036854775808.0))
          fail("%", conv, " format: ", arg.as_double(), " is too large for a 64-bit integer");
        const auto v = arg.is_float() ? static_cast<long long>(std::trunc(arg.as_double())) : static_cast<long long>(arg.as_int());
        const char c = (conv == 'i' || conv == 'u') ? 'd' : conv;
        return printf_spec(flags, width, precision, std::string("ll") + c, v);
      }
      case 'e': case 'E': case 'f': case 'F': case 'g': case 'G': {
        if (!arg.is_number()) fail("must be real number, not ", type_name(arg));
        return printf_spec(flags, width, precision < 0 ? 6 : precision, std::string(1, conv), arg.as_double());
      }
      default: fail("unsupported format character '", conv, "'");
    }
  }

  template <typename T>
  static std::string printf_spec(const std::string& flags, int64_t width, int64_t precision, const std::string& conv, T v) {
    std::string spec = "%" + flags;
    if (width >= 0) spec += std::to_string(width);
    if (precision >= 0 && conv.back() != 'd' && conv.back() != 'x' && conv.back() != 'X' && conv.back() != 'o')
      spec += "." + std::to_string(precision);
    spec += conv;
    const int n = std::snprintf(nullptr, 0, spec.c_str(), v);
    std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
    std::snprintf(out.data(), out.size(), spec.c_str(), v);
    out.resize(static_cast<size_t>(std::max(n, 0)));
    return out;
  }

  const std::string& fmt_;
  const Value& args_;
  std::vector<Value> positional_;
  bool mapping_like_ = false;
  size_t next_ = 0;
};

// ---- globals ----
Value global_range(CallArgs& a) {
  if (!a.keyword.empty()) fail("range() takes no keyword arguments");
  const auto& p = a.positional;
  if (p.empty() || p.size() > 3) fail("range expected 1 to 3 arguments, got ", p.size());
  int64_t start = 0, stop = 0, step = 1;
  if (p.size() == 1) {
    stop = require_int(p[0], "range");
  } else {
    start = require_int(p[0], "range");
    stop = require_int(p[1], "range");
    if (p.size() == 3) step = require_int(p[2], "range");
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  // Unsigned arithmetic: no overflow for any int64 bounds.
  const bool empty = step > 0 ? stop <= start : stop >= start;
  const uint64_t span = empty ? 0 : (step > 0 ? static_cast<uint64_t>(stop) - static_cast<uint64_t>(start)
                                              : static_cast<uint64_t>(start) - static_cast<uint64_t>(stop));
  const uint64_t abs_step = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  const uint64_t count = empty ? 0 : (span - 1) / abs_step + 1;
  if (count > static_cast<uint64_t>(kMaxRange)) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ").");
  std::vector<Value> items;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

Value global_dict(CallArgs& a) {
  auto data = std::make_shared<DictData>();
  for (const auto& v : a.positional) {
    if (v.is_dict()) {
      for (const auto& [k, item] : v.dict_data().entries) data->set(k, item);
    } else {
      for (const auto& pair : iterate(v)) {
        if (!pair.is_list() || pair.items().size() != 2) fail("dictionary update sequence element has wrong length");
        data->set(pair.items()[0], pair.items()[1]);
      }
    }
  }
  for (auto& [k, v] : a.keyword) data->set(Value::string(k), v);
  return Value::dict(std::move(data));
}

Value global_strftime_now(CallArgs& a) {
  ArgReader r("strftime_now", a, {"format"});
  const std::string fmt = require_string(r.get_or(0, Value()), "strftime_now format");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  if (fmt.empty()) return Value::string("");
  std::string out(256 + fmt.size() * 8, '\0');
  const size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &local);
  out.resize(n);
  return Value::string(std::move(out));
}

Value global_joiner(CallArgs& a) {
  ArgReader r("joiner", a, {"sep"});
  const std::string sep = to_str(r.get_or(0, Value::string(", ")));
  auto used = std::make_shared<bool>(false);
  return Value::function("joiner", [sep, used](CallArgs&) {
    if (!*used) {
      *used = true;
      return Value::string("");
    }
    return Value::string(sep);
  });
}

}  // namespace

ArgReader::ArgReader(std::string what, CallArgs& args, std::initializer_list<std::string_view> names)
    : bound_(names.size(), nullptr) {
  if (args.positional.size() > names.size())
    fail(what, "() takes at most ", names.size(), " argument(s) (", args.positional.size(), " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t i = 0;
    for (auto name : names) {
      if (name == key) break;
      ++i;
    }
    if (i == names.size()) fail(what, "() got an unexpected keyword argument '", key, "'");
    if (bound_[i]) fail(what, "() got multiple values for argument '", key, "'");
    bound_[i] = &value;
  }
}

const Value* ArgReader::get(size_t index) const { return index < bound_.size() ? bound_[index] : nullptr; }

Value ArgReader::get_or(size_t index, Value fallback) const {
  const Value* v = get(index);
  return v ? *v : std::move(fallback);
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList:
      if (!v.deferred_error().empty()) fail(v.deferred_error());
      return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, item] : v.dict_data().entries) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : decode_utf8(v.as_string())) {
        std::string s;
        append_utf8(s, c);
        chars.push_back(Value::string(std::move(s)));
      }
      return chars;
    }
    default: fail("'", type_name(v), "' object is not iterable");
  }
}

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) raise_undefined(obj);
  if (auto attr = python_attribute(obj, name)) return *attr;
  if (obj.is_dict())
    if (const Value* v = obj.dict_data().find(name)) return *v;
  return undefined_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) raise_undefined(obj);
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (const Value* v = obj.dict_data().find(key)) return *v;
      break;
    case Value::Kind::kList:
      if (is_index(key) && !obj.is_generator()) {
        int64_t i = key.as_int();
        if (normalize_index(i, obj.items().size())) return obj.items()[static_cast<size_t>(i)];
      }
      break;
    case Value::Kind::kString:
      if (is_index(key)) {
        const std::string& s = obj.as_string();
        int64_t i = key.as_int();
        if (is_ascii(s)) {
          if (normalize_index(i, s.size())) return Value::string(s.substr(static_cast<size_t>(i), 1));
        } else {
          const std::u32string cps = decode_utf8(s);
          if (normalize_index(i, cps.size())) return Value::string(encode_utf8(cps.substr(static_cast<size_t>(i), 1)));
        }
      }
      break;
    default: break;
  }
  if (key.is_string())
    if (auto attr = python_attribute(obj, key.as_string())) return *attr;
  return undefined_element(obj, key);
}

Value get_slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto index_or_none = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!is_index(v)) fail("slice indices must be integers or None or have an __index__ method");
    return v.as_int();
  };
  const std::optional<int64_t> start_o = index_or_none(start_v), stop_o = index_or_none(stop_v), step_o = index_or_none(step_v);
  const int64_t step = step_o.value_or(1);
  if (step == 0) fail("slice step cannot be zero");
  // jinja2 compiles slices to plain Python subscripts: no Undefined fallback here.
  if (obj.is_dict()) fail("unhashable type: 'slice'");
  if ((!obj.is_list() && !obj.is_string()) || obj.is_generator())
    fail("'", type_name(obj), "' object is not subscriptable");
  const bool ascii = obj.is_string() && is_ascii(obj.as_string());
  std::u32string cps;
  if (obj.is_string() && !ascii) cps = decode_utf8(obj.as_string());
  const auto len = static_cast<int64_t>(obj.is_list() ? obj.items().size() : (ascii ? obj.as_string().size() : cps.size()));
  // Python's slice.indices().
  const int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) x = std::max(x + len, lower);
    return std::min(x, upper);
  };
  const int64_t start = clamp(start_o, step < 0 ? upper : lower);
  const int64_t stop = clamp(stop_o, step < 0 ? lower : upper);
  std::vector<Value> items;
  std::string bytes;
  std::u32string picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    const auto u = static_cast<size_t>(i);
    if (obj.is_list()) {
      items.push_back(obj.items()[u]);
    } else if (ascii) {
      bytes += obj.as_string()[u];
    } else {
      picked += cps[u];
    }
  }
  if (obj.is_list()) return Value::list(std::move(items), obj.is_tuple());
  return Value::string(ascii ? std::move(bytes) : encode_utf8(picked));
}

std::string percent_format(const std::string& format, const Value& args) {
  return PercentFormatter(format, args).run();
}

void add_globals(DictData& globals) {
  globals.set(Value::string("range"), Value::function("range", global_range));
  globals.set(Value::string("dict"), Value::function("dict", global_dict));
  globals.set(Value::string("raise_exception"), Value::function("raise_exception", [](CallArgs& a) -> Value {
                ArgReader r("raise_exception", a, {"message"});
                fail(to_str(r.get_or(0, Value::string(""))));
              }));
  globals.set(Value::string("strftime_now"), Value::function("strftime_now", global_strftime_now));
  globals.set(Value::string("joiner"), Value::function("joiner", global_joiner));
}

}  // namespace zen::jinja
