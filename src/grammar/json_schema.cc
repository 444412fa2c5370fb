// JSON Schema front end: each sub-schema becomes one grammar rule whose body is a regular
// expression over bytes and references to the rules of its sub-schemas.
//
// How a schema is read:
//   - A node is first flattened: its own keywords, its $ref target (when the $ref has sibling
//     keywords) and its allOf parts are merged into one set of constraints; anyOf / oneOf lists
//     are kept aside and distributed over the rest afterwards (allOf(A, anyOf(B, C)) becomes
//     anyOf(A+B, A+C)), so constraints never need intersecting across alternatives.
//   - A node that is nothing but a $ref becomes a reference to the target's rule, built once
//     per JSON pointer: that is how recursive schemas (trees, linked lists) terminate.
//   - Rules are shared per distinct sub-schema (keyed by its text without annotations), and
//     the unconstrained string / number / integer / any-value rules are shared by all.
//
// Layout: json.dumps's (", " and ": ", nothing else), properties in the order the schema lists
// them (the node's own, then its $ref target's, then each allOf part's). With any_whitespace:
// up to max_whitespace JSON whitespace bytes after `{` `[` and around `,` `:` and before `}`
// `]`; none around the top-level value.
//
// Refused under strict, ignored otherwise:
//   patternProperties, propertyNames, dependentSchemas, dependentRequired, dependencies,
//   if / then / else, not, contains, minContains, maxContains, uniqueItems (true; false is a
//   no-op), multipleOf, minProperties, maxProperties, unevaluatedProperties,
//   unevaluatedItems (non-strict uses the last two where additionalProperties / items are
//   absent), $dynamicRef, $recursiveRef; a format other than the ones below; minLength /
//   maxLength with a pattern or format where the exact combination is too large (see
//   "string length inside a pattern": e.g. ^\s*SELECT\s with maxLength 4000; non-strict: the
//   lengths are dropped); a format with a pattern other than one anchored at the start
//   whose anchored part is a few fixed strings (^https?://; non-strict: the pattern wins);
//   conflicts inside allOf (disjoint types or enums, two different patterns or formats;
//   non-strict: the first part wins, and disjoint types or enums match nothing); object
//   enum / const values next to object keywords (they are not checked against them);
//   maxItems / maxLength above 100000 (non-strict: no upper bound).
// Always ignored: annotations (title, description, default, examples, example, $schema, $id,
//   $comment, deprecated, readOnly, writeOnly, discriminator, $anchor, $dynamicAnchor,
//   content*, externalDocs, xml) and keywords JSON Schema does not define.
// Always refused (SchemaError): malformed keyword values (type: 5, required not a list of
//   strings, ...); a $ref that is not local (#...), names an anchor, or resolves nowhere;
//   $ref cycles that consume no input ({"$ref": "#"}); sub-schemas nested deeper than 128;
//   a schema document nested deeper than 1024; minItems / minLength above 100000; anyOf
//   products inside allOf past 256 alternatives; more than 200000 sub-schemas to convert.
//
// Deliberate choices and approximations:
//   - additionalProperties absent: only the listed properties are generated (like xgrammar's
//     strict_mode) when the schema lists any; an object schema that lists none allows any
//     keys. Required keys missing from `properties` are generated after the listed ones.
//   - Extra keys (additionalProperties true / a schema) come after the listed ones, are not
//     equal to any listed key, and are spelled the json.dumps(ensure_ascii=False) way, so
//     "not equal" is exact; two extra keys may repeat each other.
//   - nullable (OpenAPI) adds null to the node's types after its $ref / allOf parts are
//     merged, so {"$ref": ..., "nullable": true} is "the target or null".
//   - oneOf is read as anyOf when its branches cannot both match (different types, disjoint
//     enums / consts, objects told apart by a required property's disjoint const / enum, as
//     pydantic's discriminated unions, or by a key one requires and the other forbids); other oneOf lists are refused under strict and read
//     as anyOf otherwise (an output matching several branches is accepted).
//   - No `type`: the types whose keywords appear (properties -> object, items -> array,
//     minLength -> string, minimum -> number, ...); none at all -> any JSON value.
//   - Numbers with a bound are written without an exponent (the bounds are then exact,
//     fractional ones included); negative zero is not generated for bounded numbers.
//     A fraction has at most 20 digits (more where a bound has more): under
//     exclusiveMinimum 0 a small model wrote "0.000..." until max_tokens.
//     Integers are plain digits (never 1.0).
//   - Strings: minLength / maxLength count characters, an escape counting as one and a
//     \uD83D\uDE00 surrogate pair as one; lone surrogate escapes are not generated. Past 256
//     characters a length bound counts calls of a shared one-character rule (one automaton
//     state per character instead of ~20).
//   - enum / const values are written as json.dumps(ensure_ascii=False) writes them (floats
//     in nlohmann's shortest round-trip form); with any_whitespace their arrays / objects
//     allow whitespace too. Values the other keywords rule out are dropped (strings and
//     arrays are checked against the schema's own grammar, so pattern / format / items count).
//   - Formats (regular approximations): date (YYYY-MM-DD, month 01-12, day 01-31 whatever
//     the month), time (HH:MM:SS[.frac] with Z or +HH:MM offset, second 60 allowed),
//     date-time (date T time, T / Z in either case), uuid (8-4-4-4-12 hex), email (dot-atom
//     local part @ dotted hostname labels), uri (a scheme of at most 32 characters, ":",
//     then RFC 3986 characters, `%` among them without checking the two hex digits after
//     it), ipv4 (dotted quad 0-255, no leading zeros), hostname (dotted labels of up to 63
//     letters / digits / inner hyphens).
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "base/error.h"
#include "grammar/regex.h"
#include "tokenizer/unicode.h"
#include "grammar/json_schema_converter.h"

namespace zen::grammar::json_schema_internal {

// ---- keyword tables ---------------------------------------------------------------------------

bool is_annotation(std::string_view k) {
  static const std::unordered_set<std::string_view> kSet = {
      "title", "description", "default", "examples", "example", "$schema", "$id", "$comment", "deprecated",
      "readOnly", "writeOnly", "discriminator", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary",
      "contentMediaType", "contentEncoding", "contentSchema", "externalDocs", "xml", "$defs", "definitions"};
  return kSet.count(k) > 0;
}

bool is_unsupported(std::string_view k) {
  static const std::unordered_set<std::string_view> kSet = {
      "patternProperties", "propertyNames", "dependentSchemas", "dependentRequired", "dependencies",
      "if", "then", "else", "not", "contains", "minContains", "maxContains", "multipleOf", "minProperties",
      "maxProperties", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"};
  return kSet.count(k) > 0;
}

// The constraint keywords a flattened schema keeps.
bool is_constraint(std::string_view k) {
  static const std::unordered_set<std::string_view> kSet = {
      "type", "enum", "const", "properties", "required", "additionalProperties", "unevaluatedProperties",
      "items", "prefixItems", "additionalItems", "unevaluatedItems", "minItems", "maxItems", "minLength",
      "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
      "nullable", "uniqueItems"};
  return kSet.count(k) > 0;
}

bool is_type_name(const Json& t) {
  static const std::unordered_set<std::string> kSet = {"null", "boolean", "object", "array", "number", "integer",
                                                       "string"};
  return t.is_string() && kSet.count(t.get<std::string>()) > 0;
}

// ---- JSON pointers ---------------------------------------------------------------------------

std::string escape_token(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string child(const std::string& path, std::string_view token) { return path + "/" + escape_token(token); }
std::string child(const std::string& path, std::string_view kw, size_t i) {
  return child(path, kw) + "/" + std::to_string(i);
}

// ---- UTF-8 -----------------------------------------------------------------------------------

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto d = unicode::decode_utf8(s, i);
    out.push_back(d.cp);
    i += d.len;
  }
  return out;
}

// The spelling json.dumps(ensure_ascii=False) gives a character inside a string.
std::string canonical_spelling(uint32_t cp) {
  std::string s = json_escape(cp);
  if (s.empty()) unicode::append_utf8(s, cp);
  return s;
}

bool needs_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

ByteSet chars(std::string_view cs) {
  ByteSet s;
  for (char c : cs) s.add(static_cast<uint8_t>(c));
  return s;
}

namespace {

// Depth of a JSON document, computed without recursion (it runs before anything recursive
// touches the document).
int document_depth(const Json& root) {
  int max_depth = 0;
  std::vector<std::pair<const Json*, int>> stack{{&root, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    max_depth = std::max(max_depth, depth);
    if (depth > kMaxDocumentDepth) break;
    if (node->is_structured())
      for (const auto& kid : *node) stack.push_back({&kid, depth + 1});
  }
  return max_depth;
}

}  // namespace

// ---- rules -----------------------------------------------------------------------------------

// Rule names come from the schema path so grammar errors and dumps point at the schema.
int32_t Converter::new_rule(const std::string& path, const std::string& hint) {
  std::string name = hint.empty() ? "root" : hint;
  for (char c : path) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c));
    if (ok) name += c;
    else if (name.back() != '-') name += '-';
    if (name.size() > 60) break;
  }
  while (name.size() > 1 && name.back() == '-') name.pop_back();
  const int32_t r = b_.add_rule(name);
  rules_[r].path = path;
  return r;
}

void Converter::define(int32_t rule, ExprId body, bool nullable) {
  b_.set_body(rule, body);
  rules_[rule].body = body;
  rules_[rule].nullable = nullable;
}

void Converter::tick(const std::string& path) {
  if (++work_ > kMaxWork) throw SchemaError("", path, "the schema is too large (more than 200000 sub-schemas to convert)");
}

namespace {

// A key for sharing one rule between equal sub-schemas: the text of the keywords that
// constrain (annotations and definitions do not change the language; $refs are absolute).
std::string schema_key(const Json& node) {
  if (!node.is_object()) return node.dump();
  std::string key = "{";
  for (const auto& [k, v] : node.items()) {
    if (is_annotation(k)) continue;
    key += Json(k).dump() + ":" + v.dump() + ",";
  }
  return key + "}";
}

}  // namespace

int32_t Converter::rule_for(const Json& node, const std::string& path, const std::string& kw) {
  if (pure_ref(node)) return ref_rule(ref_pointer(node["$ref"], path));
  const std::string key = schema_key(node);
  if (auto it = cache_.find(key); it != cache_.end()) return cached_rule(it->second);
  tick(path);
  DepthGuard guard(*this, kw, path);
  cache_[key] = Cached{-1, path};
  return finish_rule(key, value(node, path, kw));
}

// A sub-schema met again while its own body is being built (a $ref merged into a recursive
// schema) gets its rule now; the body is set when the outer build finishes.
int32_t Converter::cached_rule(Cached& c) {
  if (c.rule < 0) c.rule = new_rule(c.path, "s");
  return c.rule;
}

int32_t Converter::flat_rule(const Flat& f) {
  Json groups = Json::array();
  for (const auto& g : f.groups) {
    Json alts = Json::array();
    for (const auto& c : g) alts.push_back(c.schema);
    groups.push_back(alts);
  }
  const std::string key = "flat:" + f.s.dump() + (f.never ? "!" : "") + groups.dump();
  if (auto it = cache_.find(key); it != cache_.end()) return cached_rule(it->second);
  tick(f.path);
  DepthGuard guard(*this, "anyOf", f.path);
  cache_[key] = Cached{-1, f.path};
  return finish_rule(key, expand(f));
}

// A body that is only a reference to another rule reuses that rule instead of a new one
// (unless the rule was handed out already).
int32_t Converter::finish_rule(const std::string& key, ExprId body) {
  Cached& c = cache_[key];
  const Expr& e = b_.expr(body);
  if (c.rule < 0 && e.kind == Expr::Rule) {
    c.rule = e.rule;
  } else {
    if (c.rule < 0) c.rule = new_rule(c.path, "s");
    define(c.rule, body);
  }
  return c.rule;
}

// Rules of $ref targets are made on first use and built later from a queue, so a recursive
// schema refers back to the rule being built and nesting of $defs costs no stack.
int32_t Converter::ref_rule(const std::string& pointer) {
  if (auto it = ref_rules_.find(pointer); it != ref_rules_.end()) return it->second;
  const int32_t r = new_rule(pointer, pointer.empty() ? "" : "ref");
  ref_rules_[pointer] = r;
  pending_.push_back({pointer, r});
  return r;
}

void Converter::drain() {
  while (!pending_.empty()) {
    auto [pointer, rule] = pending_.front();
    pending_.pop_front();
    tick(pointer);
    define(rule, value(resolve(pointer, pointer), pointer, pointer.empty() ? "" : "$ref"));
  }
}

// Whether e can match the empty string; the rules it may call before consuming a byte go to
// out. Schema rules always consume (a JSON value is never empty); only the optional-member
// chains are nullable.
bool Converter::scan_first_calls(ExprId e, std::vector<int32_t>& out, std::unordered_map<ExprId, bool>& memo) const {
  if (auto it = memo.find(e); it != memo.end()) return it->second;
  const Expr& x = b_.expr(e);
  bool nullable = false;
  switch (x.kind) {
    case Expr::Empty: nullable = true; break;
    case Expr::Bytes: nullable = false; break;
    case Expr::Until: nullable = x.may_end; break;
    case Expr::Rule: {
      out.push_back(x.rule);
      auto it = rules_.find(x.rule);
      nullable = it != rules_.end() && it->second.nullable;
      break;
    }
    case Expr::Seq:
      nullable = true;
      for (ExprId k : x.kids)
        if (!scan_first_calls(k, out, memo)) {
          nullable = false;
          break;
        }
      break;
    case Expr::Alt:
      for (ExprId k : x.kids) nullable = scan_first_calls(k, out, memo) || nullable;
      break;
    case Expr::Repeat: nullable = scan_first_calls(x.kids[0], out, memo) || x.min == 0; break;
  }
  memo[e] = nullable;
  return nullable;
}

// A $ref cycle that consumes nothing ({"$ref": "#"}, anyOf: [{"$ref": "#"}, ...]) has no
// finite derivation; refuse it here with the schema path rather than as a grammar error.
void Converter::check_left_recursion() {
  std::unordered_map<int32_t, std::vector<int32_t>> first;
  for (const auto& [r, info] : rules_) {
    std::unordered_map<ExprId, bool> memo;
    if (info.body >= 0) scan_first_calls(info.body, first[r], memo);
  }
  const std::vector<int32_t> none;
  auto calls = [&](int32_t r) -> const std::vector<int32_t>& {
    auto it = first.find(r);
    return it == first.end() ? none : it->second;
  };
  std::unordered_map<int32_t, int> color;  // 1 on the path, 2 done
  for (const auto& [start, unused] : first) {
    if (color[start]) continue;
    std::vector<std::pair<int32_t, size_t>> stack{{start, 0}};
    color[start] = 1;
    while (!stack.empty()) {
      const int32_t r = stack.back().first;
      const size_t i = stack.back().second++;
      if (i == calls(r).size()) {
        color[r] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t k = calls(r)[i];
      if (color[k] == 1)
        throw SchemaError("$ref", rules_[k].path,
                          "the schema refers to itself without consuming input (an infinite $ref loop)");
      if (color[k] == 0) {
        color[k] = 1;
        stack.push_back({k, 0});
      }
    }
  }
}

// ---- references ------------------------------------------------------------------------------

bool Converter::pure_ref(const Json& node) const {
  if (!node.is_object() || !node.contains("$ref")) return false;
  for (const auto& [k, v] : node.items())
    if (k != "$ref" && !is_annotation(k) && (is_constraint(k) || k == "allOf" || k == "anyOf" || k == "oneOf" ||
                                             (opt_.strict && is_unsupported(k))))
      return false;
  return true;
}

namespace {

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

// The JSON pointer a $ref names ("" for the whole document), checked to resolve.
std::string Converter::ref_pointer(const Json& ref, const std::string& path) const {
  const std::string at = child(path, "$ref");
  if (!ref.is_string()) throw SchemaError("$ref", at, "$ref must be a string");
  std::string r = ref.get<std::string>();
  if (!root_id_.empty() && r.rfind(root_id_, 0) == 0) r = r.substr(root_id_.size());
  if (r.empty()) r = "#";
  if (r[0] != '#') throw SchemaError("$ref", at, "only local references (#/...) are supported, not '" + r + "'");
  std::string pointer = percent_decode(r.substr(1));
  if (!pointer.empty() && pointer[0] != '/')
    throw SchemaError("$ref", at, "anchor references ('" + r + "') are not supported");
  resolve(pointer, at);
  return pointer;
}

const Json& Converter::resolve(const std::string& pointer, const std::string& path) const {
  const Json* node = root_;
  size_t i = 0;
  while (i < pointer.size()) {
    size_t j = pointer.find('/', i + 1);
    if (j == std::string::npos) j = pointer.size();
    std::string token;
    for (size_t k = i + 1; k < j; ++k) {
      if (pointer[k] == '~' && k + 1 < j && (pointer[k + 1] == '0' || pointer[k + 1] == '1')) {
        token += pointer[k + 1] == '0' ? '~' : '/';
        ++k;
      } else {
        token += pointer[k];
      }
    }
    if (node->is_object() && node->contains(token)) {
      node = &(*node)[token];
    } else if (node->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
               token.size() < 10 && std::stoul(token) < node->size()) {
      node = &(*node)[std::stoul(token)];
    } else {
      throw SchemaError("$ref", path, "$ref '#" + pointer + "' does not resolve");
    }
    i = j;
  }
  return *node;
}

// ---- flattening ------------------------------------------------------------------------------

void Converter::check_keywords(const Json& node, const std::string& path) const {
  for (const auto& [k, v] : node.items()) {
    if (is_annotation(k)) continue;
    if (is_unsupported(k)) {
      if (opt_.strict) throw SchemaError(k, child(path, k), "'" + k + "' is not supported");
      continue;
    }
    check_value(k, v, path);
  }
}

// Malformed keyword values are refused in both modes: the schema means nothing definite.
void Converter::check_value(const std::string& k, const Json& v, const std::string& path) const {
  const std::string at = child(path, k);
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw SchemaError(k, at, "'" + k + "' must be " + what);
  };
  auto schema_like = [](const Json& x) { return x.is_object() || x.is_boolean(); };
  if (k == "type") {
    bool ok = is_type_name(v) || (v.is_array() && !v.empty());
    if (v.is_array())
      for (const auto& t : v) ok = ok && is_type_name(t);
    need(ok, "a type name (null, boolean, object, array, number, integer, string) or a list of them");
  } else if (k == "enum") {
    need(v.is_array() && !v.empty(), "a non-empty list");
  } else if (k == "required") {
    bool ok = v.is_array();
    if (ok)
      for (const auto& x : v) ok = ok && x.is_string();
    need(ok, "a list of strings");
  } else if (k == "properties") {
    bool ok = v.is_object();
    if (ok)
      for (const auto& [name, sub] : v.items()) ok = ok && schema_like(sub);
    need(ok, "an object of schemas");
  } else if (k == "additionalProperties" || k == "additionalItems") {
    need(schema_like(v), "a schema");
  } else if (k == "items") {
    bool ok = schema_like(v) || v.is_array();
    if (v.is_array())
      for (const auto& sub : v) ok = ok && schema_like(sub);
    need(ok, "a schema");
  } else if (k == "prefixItems" || k == "allOf" || k == "anyOf" || k == "oneOf") {
    bool ok = v.is_array() && !v.empty();
    if (ok)
      for (const auto& sub : v) ok = ok && schema_like(sub);
    need(ok, "a non-empty list of schemas");
  } else if (k == "minItems" || k == "maxItems" || k == "minLength" || k == "maxLength") {
    need(v.is_number() && !(v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0) &&
             !(v.is_number_float() && (v.get<double>() < 0 || v.get<double>() != std::floor(v.get<double>()))),
         "a non-negative integer");
  } else if (k == "pattern" || k == "format") {
    need(v.is_string(), "a string");
  } else if (k == "minimum" || k == "maximum") {
    need(v.is_number() && !number_text(v).empty(), "a finite number");
  } else if (k == "exclusiveMinimum" || k == "exclusiveMaximum") {
    need(v.is_boolean() || (v.is_number() && !number_text(v).empty()), "a finite number");
  } else if (k == "nullable" || k == "uniqueItems") {
    need(v.is_boolean(), "true or false");
    if (k == "uniqueItems" && v.get<bool>() && opt_.strict)
      throw SchemaError(k, at, "'uniqueItems' is not supported");
  } else if (k == "$defs" || k == "definitions") {
    need(v.is_object(), "an object of schemas");
  }
}

// The constraint keywords of one node in normal form (see Flat).
Json Converter::normalize(const Json& node, const std::string& path) const {
  Json s = Json::object();
  for (const auto& [k, v] : node.items())
    if (is_constraint(k) || (!opt_.strict && (k == "unevaluatedProperties" || k == "unevaluatedItems"))) s[k] = v;
  if (s.contains("type") && s["type"].is_string()) s["type"] = Json::array({s["type"]});
  s.erase("nullable");  // applied by flatten once the parts are merged
  if (s.contains("const")) {
    Json values = Json::array({s["const"]});
    if (s.contains("enum")) {
      const bool listed = std::find(s["enum"].begin(), s["enum"].end(), s["const"]) != s["enum"].end();
      if (!listed) values = Json::array();
    }
    s["enum"] = values;
    s.erase("const");
    if (values.empty()) conflict("const", path, "const is not one of the enum values");
  }
  if (s.contains("items") && s["items"].is_array()) {  // draft-07 tuples
    if (!s.contains("prefixItems")) s["prefixItems"] = s["items"];
    if (s.contains("additionalItems")) s["items"] = s["additionalItems"];
    else s.erase("items");
  }
  s.erase("additionalItems");
  s.erase("uniqueItems");
  // draft-04 booleans
  for (const auto& [kw, plain] : {std::pair{"exclusiveMinimum", "minimum"}, std::pair{"exclusiveMaximum", "maximum"}}) {
    if (!s.contains(kw) || !s[kw].is_boolean()) continue;
    if (s[kw].get<bool>() && s.contains(plain)) {
      s[kw] = s[plain];
      s.erase(plain);
    } else {
      s.erase(kw);
    }
  }
  return s;
}

Flat Converter::flatten(const Json& node, const std::string& path, const std::string& kw) {
  Flat f;
  f.path = path;
  if (node.is_boolean()) {
    f.never = !node.get<bool>();
    return f;
  }
  if (!node.is_object()) throw SchemaError(kw, path, "a schema must be an object or true / false");
  tick(path);
  check_keywords(node, path);
  f.s = normalize(node, path);
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!node.contains(k)) continue;
    std::vector<Choice> group;
    for (size_t i = 0; i < node[k].size(); ++i) group.push_back({node[k][i], child(path, k, i)});
    if (opt_.strict && std::string(k) == "oneOf") {
      // Exactly one branch: enforced as anyOf only where two branches can never both match.
      std::vector<Flat> flat;
      for (const Choice& c : group) flat.push_back(flatten_nested(c.schema, c.path, "oneOf"));
      for (size_t i = 0; i < flat.size(); ++i)
        for (size_t j = i + 1; j < flat.size(); ++j)
          if (!flat[i].never && !flat[j].never && !provably_disjoint(flat[i], flat[j]))
            throw SchemaError("oneOf", child(path, "oneOf"),
                              "'oneOf' is not supported with branches that can both match (" + std::to_string(i) + " and " +
                                  std::to_string(j) + "): use anyOf, or strict: false to read it as anyOf");
    }
    f.groups.push_back(std::move(group));
  }
  // Parts in property order: the node's own, its $ref target's, each allOf part's.
  if (node.contains("$ref")) {
    const std::string pointer = ref_pointer(node["$ref"], path);
    if (std::find(inlining_.begin(), inlining_.end(), pointer) != inlining_.end())
      throw SchemaError("$ref", child(path, "$ref"), "the schema includes itself through $ref and allOf");
    inlining_.push_back(pointer);
    merge_into(f, flatten_nested(resolve(pointer, path), pointer, "$ref"));
    inlining_.pop_back();
  }
  if (node.contains("allOf"))
    for (size_t i = 0; i < node["allOf"].size(); ++i)
      merge_into(f, flatten_nested(node["allOf"][i], child(path, "allOf", i), "allOf"));
  // OpenAPI's nullable: null joins the node's types, those of a $ref target included.
  if (node.value("nullable", false) && f.s.contains("type") &&
      std::find(f.s["type"].begin(), f.s["type"].end(), "null") == f.s["type"].end())
    f.s["type"].push_back("null");
  return f;
}

Flat Converter::flatten_nested(const Json& node, const std::string& path, const std::string& kw) {
  DepthGuard guard(*this, kw, path);
  return flatten(node, path, kw);
}

void Converter::conflict(const std::string& kw, const std::string& path, const std::string& what) const {
  if (opt_.strict) throw SchemaError(kw, child(path, kw), what);
}

// allOf semantics: a value must satisfy both. Property order is a's, then b's new ones.
void Converter::merge_into(Flat& a, const Flat& b) {
  if (b.never) a.never = true;
  if (a.never) return;
  a.groups.insert(a.groups.end(), b.groups.begin(), b.groups.end());
  merge_properties(a, b);
  merge_prefix_items(a, b);
  for (const auto& [k, bv] : b.s.items()) {
    if (k == "properties" || k == "prefixItems") continue;
    if (!a.s.contains(k)) {
      a.s[k] = bv;
      continue;
    }
    merge_keyword(a, k, bv);
  }
}

namespace {

// Both schemas as one: allOf unless one of them decides it.
Json both(const Json& x, const Json& y) {
  if (x == true || x == y) return y;
  if (y == true) return x;
  if (x == false || y == false) return false;
  return Json{{"allOf", Json::array({x, y})}};
}

}  // namespace

void Converter::merge_properties(Flat& a, const Flat& b) {
  if (!b.s.contains("properties") && !b.s.contains("additionalProperties")) return;
  if (!a.s.contains("properties") && !b.s.contains("properties")) return;
  const Json none = Json::object();
  const Json& ap = a.s.contains("properties") ? a.s["properties"] : none;
  const Json& bp = b.s.contains("properties") ? b.s["properties"] : none;
  Json merged = Json::object();
  // A key one side does not list is still bound by that side's additionalProperties.
  for (const auto& [k, v] : ap.items()) {
    Json sub = v;
    if (bp.contains(k)) sub = both(sub, bp[k]);
    else if (b.s.contains("additionalProperties")) sub = both(sub, b.s["additionalProperties"]);
    merged[k] = sub;
  }
  for (const auto& [k, v] : bp.items()) {
    if (merged.contains(k)) continue;
    merged[k] = a.s.contains("additionalProperties") ? both(v, a.s["additionalProperties"]) : v;
  }
  a.s["properties"] = merged;
}

// Position i of the merged tuple satisfies both sides' schema for position i.
void Converter::merge_prefix_items(Flat& a, const Flat& b) {
  if (!a.s.contains("prefixItems") && !b.s.contains("prefixItems")) return;
  auto at = [](const Json& s, size_t i) -> Json {
    if (s.contains("prefixItems") && i < s["prefixItems"].size()) return s["prefixItems"][i];
    return s.contains("items") ? s["items"] : Json(true);
  };
  const size_t n = std::max(a.s.value("prefixItems", Json::array()).size(), b.s.value("prefixItems", Json::array()).size());
  Json merged = Json::array();
  for (size_t i = 0; i < n; ++i) merged.push_back(both(at(a.s, i), at(b.s, i)));
  a.s["prefixItems"] = merged;
}

void Converter::merge_keyword(Flat& a, const std::string& k, const Json& bv) {
  Json& av = a.s[k];
  if (k == "type") {
    Json out = Json::array();
    for (const auto& t : av) {
      const bool in_b = std::find(bv.begin(), bv.end(), t) != bv.end();
      const bool int_of_number = t == "integer" && std::find(bv.begin(), bv.end(), "number") != bv.end();
      if (in_b || int_of_number) out.push_back(t);
      else if (t == "number" && std::find(bv.begin(), bv.end(), "integer") != bv.end()) out.push_back("integer");
    }
    if (out.empty()) {
      conflict("type", a.path, "allOf parts allow no common type");
      a.never = true;
    }
    av = out;
  } else if (k == "enum") {
    Json out = Json::array();
    for (const auto& v : av)
      if (std::find(bv.begin(), bv.end(), v) != bv.end()) out.push_back(v);
    if (out.empty()) {
      conflict("enum", a.path, "allOf parts allow no common enum value");
      a.never = true;
    }
    av = out;
  } else if (k == "required") {
    for (const auto& r : bv)
      if (std::find(av.begin(), av.end(), r) == av.end()) av.push_back(r);
  } else if (k == "additionalProperties" || k == "items" || k == "unevaluatedProperties" || k == "unevaluatedItems") {
    av = both(av, bv);
  } else if (k == "minItems" || k == "minLength") {
    if (bv.get<double>() > av.get<double>()) av = bv;
  } else if (k == "maxItems" || k == "maxLength") {
    if (bv.get<double>() < av.get<double>()) av = bv;
  } else if (k == "minimum" || k == "exclusiveMinimum") {
    if (compare(decimal_of(bv, k, a.path), decimal_of(av, k, a.path)) > 0) av = bv;
  } else if (k == "maximum" || k == "exclusiveMaximum") {
    if (compare(decimal_of(bv, k, a.path), decimal_of(av, k, a.path)) < 0) av = bv;
  } else if (av != bv) {
    conflict(k, a.path, "allOf parts have different '" + k + "' values, which cannot be combined");
  }
}

// ---- values ----------------------------------------------------------------------------------

ExprId Converter::value(const Json& node, const std::string& path, const std::string& kw) {
  if (pure_ref(node)) return b_.ref(ref_rule(ref_pointer(node["$ref"], path)));
  return expand(flatten(node, path, kw));
}

// Distributes anyOf / oneOf lists over the other constraints.
ExprId Converter::expand(const Flat& f) {
  if (f.never) return nothing();
  if (f.groups.empty()) return typed(f);
  std::vector<ExprId> alts;
  if (f.s.empty() && f.groups.size() == 1) {  // a plain anyOf: each branch its own rule
    for (const auto& c : f.groups[0]) alts.push_back(b_.ref(rule_for(c.schema, c.path, "anyOf")));
    return b_.alt(std::move(alts));
  }
  int64_t total = 1;
  for (const auto& g : f.groups) {
    total *= static_cast<int64_t>(g.size());
    if (total > kMaxCombinations)
      throw SchemaError("anyOf", f.path, "allOf with anyOf / oneOf expands to more than 256 alternatives");
  }
  std::vector<size_t> pick(f.groups.size(), 0);
  for (int64_t n = 0; n < total; ++n) {
    Flat m;
    m.s = f.s;
    m.path = f.path;
    for (size_t g = 0; g < f.groups.size(); ++g) {
      const Choice& c = f.groups[g][pick[g]];
      merge_into(m, flatten_nested(c.schema, c.path, "anyOf"));
    }
    alts.push_back(b_.ref(flat_rule(m)));
    for (size_t g = 0; g < pick.size() && ++pick[g] == f.groups[g].size(); ++g) pick[g] = 0;
  }
  return b_.alt(std::move(alts));
}

bool Converter::provably_disjoint(const Flat& a, const Flat& b) const {
  auto disjoint_values = [](const Json& x, const Json& y) {
    for (const auto& v : x)
      for (const auto& w : y)
        if (v == w) return false;
    return true;
  };
  if (a.s.contains("enum") && b.s.contains("enum") && disjoint_values(a.s["enum"], b.s["enum"])) return true;
  const std::vector<std::string> ta = types_of(a.s), tb = types_of(b.s);
  if (ta.empty() || tb.empty()) return false;  // any value
  auto overlap = [](const std::string& t, const std::string& u) {
    return t == u || (t == "integer" && u == "number") || (t == "number" && u == "integer");
  };
  std::vector<std::string> shared;
  for (const auto& t : ta)
    for (const auto& u : tb)
      if (overlap(t, u)) shared.push_back(t);
  if (shared.empty()) return true;
  // Objects told apart by a property both require, whose const / enum values differ.
  if (shared.size() != 1 || shared[0] != "object") return false;
  auto values_of = [](const Flat& f, const std::string& key) -> const Json* {
    if (!f.s.contains("properties") || !f.s["properties"].contains(key)) return nullptr;
    const Json& p = f.s["properties"][key];
    if (!p.is_object()) return nullptr;
    if (p.contains("const")) return &p["const"];
    return p.contains("enum") && p["enum"].is_array() ? &p["enum"] : nullptr;
  };
  auto required = [](const Flat& f, const std::string& key) {
    if (!f.s.contains("required")) return false;
    for (const auto& r : f.s["required"])
      if (r == key) return true;
    return false;
  };
  // A key one requires that the other forbids (additionalProperties: false, not listed).
  auto forbids = [](const Flat& f, const std::string& key) {
    const bool closed = f.s.contains("additionalProperties") && f.s["additionalProperties"] == false;
    return closed && !(f.s.contains("properties") && f.s["properties"].contains(key));
  };
  for (const auto& [x, y] : {std::make_pair(&a, &b), std::make_pair(&b, &a)})
    if (x->s.contains("required"))
      for (const auto& r : x->s["required"])
        if (r.is_string() && forbids(*y, r.get<std::string>())) return true;
  if (!a.s.contains("properties") || !a.s["properties"].is_object()) return false;
  for (const auto& [key, unused] : a.s["properties"].items()) {
    if (!required(a, key) || !required(b, key)) continue;
    const Json* va = values_of(a, key);
    const Json* vb = values_of(b, key);
    if (!va || !vb) continue;
    const Json xa = va->is_array() ? *va : Json::array({*va});
    const Json xb = vb->is_array() ? *vb : Json::array({*vb});
    if (disjoint_values(xa, xb)) return true;
  }
  return false;
}

std::vector<std::string> Converter::types_of(const Json& s) const {
  std::vector<std::string> out;
  if (s.contains("type")) {
    for (const auto& t : s["type"]) out.push_back(t.get<std::string>());
    return out;
  }
  // No type: the types whose keywords appear, like llama.cpp and xgrammar (a schema with
  // `properties` is meant as an object even though any non-object would validate).
  auto any = [&](std::initializer_list<const char*> kws) {
    for (const char* k : kws)
      if (s.contains(k)) return true;
    return false;
  };
  if (any({"properties", "required", "additionalProperties", "unevaluatedProperties"})) out.push_back("object");
  if (any({"items", "prefixItems", "minItems", "maxItems", "unevaluatedItems"})) out.push_back("array");
  if (any({"minLength", "maxLength", "pattern", "format"})) out.push_back("string");
  if (any({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) out.push_back("number");
  return out;
}

ExprId Converter::typed(const Flat& f) {
  if (f.s.contains("enum")) return enum_expr(f);
  std::vector<std::string> types = types_of(f.s);
  if (types.empty()) return b_.ref(value_rule());
  const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
  std::vector<ExprId> alts;
  std::set<std::string> seen;
  for (const auto& t : types) {
    if (!seen.insert(t).second || (t == "integer" && has_number)) continue;
    alts.push_back(type_expr(t, f));
  }
  return b_.alt(std::move(alts));
}

ExprId Converter::type_expr(const std::string& type, const Flat& f) {
  if (type == "null") return lit("null");
  if (type == "boolean") return b_.alt({lit("true"), lit("false")});
  if (type == "integer") return integer_expr(f);
  if (type == "number") return number_expr(f);
  if (type == "string") return string_expr(f);
  if (type == "array") return array_expr(f);
  return object_expr(f);
}

// ---- enum and const --------------------------------------------------------------------------

void Converter::unverifiable(const std::string& kw, const std::string& path) const {
  if (opt_.strict)
    throw SchemaError(kw, child(path, kw), "enum / const values cannot be checked against '" + kw + "'");
}

// Whether an enum value satisfies the sibling keywords (values that do not are dropped).
// checked: string / array values are checked by `checker` (null: none of them fits).
bool Converter::fits(const Json& v, const Flat& f, const Grammar* checker, bool checked) const {
  const Json& s = f.s;
  if (s.contains("type")) {
    bool ok = false;
    for (const auto& t : s["type"]) {
      const std::string n = t.get<std::string>();
      ok = ok || (n == "null" && v.is_null()) || (n == "boolean" && v.is_boolean()) || (n == "object" && v.is_object()) ||
           (n == "array" && v.is_array()) || (n == "string" && v.is_string()) || (n == "number" && v.is_number()) ||
           (n == "integer" && v.is_number() &&
            (!v.is_number_float() || v.get<double>() == std::floor(v.get<double>())));
    }
    if (!ok) return false;
  }
  if (checked && (v.is_string() || v.is_array())) {
    std::string text;
    write_canonical(v, text, f.path);
    return checker && accepts(*checker, text);
  }
  if (v.is_string()) {
    const auto n = static_cast<int64_t>(code_points(v.get<std::string>()).size());
    if (s.contains("minLength") && n < s["minLength"].get<double>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<double>()) return false;
  }
  if (v.is_number() && !fits_number(v, s)) return false;
  if (v.is_object())
    for (const char* kw : {"properties", "required", "additionalProperties"})
      if (s.contains(kw)) unverifiable(kw, f.path);
  return true;
}

bool Converter::fits_number(const Json& v, const Json& s) const {
  const std::string text = number_text(v);
  const auto d = parse_decimal(text);
  if (!d) return false;
  if (auto lo = lower_bound(s, ""); lo && compare(*d, lo->value) < (lo->exclusive ? 1 : 0)) return false;
  if (auto hi = upper_bound(s, ""); hi && compare(*d, hi->value) > (hi->exclusive ? -1 : 0)) return false;
  return true;
}

// json.dumps's layout: ", " and ": " inside arrays and objects.
void Converter::write_canonical(const Json& v, std::string& out, const std::string& path) const {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      out += first ? "" : ", ";
      first = false;
      write_canonical(Json(k), out, path);
      out += ": ";
      write_canonical(x, out, path);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      write_canonical(v[i], out, path);
    }
    out += ']';
  } else {
    if (v.is_number_float() && number_text(v).empty()) throw SchemaError("enum", path, "enum values must be finite numbers");
    try {
      out += v.dump();
    } catch (const nlohmann::json::exception& e) {
      throw SchemaError("enum", path, std::string("an enum value is not valid UTF-8: ") + e.what());
    }
  }
}

// A const array / object whose layout allows whitespace (any_whitespace).
ExprId Converter::const_expr(const Json& v) {
  if (!v.is_structured()) {
    std::string text;
    write_canonical(v, text, "");
    return lit(text);
  }
  std::vector<ExprId> items;
  for (const auto& [k, x] : v.items()) {
    ExprId e = const_expr(x);
    if (v.is_object()) {
      std::string key;
      write_canonical(Json(k), key, "");
      e = b_.seq({lit(key), colon(), e});
    }
    if (!items.empty()) items.push_back(comma());
    items.push_back(e);
  }
  const char open = v.is_object() ? '{' : '[', close = v.is_object() ? '}' : ']';
  if (items.empty()) return braces(open, close, -1, true);
  return braces(open, close, b_.seq(std::move(items)), false);
}

// The alternation of sorted distinct byte strings as a trie, so that matching stays
// deterministic and a 10^5-value enum costs one node per distinct prefix.
ExprId Converter::trie(const std::vector<std::string>& v, size_t lo, size_t hi, size_t pos, int depth) {
  if (depth > 1000) throw SchemaError("enum", "", "enum values too long and alike to compile");
  const std::string& first = v[lo];
  const std::string& last = v[hi - 1];
  size_t end = pos;
  while (end < first.size() && end < last.size() && first[end] == last[end]) ++end;
  const ExprId head = lit(std::string_view(first).substr(pos, end - pos));
  if (hi - lo == 1) return head;
  std::vector<ExprId> alts;
  size_t i = lo;
  if (v[i].size() == end) alts.push_back(b_.empty()), ++i;
  while (i < hi) {
    size_t j = i + 1;
    while (j < hi && v[j][end] == v[i][end]) ++j;
    alts.push_back(trie(v, i, j, end, depth + 1));
    i = j;
  }
  return b_.seq({head, b_.alt(std::move(alts))});
}

// The schema without its enum as a grammar of its own, to check enum values against a
// pattern, a format or array keywords (objects are not checked: extra keys there would be
// judged by the listed-keys-only default, which is about generating, not validating).
std::shared_ptr<const Grammar> Converter::enum_checker(const Flat& f) {
  GrammarBuilder b;
  JsonSchemaOptions options = opt_;
  options.any_whitespace = false;
  Converter sub(b, options);
  sub.root_ = root_;
  sub.root_id_ = root_id_;
  Flat rest = f;
  rest.s.erase("enum");
  if (!rest.s.contains("type"))  // validating: a keyword does not imply its type here
    rest.s["type"] = Json::array({"null", "boolean", "object", "array", "number", "string"});
  const int32_t root = sub.new_rule(f.path, "check");
  sub.define(root, sub.typed(rest));
  sub.drain();
  try {
    return b.build(root);
  } catch (const Error&) {  // matches nothing
    return nullptr;
  }
}

ExprId Converter::enum_expr(const Flat& f) {
  std::vector<std::string> texts;
  std::vector<ExprId> structured;
  const Json& s = f.s;
  bool checked = false;
  for (const auto& v : s["enum"]) {
    const bool string_check = v.is_string() && (s.contains("pattern") || s.contains("format"));
    const bool array_check =
        v.is_array() && (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"));
    checked = checked || string_check || array_check;
  }
  const auto checker = checked ? enum_checker(f) : nullptr;
  for (const auto& v : s["enum"]) {
    if (!fits(v, f, checker.get(), checked)) continue;
    if (opt_.any_whitespace && v.is_structured() && !v.empty()) {
      structured.push_back(const_expr(v));
      continue;
    }
    std::string text;
    write_canonical(v, text, child(f.path, "enum"));
    texts.push_back(std::move(text));
  }
  // No value left: the schema matches nothing (fine in an optional place or one branch).
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  if (!texts.empty()) structured.push_back(trie(texts, 0, texts.size(), 0, 0));
  return b_.alt(std::move(structured));
}

// ---- shared pieces ---------------------------------------------------------------------------

ExprId Converter::ws() {
  if (ws_ < 0) ws_ = opt_.any_whitespace ? b_.repeat(set(" \t\n\r"), 0, opt_.max_whitespace) : b_.empty();
  return ws_;
}

ExprId Converter::comma() {
  if (comma_ < 0) comma_ = opt_.any_whitespace ? b_.seq({ws(), lit(","), ws()}) : lit(", ");
  return comma_;
}

ExprId Converter::colon() {
  if (colon_ < 0) colon_ = opt_.any_whitespace ? b_.seq({ws(), lit(":"), ws()}) : lit(": ");
  return colon_;
}

// A whole string in one rule: its masks inside the string depend on the rule state alone.
int32_t Converter::string_rule() {
  if (string_rule_ >= 0) return string_rule_;
  string_rule_ = new_rule("", "string");
  define(string_rule_, quoted(b_.star(json_char())));
  return string_rule_;
}

namespace {

ExprId int_part(GrammarBuilder& b) {
  return b.alt({b.literal("0"), b.seq({b.bytes(ByteSet::range('1', '9')), b.star(b.bytes(ByteSet::range('0', '9')))})});
}

}  // namespace

int32_t Converter::integer_rule() {
  if (integer_rule_ >= 0) return integer_rule_;
  integer_rule_ = new_rule("", "integer");
  define(integer_rule_, b_.seq({b_.opt(lit("-")), int_part(b_)}));
  return integer_rule_;
}

int32_t Converter::number_rule() {
  if (number_rule_ >= 0) return number_rule_;
  number_rule_ = new_rule("", "number");
  const ExprId frac = b_.opt(b_.seq({lit("."), more_digits(0, true, digit())}));
  const ExprId exp = b_.opt(b_.seq({set("eE"), b_.opt(set("+-")), b_.plus(digit())}));
  define(number_rule_, b_.seq({b_.opt(lit("-")), int_part(b_), frac, exp}));
  return number_rule_;
}

// Any JSON value; object keys are any strings (duplicates not prevented).
int32_t Converter::value_rule() {
  if (value_rule_ >= 0) return value_rule_;
  value_rule_ = new_rule("", "value");
  object_rule_ = new_rule("", "object");
  array_rule_ = new_rule("", "array");
  const ExprId v = b_.ref(value_rule_);
  const ExprId member = b_.seq({b_.ref(string_rule()), colon(), v});
  define(object_rule_, braces('{', '}', b_.seq({member, b_.star(b_.seq({comma(), member}))}), true));
  define(array_rule_, braces('[', ']', b_.seq({v, b_.star(b_.seq({comma(), v}))}), true));
  define(value_rule_, b_.alt({b_.ref(object_rule_), b_.ref(array_rule_), b_.ref(string_rule()), b_.ref(number_rule()),
                              lit("true"), lit("false"), lit("null")}));
  return value_rule_;
}

int32_t Converter::schema_root(const Json& schema) {
  if (document_depth(schema) > kMaxDocumentDepth)
    throw SchemaError("", "", "the schema document nests deeper than " + std::to_string(kMaxDocumentDepth) + " levels");
  root_ = &schema;
  if (schema.is_object() && schema.contains("$id") && schema["$id"].is_string()) {
    root_id_ = schema["$id"].get<std::string>();
    if (const auto hash = root_id_.find('#'); hash != std::string::npos) root_id_.resize(hash);
  }
  const int32_t root = ref_rule("");
  drain();
  check_left_recursion();
  return root;
}

}  // namespace zen::grammar::json_schema_internal

namespace zen::grammar {

using json_schema_internal::Converter;

int32_t json_schema_rules(GrammarBuilder& b, const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  Converter c(b, options);
  return c.schema_root(schema);
}

int32_t json_object_rules(GrammarBuilder& b, const JsonSchemaOptions& options) {
  Converter c(b, options);
  return c.free_object();
}

int32_t json_value_rules(GrammarBuilder& b, const JsonSchemaOptions& options) {
  Converter c(b, options);
  return c.free_value();
}

}  // namespace zen::grammar
