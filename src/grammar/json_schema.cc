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

namespace zen::grammar {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kMaxDepth = 128;             // nested sub-schemas
constexpr int kMaxDocumentDepth = 1024;    // JSON nesting of the schema document itself
constexpr int64_t kMaxCount = 100000;      // minItems / maxItems / minLength / maxLength
constexpr int64_t kInlineLength = 256;     // longer length bounds count calls of a char rule
constexpr int64_t kMaxCombinations = 256;  // anyOf alternatives made by distributing allOf
constexpr int64_t kMaxWork = 200000;       // sub-schemas converted or flattened
constexpr size_t kInlineOptional = 32;     // more optional properties than this: rule chain
constexpr size_t kMaxDigits = 400;         // digits of a numeric bound (doubles need 309)
constexpr size_t kMaxFractionDigits = 20;  // a double needs 17; a model may write 0.000... forever
constexpr int kMaxWhitespace = 256;
constexpr int64_t kMaxLengthSplit = 400000;  // NFA states for string lengths inside a pattern

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

// ---- decimal numbers -------------------------------------------------------------------------

// A number as decimal digit strings, so bounds past 64 bits and fractional bounds stay exact.
struct Decimal {
  bool neg = false;
  std::string whole = "0";  // no leading zeros
  std::string frac;         // no trailing zeros
};

int compare_magnitude(const Decimal& a, const Decimal& b) {
  if (a.whole.size() != b.whole.size()) return a.whole.size() < b.whole.size() ? -1 : 1;
  if (int c = a.whole.compare(b.whole)) return c < 0 ? -1 : 1;
  // Without trailing zeros, fraction digit strings order like their values.
  if (int c = a.frac.compare(b.frac)) return c < 0 ? -1 : 1;
  return 0;
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  const int m = compare_magnitude(a, b);
  return a.neg ? -m : m;
}

// Parses JSON number text ("-1.25e-3").
std::optional<Decimal> parse_decimal(std::string_view t) {
  Decimal d;
  size_t i = 0;
  if (i < t.size() && t[i] == '-') d.neg = true, ++i;
  std::string digits;
  int64_t point = 0;
  for (; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) digits += t[i], ++point;
  if (i < t.size() && t[i] == '.')
    for (++i; i < t.size() && std::isdigit(static_cast<unsigned char>(t[i])); ++i) digits += t[i];
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    const int64_t exp = std::strtoll(std::string(t.substr(i + 1)).c_str(), nullptr, 10);
    if (exp > static_cast<int64_t>(kMaxDigits) || exp < -static_cast<int64_t>(kMaxDigits)) return std::nullopt;
    point += exp;
  }
  if (digits.empty()) return std::nullopt;
  const auto n = static_cast<int64_t>(digits.size());
  if (point <= 0) {
    d.whole = "0";
    d.frac = std::string(static_cast<size_t>(-point), '0') + digits;
  } else if (point >= n) {
    d.whole = digits + std::string(static_cast<size_t>(point - n), '0');
  } else {
    d.whole = digits.substr(0, static_cast<size_t>(point));
    d.frac = digits.substr(static_cast<size_t>(point));
  }
  d.whole.erase(0, std::min(d.whole.find_first_not_of('0'), d.whole.size() - 1));
  while (!d.frac.empty() && d.frac.back() == '0') d.frac.pop_back();
  if (d.whole == "0" && d.frac.empty()) d.neg = false;
  if (d.whole.size() > kMaxDigits || d.frac.size() > kMaxDigits) return std::nullopt;
  return d;
}

std::string number_text(const Json& v) {
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  const double x = v.get<double>();
  return std::isfinite(x) ? v.dump() : std::string();  // nlohmann writes the shortest round trip
}

std::string add_one(std::string m) {  // magnitude + 1
  for (size_t i = m.size(); i-- > 0;) {
    if (m[i] != '9') {
      ++m[i];
      return m;
    }
    m[i] = '0';
  }
  return "1" + m;
}

std::string sub_one(std::string m) {  // magnitude - 1, m > 0
  for (size_t i = m.size(); i-- > 0;) {
    if (m[i] != '0') {
      --m[i];
      break;
    }
    m[i] = '9';
  }
  m.erase(0, std::min(m.find_first_not_of('0'), m.size() - 1));
  return m;
}

Decimal integer(bool neg, std::string mag) {
  Decimal d;
  d.neg = neg && mag != "0";
  d.whole = std::move(mag);
  return d;
}

// The next integer up / down from an integer.
Decimal succ(const Decimal& d) { return d.neg ? integer(true, sub_one(d.whole)) : integer(false, add_one(d.whole)); }
Decimal pred(const Decimal& d) {
  if (d.neg) return integer(true, add_one(d.whole));
  return d.whole == "0" ? integer(true, "1") : integer(false, sub_one(d.whole));
}

// The least integer >= d (> d when exclusive), and the greatest <= d (< d).
Decimal int_at_least(const Decimal& d, bool exclusive) {
  if (d.frac.empty()) return exclusive ? succ(d) : d;
  return d.neg ? integer(true, d.whole) : integer(false, add_one(d.whole));
}
Decimal int_at_most(const Decimal& d, bool exclusive) {
  if (d.frac.empty()) return exclusive ? pred(d) : d;
  return d.neg ? integer(true, add_one(d.whole)) : integer(false, d.whole);
}

struct Bound {
  Decimal value;
  bool exclusive = false;
};

// A string length bound that cannot be pushed into a pattern / format exactly (in budget).
struct TooLarge {};

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

// ---- the converter ---------------------------------------------------------------------------

// One alternative of an anyOf / oneOf, still to be flattened.
struct Choice {
  Json schema;
  std::string path;
};

// A schema with its $ref siblings and allOf parts merged: the constraint keywords (normalized:
// `type` a list, const as enum, draft-07 tuple items as prefixItems, draft-04 boolean
// exclusives as numbers, nullable folded into type) and the anyOf / oneOf lists still to
// distribute.
struct Flat {
  Json s = Json::object();
  std::vector<std::vector<Choice>> groups;
  bool never = false;  // the false schema: nothing validates
  std::string path;
};

class Converter {
 public:
  Converter(GrammarBuilder& b, const JsonSchemaOptions& options) : b_(b), opt_(options) {
    if (opt_.max_whitespace < 0 || opt_.max_whitespace > kMaxWhitespace)
      throw SchemaError("", "", "max_whitespace must be within 0.." + std::to_string(kMaxWhitespace));
  }

  int32_t schema_root(const Json& schema);
  int32_t free_value() { return value_rule(); }
  int32_t free_object() {
    value_rule();
    return object_rule_;
  }

 private:
  // rules
  int32_t new_rule(const std::string& path, const std::string& hint);
  void define(int32_t rule, ExprId body, bool nullable = false);
  int32_t rule_for(const Json& node, const std::string& path, const std::string& kw);
  int32_t flat_rule(const Flat& f);
  struct Cached {
    int32_t rule = -1;  // -1 while the body is built and nobody asked for the rule
    std::string path;
  };
  int32_t finish_rule(const std::string& key, ExprId body);
  int32_t cached_rule(Cached& c);
  int32_t ref_rule(const std::string& pointer);
  void drain();
  void check_left_recursion();
  bool scan_first_calls(ExprId e, std::vector<int32_t>& out, std::unordered_map<ExprId, bool>& memo) const;

  // references
  std::string ref_pointer(const Json& ref, const std::string& path) const;
  const Json& resolve(const std::string& pointer, const std::string& path) const;
  bool pure_ref(const Json& node) const;

  // flattening
  Flat flatten(const Json& node, const std::string& path, const std::string& kw);
  Flat flatten_nested(const Json& node, const std::string& path, const std::string& kw);
  void check_keywords(const Json& node, const std::string& path) const;
  void check_value(const std::string& k, const Json& v, const std::string& path) const;
  Json normalize(const Json& node, const std::string& path) const;
  void merge_into(Flat& a, const Flat& b);
  void merge_keyword(Flat& a, const std::string& k, const Json& bv);
  void merge_properties(Flat& a, const Flat& b);
  void merge_prefix_items(Flat& a, const Flat& b);
  void conflict(const std::string& kw, const std::string& path, const std::string& what) const;

  // values
  ExprId value(const Json& node, const std::string& path, const std::string& kw);
  ExprId expand(const Flat& f);
  ExprId typed(const Flat& f);
  std::vector<std::string> types_of(const Json& s) const;
  // Whether no JSON value can validate against both (a sufficient check, for oneOf).
  bool provably_disjoint(const Flat& a, const Flat& b) const;
  ExprId type_expr(const std::string& type, const Flat& f);
  ExprId enum_expr(const Flat& f);
  bool fits(const Json& v, const Flat& f, const Grammar* checker, bool checked) const;
  std::shared_ptr<const Grammar> enum_checker(const Flat& f);
  bool fits_number(const Json& v, const Json& s) const;
  void unverifiable(const std::string& kw, const std::string& path) const;
  ExprId const_expr(const Json& v);
  void write_canonical(const Json& v, std::string& out, const std::string& path) const;
  ExprId trie(const std::vector<std::string>& v, size_t lo, size_t hi, size_t pos, int depth);

  // objects and arrays
  ExprId object_expr(const Flat& f);
  ExprId members(const std::vector<ExprId>& kv, const std::vector<bool>& required, ExprId extra, bool& allow_empty,
                 const std::string& path);
  ExprId optional_members(const std::vector<ExprId>& kv, ExprId extra, const std::string& path);
  ExprId extra_key(const std::vector<std::string>& listed, const std::string& path);
  ExprId key_not_in(int node, const std::vector<std::map<uint32_t, int>>& children, const std::vector<char>& terminals,
                    int depth);
  ExprId array_expr(const Flat& f);
  ExprId braces(char open, char close, ExprId nonempty, bool allow_empty);

  // strings
  ExprId string_expr(const Flat& f);
  ExprId format_expr(const std::string& format, const std::string& path);
  ExprId json_char();
  ExprId canonical_char_except(const std::set<uint32_t>& excluded);
  ExprId canonical_escape();
  int32_t key_tail_rule();
  int32_t char_rule();
  int32_t key_special_rule();
  ExprId date_expr();
  ExprId time_expr();
  ExprId pattern_expr(const Flat& f);
  ExprId pattern_and_format(ExprId pattern, ExprId format);
  std::optional<std::vector<std::string>> finite_strings(ExprId e);
  bool any_tail(ExprId e);
  bool matches_empty(ExprId e);
  ExprId derive(ExprId e, uint8_t c);
  ExprId bounded(ExprId content, const Flat& f, const std::string& with);

  // string length inside a pattern / format
  struct CharLen {
    bool ok = false;          // the expression spells whole characters
    int64_t min = 0, max = 0;  // characters; max -1: unbounded
  };
  CharLen char_len(ExprId e);
  CharLen seq_char_len(const Expr& x);
  ExprId with_length(ExprId e, int64_t lo, int64_t hi);
  ExprId seq_with_length(const std::vector<ExprId>& kids, int64_t lo, int64_t hi);
  ExprId split_with_length(ExprId left, ExprId right, bool enumerate_left, int64_t lo, int64_t hi);
  int64_t nfa_estimate(ExprId e);
  void spend(ExprId e);

  // numbers
  ExprId integer_expr(const Flat& f);
  ExprId number_expr(const Flat& f);
  std::optional<Bound> lower_bound(const Json& s, const std::string& path) const;
  std::optional<Bound> upper_bound(const Json& s, const std::string& path) const;
  Decimal decimal_of(const Json& v, const std::string& kw, const std::string& path) const;
  ExprId int_range(const std::optional<Decimal>& lo, const std::optional<Decimal>& hi);
  ExprId uint_range(const std::string& lo, const std::optional<std::string>& hi);
  ExprId same_length(const std::string& lo, const std::string& hi, size_t i, bool tlo, bool thi);
  ExprId num_range(const std::optional<Bound>& lo, const std::optional<Bound>& hi);
  ExprId magnitude_range(const Bound& lo, const std::optional<Bound>& hi);
  ExprId fraction(const std::optional<Bound>& lo, const std::optional<Bound>& hi);
  ExprId fraction_digits(const std::string& lo, bool lo_excl, const std::string& hi, bool hi_excl, size_t i, bool tlo,
                         bool thi, bool need_digit);

  // counts
  int64_t count(const Json& s, const std::string& kw, int64_t fallback) const;
  int64_t min_count(const Json& s, const std::string& kw, const std::string& path) const;
  int64_t max_count(const Json& s, const std::string& kw, const std::string& path) const;

  // shared pieces
  int32_t value_rule();
  int32_t string_rule();
  int32_t number_rule();
  int32_t integer_rule();
  ExprId ws();
  ExprId comma();
  ExprId colon();
  ExprId lit(std::string_view s) { return s.empty() ? b_.empty() : b_.literal(s); }
  ExprId set(std::string_view cs) { return b_.bytes(chars(cs)); }
  ExprId range(char lo, char hi) { return b_.bytes(ByteSet::range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi))); }
  ExprId digit() { return range('0', '9'); }
  // Fraction digits from position `used` on, at most `cap` in all.
  ExprId more_digits(size_t used, bool need, ExprId one, size_t cap = kMaxFractionDigits) {
    const size_t rest = cap > used ? cap - used : 0;
    if (need && rest == 0) return nothing();
    return b_.repeat(one, need ? 1 : 0, static_cast<int32_t>(rest));
  }
  ExprId digits(int n) { return b_.repeat(digit(), n, n); }
  ExprId hex() { return set("0123456789abcdefABCDEF"); }
  ExprId nothing() { return b_.alt({}); }
  ExprId quoted(ExprId content) { return b_.seq({lit("\""), content, lit("\"")}); }
  void tick(const std::string& path);

  struct RuleInfo {
    ExprId body = -1;
    bool nullable = false;
    std::string path;
  };
  struct DepthGuard {
    DepthGuard(Converter& c, const std::string& kw, const std::string& path) : c_(c) {
      if (++c_.depth_ > kMaxDepth)
        throw SchemaError(kw, path, "the schema nests deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~DepthGuard() { --c_.depth_; }
    Converter& c_;
  };

  GrammarBuilder& b_;
  JsonSchemaOptions opt_;
  const Json* root_ = nullptr;
  std::string root_id_;
  std::unordered_map<std::string, Cached> cache_;       // schema text -> rule
  std::unordered_map<std::string, int32_t> ref_rules_;  // JSON pointer -> rule
  std::deque<std::pair<std::string, int32_t>> pending_;  // $ref rules whose body is still to build
  std::vector<std::string> inlining_;                     // pointers being merged in (cycle check)
  std::unordered_map<int32_t, RuleInfo> rules_;
  int depth_ = 0;
  int64_t work_ = 0;
  int32_t value_rule_ = -1, object_rule_ = -1, array_rule_ = -1, string_rule_ = -1, number_rule_ = -1,
          integer_rule_ = -1;
  int32_t key_tail_ = -1, key_special_ = -1, char_rule_ = -1;
  std::unordered_map<ExprId, CharLen> char_len_memo_;
  std::unordered_map<ExprId, int64_t> nfa_memo_;
  int64_t length_budget_ = 0;
  ExprId ws_ = -1, comma_ = -1, colon_ = -1, char_ = -1, canon_escape_ = -1;
};

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

// Both schemas as one: allOf unless one of them decides it.
Json both(const Json& x, const Json& y) {
  if (x == true || x == y) return y;
  if (y == true) return x;
  if (x == false || y == false) return false;
  return Json{{"allOf", Json::array({x, y})}};
}

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

// ---- objects ---------------------------------------------------------------------------------

ExprId Converter::braces(char open, char close, ExprId nonempty, bool allow_empty) {
  std::vector<ExprId> alts;
  const std::string o(1, open), c(1, close);
  if (allow_empty) alts.push_back(b_.seq({lit(o), ws(), lit(c)}));
  if (nonempty >= 0) alts.push_back(b_.seq({lit(o), ws(), nonempty, ws(), lit(c)}));
  return b_.alt(std::move(alts));
}

ExprId Converter::object_expr(const Flat& f) {
  const Json& s = f.s;
  const Json props = s.value("properties", Json::object());
  std::vector<std::string> required;
  for (const auto& r : s.value("required", Json::array()))
    if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end())
      required.push_back(r.get<std::string>());
  const Json declared = s.contains("additionalProperties")    ? s["additionalProperties"]
                        : s.contains("unevaluatedProperties") ? s["unevaluatedProperties"]
                                                              : Json();
  // Absent: only the listed keys (and required ones, with any value), unless none are listed.
  const Json extra_schema = declared.is_null() ? Json(props.empty()) : declared;
  const Json unlisted_required = declared.is_null() ? Json(true) : declared;
  std::vector<std::string> keys;
  std::vector<ExprId> kv;
  std::vector<bool> req;
  auto add = [&](const std::string& key, const Json& sub, const std::string& path, bool is_required) {
    keys.push_back(key);
    if (sub == false) return is_required;  // may not appear: fine unless required
    std::string text;
    write_canonical(Json(key), text, path);
    kv.push_back(b_.seq({lit(text), colon(), b_.ref(rule_for(sub, path, "properties"))}));
    req.push_back(is_required);
    return false;
  };
  bool impossible = false;
  for (const auto& [k, sub] : props.items()) {
    const bool r = std::find(required.begin(), required.end(), k) != required.end();
    impossible = add(k, sub, child(child(f.path, "properties"), k), r) || impossible;
  }
  for (const auto& r : required)
    if (!props.contains(r)) impossible = add(r, unlisted_required, child(f.path, "required"), true) || impossible;
  if (impossible) return nothing();
  ExprId extra = -1;
  if (extra_schema != false) {
    const int32_t value = rule_for(extra_schema, child(f.path, "additionalProperties"), "additionalProperties");
    extra = b_.seq({extra_key(keys, f.path), colon(), b_.ref(value)});
  }
  bool allow_empty = false;
  const ExprId list = members(kv, req, extra, allow_empty, f.path);
  return braces('{', '}', list, allow_empty);
}

// The non-empty member lists: listed properties in order, the required ones always, then
// extra members. Separators go before each member but the first, so where some member is
// required everything before it can carry its comma after, and only the all-optional case
// needs a choice of which member comes first.
ExprId Converter::members(const std::vector<ExprId>& kv, const std::vector<bool>& required, ExprId extra,
                          bool& allow_empty, const std::string& path) {
  const auto first_required = std::find(required.begin(), required.end(), true) - required.begin();
  const size_t n = kv.size();
  if (static_cast<size_t>(first_required) == n) {
    allow_empty = true;
    return optional_members(kv, extra, path);
  }
  allow_empty = false;
  std::vector<ExprId> parts;
  for (size_t i = 0; i < n; ++i) {
    const auto fr = static_cast<size_t>(first_required);
    if (i < fr) parts.push_back(b_.opt(b_.seq({kv[i], comma()})));
    else if (i == fr) parts.push_back(kv[i]);
    else if (required[i]) parts.push_back(b_.seq({comma(), kv[i]}));
    else parts.push_back(b_.opt(b_.seq({comma(), kv[i]})));
  }
  if (extra >= 0) parts.push_back(b_.star(b_.seq({comma(), extra})));
  return b_.seq(std::move(parts));
}

// All members optional: the first present one is chosen, then the rest follow with commas.
// The rest after member i is a suffix shared by every choice; inline copies cost O(n^2), so
// past kInlineOptional members the suffixes become a chain of (nullable) rules.
ExprId Converter::optional_members(const std::vector<ExprId>& kv, ExprId extra, const std::string& path) {
  const size_t n = kv.size();
  const ExprId extras = extra >= 0 ? b_.star(b_.seq({comma(), extra})) : b_.empty();
  std::vector<ExprId> rest(n + 1);  // rest[i]: members i.. after at least one
  rest[n] = extras;
  const bool chain = n > kInlineOptional;
  if (chain) {
    int32_t next = new_rule(path, "rest");
    define(next, extras, true);
    rest[n] = b_.ref(next);
    for (size_t i = n; i-- > 0;) {
      const int32_t r = new_rule(path, "rest");
      define(r, b_.seq({b_.opt(b_.seq({comma(), kv[i]})), rest[i + 1]}), true);
      rest[i] = b_.ref(r);
    }
  } else {
    for (size_t i = n; i-- > 0;) rest[i] = b_.seq({b_.opt(b_.seq({comma(), kv[i]})), rest[i + 1]});
  }
  std::vector<ExprId> alts;
  for (size_t i = 0; i < n; ++i) alts.push_back(b_.seq({kv[i], rest[i + 1]}));
  if (extra >= 0) alts.push_back(b_.seq({extra, extras}));
  return alts.empty() ? -1 : b_.alt(std::move(alts));
}

// A key (quoted, in json.dumps spelling) that is none of `listed`: the complement of the
// listed keys' trie over characters. With one spelling per character, "a different
// spelling" is "a different key". One rule, so the key's masks are cached like a string's.
ExprId Converter::extra_key(const std::vector<std::string>& listed, const std::string& path) {
  if (listed.empty()) return b_.ref(string_rule());
  std::vector<std::map<uint32_t, int>> children(1);
  std::vector<char> terminals(1, 0);
  for (const auto& key : listed) {
    int node = 0;
    for (uint32_t cp : code_points(key)) {
      auto it = children[static_cast<size_t>(node)].find(cp);
      if (it == children[static_cast<size_t>(node)].end()) {
        children.emplace_back();
        terminals.push_back(0);
        const int fresh = static_cast<int>(children.size() - 1);
        children[static_cast<size_t>(node)][cp] = fresh;
        node = fresh;
      } else {
        node = it->second;
      }
    }
    terminals[static_cast<size_t>(node)] = 1;
  }
  const int32_t r = new_rule(path, "key");
  define(r, b_.seq({lit("\""), key_not_in(0, children, terminals, 0)}));
  return b_.ref(r);
}

// The rest of a key below trie node `node` (closing quote included): end here where no
// listed key ends, leave the trie with a character no listed key continues with, or follow
// a branch. Leaving calls shared rules for "anything, then the quote", so that each trie
// node costs a few states even for thousands of listed keys.
ExprId Converter::key_not_in(int node, const std::vector<std::map<uint32_t, int>>& children,
                             const std::vector<char>& terminals, int depth) {
  if (depth > 1000) throw SchemaError("properties", "", "property names too long to exclude from extra keys");
  const auto& kids = children[static_cast<size_t>(node)];
  std::set<uint32_t> here;
  bool plain_ascii = true;
  for (const auto& [cp, kid] : kids) {
    here.insert(cp);
    plain_ascii = plain_ascii && cp < 0x80 && !needs_escape(cp);
  }
  std::vector<ExprId> alts;
  if (!terminals[static_cast<size_t>(node)]) alts.push_back(lit("\""));
  if (plain_ascii) {  // leaving with another ASCII character, or with any other character
    ByteSet ascii = ByteSet::range(0x20, 0x7F);
    for (uint32_t cp : here) ascii.bits[cp >> 6] &= ~(uint64_t{1} << (cp & 63));
    for (uint8_t c : {'"', '\\'}) ascii.bits[c >> 6] &= ~(uint64_t{1} << (c & 63));
    alts.push_back(b_.seq({b_.bytes(ascii), b_.ref(key_tail_rule())}));
    alts.push_back(b_.ref(key_special_rule()));
  } else {
    alts.push_back(b_.seq({canonical_char_except(here), b_.ref(key_tail_rule())}));
  }
  for (const auto& [cp, kid] : kids)
    alts.push_back(b_.seq({lit(canonical_spelling(cp)), key_not_in(kid, children, terminals, depth + 1)}));
  return b_.alt(std::move(alts));
}

// Any canonical characters, then the closing quote.
int32_t Converter::key_tail_rule() {
  if (key_tail_ >= 0) return key_tail_;
  key_tail_ = new_rule("", "key-tail");
  define(key_tail_, b_.seq({b_.star(canonical_char_except({})), lit("\"")}));
  return key_tail_;
}

// A non-ASCII character or an escape, then the rest of the key.
int32_t Converter::key_special_rule() {
  if (key_special_ >= 0) return key_special_;
  key_special_ = new_rule("", "key-special");
  define(key_special_, b_.seq({b_.alt({b_.codepoints({{0x80, 0x10FFFF}}), canonical_escape()}), b_.ref(key_tail_rule())}));
  return key_special_;
}

// ---- arrays ----------------------------------------------------------------------------------

ExprId Converter::array_expr(const Flat& f) {
  const Json& s = f.s;
  const Json prefix = s.value("prefixItems", Json::array());
  const Json items = s.contains("items") ? s["items"] : s.contains("unevaluatedItems") ? s["unevaluatedItems"] : Json(true);
  const auto k = static_cast<int64_t>(prefix.size());
  const int64_t lo = min_count(s, "minItems", f.path);
  int64_t hi = max_count(s, "maxItems", f.path);
  if (items == false) hi = hi < 0 ? k : std::min(hi, k);
  if (hi >= 0 && lo > hi) return nothing();
  if (hi == 0) return braces('[', ']', -1, true);
  auto elem = [&](int64_t i) -> ExprId {
    if (i < k) {
      const auto at = static_cast<size_t>(i);
      return b_.ref(rule_for(prefix[at], child(f.path, "prefixItems", at), "prefixItems"));
    }
    return b_.ref(rule_for(items, child(f.path, "items"), "items"));
  };
  // tail(i): elements i.. each after a comma, given i elements already written.
  const int64_t generic_from = std::max<int64_t>(k, 1);
  ExprId tail = b_.empty();
  if (items != false && (hi < 0 || hi > generic_from)) {
    const auto min_more = static_cast<int32_t>(std::max<int64_t>(0, lo - generic_from));
    const auto max_more = static_cast<int32_t>(hi < 0 ? -1 : hi - generic_from);
    tail = b_.repeat(b_.seq({comma(), elem(generic_from)}), min_more, max_more);
  }
  for (int64_t i = generic_from - 1; i >= 1; --i) {
    if (hi >= 0 && i >= hi) continue;
    const ExprId piece = b_.seq({comma(), elem(i), tail});
    tail = i < lo ? piece : b_.opt(piece);
  }
  return braces('[', ']', b_.seq({elem(0), tail}), lo == 0);
}

// ---- strings ---------------------------------------------------------------------------------

// One character inside a JSON string, in any spelling JSON allows (literal, short escape,
// \uXXXX; a surrogate pair is one character, a lone surrogate is not produced).
ExprId Converter::json_char() {
  if (char_ >= 0) return char_;
  const ExprId plain = b_.codepoints_except({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
  const ExprId h = hex();
  const ExprId not_surrogate =
      b_.alt({b_.seq({set("0123456789abcefABCEF"), h, h, h}), b_.seq({set("dD"), range('0', '7'), h, h})});
  const ExprId high = b_.seq({set("dD"), set("89abAB"), h, h});
  const ExprId low = b_.seq({set("dD"), set("cdefCDEF"), h, h});
  const ExprId u = b_.seq({lit("u"), b_.alt({not_surrogate, b_.seq({high, lit("\\u"), low})})});
  const ExprId escape = b_.seq({lit("\\"), b_.alt({set("\"\\/bfnrt"), u})});
  char_ = b_.alt({plain, escape});
  return char_;
}

// The escapes json.dumps writes: \" \\ \b \f \n \r \t, other controls as \u00xx (lowercase).
ExprId Converter::canonical_escape() {
  if (canon_escape_ >= 0) return canon_escape_;
  const ExprId control = b_.seq({lit("u00"), b_.alt({b_.seq({lit("0"), set("01234567bef")}),
                                                     b_.seq({lit("1"), set("0123456789abcdef")})})});
  canon_escape_ = b_.seq({lit("\\"), b_.alt({set("\"\\bfnrt"), control})});
  return canon_escape_;
}

// One character in json.dumps(ensure_ascii=False) spelling, other than `excluded`.
ExprId Converter::canonical_char_except(const std::set<uint32_t>& excluded) {
  CodepointRanges out = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  bool escapes_excluded = false;
  for (uint32_t cp : excluded) {
    out.push_back({cp, cp});
    escapes_excluded = escapes_excluded || needs_escape(cp);
  }
  std::vector<ExprId> alts{b_.codepoints_except(out)};
  if (!escapes_excluded) {
    alts.push_back(canonical_escape());
  } else {
    for (uint32_t cp = 0; cp < 0x80; ++cp)
      if (needs_escape(cp) && !excluded.count(cp)) alts.push_back(lit(canonical_spelling(cp)));
  }
  return b_.alt(std::move(alts));
}

int64_t Converter::count(const Json& s, const std::string& kw, int64_t fallback) const {
  if (!s.contains(kw)) return fallback;
  const double v = s[kw].get<double>();
  return v > 1e15 ? static_cast<int64_t>(1e15) : static_cast<int64_t>(v);
}

int64_t Converter::min_count(const Json& s, const std::string& kw, const std::string& path) const {
  const int64_t n = count(s, kw, 0);
  if (n > kMaxCount)
    throw SchemaError(kw, child(path, kw), "'" + kw + "' above " + std::to_string(kMaxCount) + " is not supported");
  return n;
}

// -1: unbounded. Past the limit, strict refuses; otherwise the bound is dropped.
int64_t Converter::max_count(const Json& s, const std::string& kw, const std::string& path) const {
  const int64_t n = count(s, kw, -1);
  if (n > kMaxCount) {
    if (opt_.strict)
      throw SchemaError(kw, child(path, kw), "'" + kw + "' above " + std::to_string(kMaxCount) + " is not supported");
    return -1;
  }
  return n;
}

ExprId Converter::string_expr(const Flat& f) {
  const Json& s = f.s;
  if (s.contains("pattern")) {
    ExprId content = pattern_expr(f);
    const ExprId format = s.contains("format") ? format_expr(s["format"].get<std::string>(), f.path) : -1;
    if (format >= 0) {
      const ExprId both = pattern_and_format(content, format);
      if (both >= 0) content = both;
      else conflict("format", f.path, "format together with this pattern is not supported");
    }
    return quoted(bounded(content, f, "pattern"));
  }
  if (s.contains("format")) {
    const ExprId e = format_expr(s["format"].get<std::string>(), f.path);
    if (e >= 0) return quoted(bounded(e, f, "format"));
  }
  const int64_t lo = min_count(s, "minLength", f.path);
  const int64_t hi = max_count(s, "maxLength", f.path);
  if (hi >= 0 && lo > hi) return nothing();
  if (lo == 0 && hi < 0) return b_.ref(string_rule());
  // A count of characters costs a state per character per state inside one (about 20 with
  // UTF-8 and escapes); past a few hundred, each character is a call of one shared rule
  // instead, so the count costs one state per character (10000: 0.03 s instead of 4 s).
  const bool large = std::max(lo, hi) > kInlineLength;
  const ExprId one = large ? b_.ref(char_rule()) : json_char();
  return quoted(b_.repeat(one, static_cast<int32_t>(lo), static_cast<int32_t>(hi)));
}

int32_t Converter::char_rule() {
  if (char_rule_ >= 0) return char_rule_;
  char_rule_ = new_rule("", "char");
  define(char_rule_, json_char());
  return char_rule_;
}

ExprId Converter::pattern_expr(const Flat& f) {
  try {
    return parse_regex(b_, f.s["pattern"].get<std::string>(), RegexOptions{.full_match = false, .json_string = true});
  } catch (const std::exception& e) {
    throw SchemaError("pattern", child(f.path, "pattern"), std::string("pattern: ") + e.what());
  }
}

// A pattern's or format's content with minLength / maxLength pushed into it (see
// with_length); where that is not possible exactly, strict refuses and otherwise the
// lengths are dropped.
ExprId Converter::bounded(ExprId content, const Flat& f, const std::string& with) {
  if (!f.s.contains("minLength") && !f.s.contains("maxLength")) return content;
  const int64_t lo = min_count(f.s, "minLength", f.path);
  const int64_t hi = max_count(f.s, "maxLength", f.path);
  const std::string kw = f.s.contains("maxLength") ? "maxLength" : "minLength";
  length_budget_ = kMaxLengthSplit;
  try {
    const ExprId out = with_length(content, lo, hi);
    spend(out);
    return out;
  } catch (const TooLarge&) {
    conflict(kw, f.path, kw + " together with this " + with + " is not supported (too large to combine exactly)");
    return content;
  }
}

ExprId Converter::date_expr() {
  return b_.seq({digits(4), lit("-"), same_length("01", "12", 0, true, true), lit("-"),
                 same_length("01", "31", 0, true, true)});
}

ExprId Converter::time_expr() {
  const ExprId hour = same_length("00", "23", 0, true, true), minute = same_length("00", "59", 0, true, true);
  const ExprId second = same_length("00", "60", 0, true, true);
  const ExprId offset = b_.alt({set("Zz"), b_.seq({set("+-"), hour, lit(":"), minute})});
  return b_.seq({hour, lit(":"), minute, lit(":"), second, b_.opt(b_.seq({lit("."), b_.plus(digit())})), offset});
}

// The string content of a format, or -1 for one not enforced (refused under strict).
ExprId Converter::format_expr(const std::string& format, const std::string& path) {
  const ExprId alnum = b_.bytes(chars("0123456789") | ByteSet::range('a', 'z') | ByteSet::range('A', 'Z'));
  auto label = [&](int max_inner) {  // letters / digits, inner hyphens
    const ExprId inner = b_.repeat(b_.alt({alnum, lit("-")}), 0, max_inner);
    return b_.seq({alnum, b_.opt(b_.seq({inner, alnum}))});
  };
  if (format == "date") return date_expr();
  if (format == "time") return time_expr();
  if (format == "date-time") return b_.seq({date_expr(), set("Tt"), time_expr()});
  if (format == "uuid") {
    const ExprId h = hex();
    auto n = [&](int k) { return b_.repeat(h, k, k); };
    return b_.seq({n(8), lit("-"), n(4), lit("-"), n(4), lit("-"), n(4), lit("-"), n(12)});
  }
  if (format == "email") {
    const ExprId atext = b_.alt({alnum, set("!#$%&'*+-/=?^_`{|}~")});
    const ExprId local = b_.seq({b_.plus(atext), b_.star(b_.seq({lit("."), b_.plus(atext)}))});
    return b_.seq({local, lit("@"), label(-1), b_.plus(b_.seq({lit("."), label(-1)}))});
  }
  if (format == "uri") {  // one character per step and a bounded scheme, so lengths combine
    const ExprId scheme = b_.seq({b_.bytes(ByteSet::range('a', 'z') | ByteSet::range('A', 'Z')),
                                  b_.repeat(b_.alt({alnum, set("+.-")}), 0, 31)});
    const ExprId uric = b_.bytes(b_.expr(alnum).bytes | chars("-._~:/?#[]@!$&'()*+,;=%"));
    return b_.seq({scheme, lit(":"), b_.star(uric)});
  }
  if (format == "ipv4") {
    const ExprId octet = uint_range("0", std::string("255"));
    return b_.seq({octet, lit("."), octet, lit("."), octet, lit("."), octet});
  }
  if (format == "hostname") return b_.seq({label(61), b_.star(b_.seq({lit("."), label(61)}))});
  if (opt_.strict) throw SchemaError("format", child(path, "format"), "format '" + format + "' is not supported");
  return -1;
}

// ---- string length inside a pattern / format -------------------------------------------------
//
// minLength / maxLength with a pattern or format is the intersection of two regular
// languages, which expressions cannot state directly. Instead the bounds are pushed down the
// expression tree: an alternation bounds each branch, a repetition of fixed-length items
// adjusts its counts, a sequence with one variable part bounds that part, and a sequence with
// several is split by the length of one side (a union over its lengths). Exact, but a split
// costs up to (its range) x (the other side), so a budget caps it.

int64_t add_len(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : std::min<int64_t>(a + b, int64_t{1} << 40); }
int64_t mul_len(int64_t a, int64_t n) {
  if (a == 0 || n == 0) return 0;
  return a < 0 || n < 0 ? -1 : std::min<int64_t>(a * n, int64_t{1} << 40);
}

Converter::CharLen Converter::char_len(ExprId e) {
  if (auto it = char_len_memo_.find(e); it != char_len_memo_.end()) return it->second;
  const Expr& x = b_.expr(e);
  CharLen out;
  switch (x.kind) {
    case Expr::Empty: out = {true, 0, 0}; break;
    case Expr::Bytes:
    case Expr::Seq: out = seq_char_len(x); break;
    case Expr::Alt: {
      out = {true, int64_t{1} << 40, 0};
      for (ExprId k : x.kids) {
        const CharLen c = char_len(k);
        out.ok = out.ok && c.ok;
        out.min = std::min(out.min, c.min);
        out.max = out.max < 0 || c.max < 0 ? -1 : std::max(out.max, c.max);
      }
      if (x.kids.empty()) out = {true, 0, 0};
      break;
    }
    case Expr::Repeat: {
      const CharLen c = char_len(x.kids[0]);
      out = {c.ok, mul_len(c.min, x.min), c.max == 0 ? 0 : mul_len(c.max, x.max)};
      break;
    }
    default: break;
  }
  char_len_memo_[e] = out;
  return out;
}

// A sequence read byte by byte where its parts are single bytes (literals, UTF-8 sequences,
// escapes), so a character may span several parts; other parts must be whole characters.
Converter::CharLen Converter::seq_char_len(const Expr& x) {
  const std::vector<ExprId> one{-1};
  const std::vector<ExprId>& parts = x.kind == Expr::Bytes ? one : x.kids;
  CharLen out{true, 0, 0};
  int inside = 0;       // bytes still to come in the current character
  bool hex = false;     // ... as the hex digits of a \u escape
  bool after_backslash = false;
  const ByteSet hex_set = chars("0123456789abcdefABCDEF");
  auto subset = [](const ByteSet& a, const ByteSet& b) {
    for (int i = 0; i < 4; ++i)
      if (a.bits[i] & ~b.bits[i]) return false;
    return true;
  };
  for (ExprId p : parts) {
    const Expr& k = p < 0 ? x : b_.expr(p);
    if (k.kind != Expr::Bytes) {
      const CharLen c = char_len(p);
      if (!c.ok || inside > 0 || after_backslash) return {};
      out.min = add_len(out.min, c.min);
      out.max = add_len(out.max, c.max);
      continue;
    }
    const ByteSet& set = k.bytes;
    if (after_backslash) {
      after_backslash = false;
      if (subset(set, chars("u"))) inside = 4, hex = true;
      else if (!subset(set, chars("\"\\/bfnrt"))) return {};
    } else if (inside > 0) {
      if (!subset(set, hex ? hex_set : ByteSet::range(0x80, 0xBF))) return {};
      --inside;
    } else {
      out.min = add_len(out.min, 1);
      out.max = add_len(out.max, 1);
      hex = false;
      if (subset(set, chars("\\"))) after_backslash = true;
      else if (subset(set, ByteSet::range(0, 0x7F)) && !set.has('\\')) inside = 0;
      else if (subset(set, ByteSet::range(0xC2, 0xDF))) inside = 1;
      else if (subset(set, ByteSet::range(0xE0, 0xEF))) inside = 2;
      else if (subset(set, ByteSet::range(0xF0, 0xF4))) inside = 3;
      else return {};
    }
  }
  if (inside > 0 || after_backslash) return {};
  return out;
}

// NFA size of e once repetitions are expanded (what the compiler will build).
int64_t Converter::nfa_estimate(ExprId e) {
  if (auto it = nfa_memo_.find(e); it != nfa_memo_.end()) return it->second;
  const Expr& x = b_.expr(e);
  int64_t n = 1;
  if (x.kind == Expr::Seq || x.kind == Expr::Alt)
    for (ExprId k : x.kids) n = std::min<int64_t>(n + nfa_estimate(k), int64_t{1} << 40);
  if (x.kind == Expr::Repeat)
    n = std::min<int64_t>(mul_len(nfa_estimate(x.kids[0]), std::max(x.max, x.min + 1)) + 1, int64_t{1} << 40);
  nfa_memo_[e] = n;
  return n;
}

void Converter::spend(ExprId e) {
  length_budget_ -= nfa_estimate(e);
  if (length_budget_ < 0) throw TooLarge{};
}

// e restricted to strings of lo..hi characters (hi -1: no upper bound). Throws TooLarge
// where that cannot be written exactly within the budget.
ExprId Converter::with_length(ExprId e, int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, 0);
  const CharLen c = char_len(e);
  if (!c.ok) throw TooLarge{};
  if ((hi >= 0 && lo > hi) || (c.max >= 0 && c.max < lo) || (hi >= 0 && c.min > hi)) return nothing();
  if (c.min >= lo && (hi < 0 || (c.max >= 0 && c.max <= hi))) return e;  // already within
  const Expr x = b_.expr(e);
  if (x.kind == Expr::Alt) {
    std::vector<ExprId> alts;
    for (ExprId k : x.kids) alts.push_back(with_length(k, lo, hi));
    return b_.alt(std::move(alts));
  }
  if (x.kind == Expr::Seq) return seq_with_length(x.kids, lo, hi);
  if (x.kind != Expr::Repeat) throw TooLarge{};
  const ExprId kid = x.kids[0];
  const CharLen k = char_len(kid);
  if (k.min == k.max && k.min > 0) {  // fixed-length items: adjust the counts
    const int64_t from = std::max<int64_t>(x.min, (lo + k.min - 1) / k.min);
    int64_t to = hi < 0 ? x.max : hi / k.min;
    if (x.max >= 0) to = std::min<int64_t>(to, x.max);
    if (to >= 0 && from > to) return nothing();
    if (from > kMaxCount || to > kMaxCount) throw TooLarge{};
    return b_.repeat(kid, static_cast<int32_t>(from), static_cast<int32_t>(to));
  }
  if (x.max < 0 || x.max > 4) throw TooLarge{};
  std::vector<ExprId> counts;  // a few variable-length items: one branch per count
  for (int32_t n = x.min; n <= x.max; ++n)
    counts.push_back(seq_with_length(std::vector<ExprId>(static_cast<size_t>(n), kid), lo, hi));
  return b_.alt(std::move(counts));
}

ExprId Converter::seq_with_length(const std::vector<ExprId>& kids, int64_t lo, int64_t hi) {
  std::vector<size_t> variable;
  int64_t fixed = 0;
  for (size_t i = 0; i < kids.size(); ++i) {
    const CharLen c = char_len(kids[i]);
    if (!c.ok) throw TooLarge{};
    if (c.min == c.max) fixed += c.min;
    else variable.push_back(i);
  }
  if (variable.empty()) {
    const ExprId all = b_.seq(kids);
    return fixed >= lo && (hi < 0 || fixed <= hi) ? all : nothing();
  }
  if (variable.size() == 1) {  // the one variable part takes what the fixed parts leave
    std::vector<ExprId> parts = kids;
    parts[variable[0]] = with_length(kids[variable[0]], lo - fixed, hi < 0 ? -1 : hi - fixed);
    return b_.seq(std::move(parts));
  }
  // Split around the variable part with the smaller range: before the last one, or after
  // the first one, enumerating the lengths of the side holding that part.
  auto range = [&](size_t i) {
    const CharLen c = char_len(kids[i]);
    const int64_t top = c.max < 0 ? (hi < 0 ? lo : hi) : (hi < 0 ? c.max : std::min(c.max, hi));
    return top - c.min;
  };
  const size_t first = variable.front(), last = variable.back();
  const auto mid = kids.begin();
  if (range(first) <= range(last)) {
    const ExprId left = b_.seq(std::vector<ExprId>(mid, mid + static_cast<std::ptrdiff_t>(first) + 1));
    const ExprId right = b_.seq(std::vector<ExprId>(mid + static_cast<std::ptrdiff_t>(first) + 1, kids.end()));
    return split_with_length(left, right, true, lo, hi);
  }
  const ExprId left = b_.seq(std::vector<ExprId>(mid, mid + static_cast<std::ptrdiff_t>(last)));
  const ExprId right = b_.seq(std::vector<ExprId>(mid + static_cast<std::ptrdiff_t>(last), kids.end()));
  return split_with_length(left, right, false, lo, hi);
}

// left . right within lo..hi as the union, over the lengths n of one side, of (that side with
// exactly n) . (the other with the rest); without an upper bound the last branch is "n or
// more".
ExprId Converter::split_with_length(ExprId left, ExprId right, bool enumerate_left, int64_t lo, int64_t hi) {
  const ExprId side = enumerate_left ? left : right, other = enumerate_left ? right : left;
  const CharLen s = char_len(side), o = char_len(other);
  const int64_t from = std::max<int64_t>(s.min, o.max < 0 ? 0 : lo - o.max);
  int64_t to = hi < 0 ? std::max(from, lo) : hi - o.min;
  if (s.max >= 0) to = std::min(to, s.max);
  std::vector<ExprId> alts;
  for (int64_t n = from; n <= to; ++n) {
    const bool open = hi < 0 && n == to;  // n or more
    const ExprId a = with_length(side, n, open ? -1 : n);
    const ExprId rest = with_length(other, lo - n, hi < 0 ? -1 : hi - n);
    const ExprId both_parts = enumerate_left ? b_.seq({a, rest}) : b_.seq({rest, a});
    spend(both_parts);
    alts.push_back(both_parts);
  }
  return b_.alt(std::move(alts));
}

// ---- a pattern together with a format --------------------------------------------------------
//
// A pattern anchored at the start only (^https?://) is searched for, so it means P then
// anything, and when its anchored part P is a finite set of strings, P.anything & F is the
// union over p in P of p . (F after p), where F after p is F's derivative by p's bytes
// (Brzozowski). A fully anchored finite pattern keeps the p that F accepts. Other patterns
// are not combined with a format.

ExprId Converter::pattern_and_format(ExprId pattern, ExprId format) {
  const Expr x = b_.expr(pattern);
  const std::vector<ExprId> parts = x.kind == Expr::Alt ? x.kids : std::vector<ExprId>{pattern};
  std::vector<ExprId> alts;
  try {
    for (ExprId part : parts) {
      const Expr px = b_.expr(part);
      const bool tail = px.kind == Expr::Seq && px.kids.size() >= 2 && any_tail(px.kids.back());
      const ExprId core = tail ? b_.seq(std::vector<ExprId>(px.kids.begin(), px.kids.end() - 1)) : part;
      const auto strings = finite_strings(core);
      if (!strings) return -1;
      for (const auto& p : *strings) {
        ExprId rest = format;
        for (char c : p)
          if (rest >= 0) rest = derive(rest, static_cast<uint8_t>(c));
        if (rest < 0) continue;
        if (tail) alts.push_back(b_.seq({lit(p), rest}));
        else if (matches_empty(rest)) alts.push_back(lit(p));
      }
    }
  } catch (const TooLarge&) {
    return -1;
  }
  return b_.alt(std::move(alts));
}

// The strings of a repetition-free expression, when there are at most 64.
std::optional<std::vector<std::string>> Converter::finite_strings(ExprId e) {
  constexpr size_t kLimit = 64;
  const Expr x = b_.expr(e);
  std::vector<std::string> out;
  switch (x.kind) {
    case Expr::Empty: return std::vector<std::string>{""};
    case Expr::Bytes:
      for (int c = 0; c < 256; ++c)
        if (x.bytes.has(static_cast<uint8_t>(c))) out.push_back(std::string(1, static_cast<char>(c)));
      break;
    case Expr::Alt:
      for (ExprId k : x.kids) {
        const auto sub = finite_strings(k);
        if (!sub) return std::nullopt;
        out.insert(out.end(), sub->begin(), sub->end());
        if (out.size() > kLimit) return std::nullopt;
      }
      break;
    case Expr::Seq:
      out = {""};
      for (ExprId k : x.kids) {
        const auto sub = finite_strings(k);
        if (!sub || out.size() * sub->size() > kLimit) return std::nullopt;
        std::vector<std::string> next;
        for (const auto& a : out)
          for (const auto& b : *sub) next.push_back(a + b);
        out = std::move(next);
      }
      break;
    case Expr::Repeat: {
      if (x.max < 0 || x.max > 16) return std::nullopt;
      std::vector<ExprId> copies;
      std::vector<ExprId> counts;
      for (int32_t n = 0; n <= x.max; ++n) {
        if (n >= x.min) counts.push_back(b_.seq(copies));
        copies.push_back(x.kids[0]);
      }
      return finite_strings(b_.alt(std::move(counts)));
    }
    default: return std::nullopt;
  }
  if (out.size() > kLimit) return std::nullopt;
  return out;
}

// The "anything" a searched pattern is wrapped in: a repetition of one character whose
// first bytes cover every character JSON strings allow.
bool Converter::any_tail(ExprId e) {
  const Expr& x = b_.expr(e);
  if (x.kind != Expr::Repeat || x.min != 0 || x.max != -1) return false;
  const CharLen c = char_len(x.kids[0]);
  if (!c.ok || c.min != 1 || c.max != 1) return false;
  ByteSet first;
  std::vector<ExprId> todo{x.kids[0]};
  while (!todo.empty()) {
    const Expr& k = b_.expr(todo.back());
    todo.pop_back();
    if (k.kind == Expr::Bytes) first = first | k.bytes;
    else if (k.kind == Expr::Alt) todo.insert(todo.end(), k.kids.begin(), k.kids.end());
    else if (k.kind == Expr::Seq && !k.kids.empty()) todo.push_back(k.kids[0]);
  }
  ByteSet starters = ByteSet::range(0x20, 0x7F) | ByteSet::range(0xC2, 0xF4);
  starters.bits[0] &= ~(uint64_t{1} << '"');  // a quote only ever comes escaped
  return (first | starters) == first;
}

bool Converter::matches_empty(ExprId e) {
  const Expr& x = b_.expr(e);
  switch (x.kind) {
    case Expr::Empty: return true;
    case Expr::Seq:
      for (ExprId k : x.kids)
        if (!matches_empty(k)) return false;
      return true;
    case Expr::Alt:
      for (ExprId k : x.kids)
        if (matches_empty(k)) return true;
      return false;
    case Expr::Repeat: return x.min == 0 || matches_empty(x.kids[0]);
    case Expr::Bytes: return false;
    default: throw TooLarge{};
  }
}

// The strings of e that start with byte c, without it; -1 for none.
ExprId Converter::derive(ExprId e, uint8_t c) {
  const Expr x = b_.expr(e);  // a copy: the builder grows below
  switch (x.kind) {
    case Expr::Empty: return -1;
    case Expr::Bytes: return x.bytes.has(c) ? b_.empty() : -1;
    case Expr::Seq: {
      std::vector<ExprId> alts;
      for (size_t i = 0; i < x.kids.size(); ++i) {
        const ExprId d = derive(x.kids[i], c);
        if (d >= 0) {
          std::vector<ExprId> rest{d};
          rest.insert(rest.end(), x.kids.begin() + static_cast<std::ptrdiff_t>(i) + 1, x.kids.end());
          alts.push_back(b_.seq(std::move(rest)));
        }
        if (!matches_empty(x.kids[i])) break;
      }
      return alts.empty() ? -1 : b_.alt(std::move(alts));
    }
    case Expr::Alt: {
      std::vector<ExprId> alts;
      for (ExprId k : x.kids)
        if (const ExprId d = derive(k, c); d >= 0) alts.push_back(d);
      return alts.empty() ? -1 : b_.alt(std::move(alts));
    }
    case Expr::Repeat: {
      if (x.max == 0) return -1;
      const ExprId d = derive(x.kids[0], c);
      if (d < 0) return -1;
      return b_.seq({d, b_.repeat(x.kids[0], std::max(x.min - 1, 0), x.max < 0 ? -1 : x.max - 1)});
    }
    default: throw TooLarge{};
  }
}

// ---- numbers ---------------------------------------------------------------------------------

Decimal Converter::decimal_of(const Json& v, const std::string& kw, const std::string& path) const {
  const auto d = parse_decimal(number_text(v));
  if (!d) throw SchemaError(kw, child(path, kw), "'" + kw + "' must be a finite number of at most 400 digits");
  return *d;
}

// The tighter of minimum and exclusiveMinimum.
std::optional<Bound> Converter::lower_bound(const Json& s, const std::string& path) const {
  std::optional<Bound> out;
  if (s.contains("minimum")) out = Bound{decimal_of(s["minimum"], "minimum", path), false};
  if (s.contains("exclusiveMinimum")) {
    const Bound x{decimal_of(s["exclusiveMinimum"], "exclusiveMinimum", path), true};
    if (!out || compare(x.value, out->value) >= 0) out = x;
  }
  return out;
}

std::optional<Bound> Converter::upper_bound(const Json& s, const std::string& path) const {
  std::optional<Bound> out;
  if (s.contains("maximum")) out = Bound{decimal_of(s["maximum"], "maximum", path), false};
  if (s.contains("exclusiveMaximum")) {
    const Bound x{decimal_of(s["exclusiveMaximum"], "exclusiveMaximum", path), true};
    if (!out || compare(x.value, out->value) <= 0) out = x;
  }
  return out;
}

ExprId Converter::integer_expr(const Flat& f) {
  const auto lo = lower_bound(f.s, f.path);
  const auto hi = upper_bound(f.s, f.path);
  if (!lo && !hi) return b_.ref(integer_rule());
  std::optional<Decimal> a, z;
  if (lo) a = int_at_least(lo->value, lo->exclusive);
  if (hi) z = int_at_most(hi->value, hi->exclusive);
  return int_range(a, z);
}

ExprId Converter::number_expr(const Flat& f) {
  const auto lo = lower_bound(f.s, f.path);
  const auto hi = upper_bound(f.s, f.path);
  if (!lo && !hi) return b_.ref(number_rule());
  return num_range(lo, hi);
}

// Integers in [lo, hi] in canonical spelling: negatives as "-" and a magnitude range.
ExprId Converter::int_range(const std::optional<Decimal>& lo, const std::optional<Decimal>& hi) {
  if (lo && hi && compare(*lo, *hi) > 0) return nothing();
  std::vector<ExprId> alts;
  if (!lo || lo->neg) {  // negative part: magnitudes in [max(1, -hi), -lo]
    std::string from = hi && hi->neg ? hi->whole : "1";
    std::optional<std::string> to;
    if (lo) to = lo->whole;
    alts.push_back(b_.seq({lit("-"), uint_range(from, to)}));
  }
  if (!hi || !hi->neg) {
    std::optional<std::string> to;
    if (hi) to = hi->whole;
    alts.push_back(uint_range(lo && !lo->neg ? lo->whole : "0", to));
  }
  return b_.alt(std::move(alts));
}

// Canonical non-negative integers from lo to hi (none: unbounded), by digit count: the
// lengths strictly between the bounds' lengths are free, the two edge lengths are compared
// digit by digit.
ExprId Converter::uint_range(const std::string& lo, const std::optional<std::string>& hi) {
  const size_t la = lo.size();
  if (hi && (hi->size() < la || (hi->size() == la && *hi < lo))) return nothing();
  if (hi && hi->size() == la) return same_length(lo, *hi, 0, true, true);
  std::vector<ExprId> alts{same_length(lo, std::string(la, '9'), 0, true, true)};
  const ExprId lead = range('1', '9');
  if (!hi) {
    alts.push_back(b_.seq({lead, b_.repeat(digit(), static_cast<int32_t>(la), -1)}));
    return b_.alt(std::move(alts));
  }
  const size_t lb = hi->size();
  if (lb - la >= 2)
    alts.push_back(b_.seq({lead, b_.repeat(digit(), static_cast<int32_t>(la), static_cast<int32_t>(lb - 2))}));
  alts.push_back(same_length("1" + std::string(lb - 1, '0'), *hi, 0, true, true));
  return b_.alt(std::move(alts));
}

// Digit strings of lo's length between lo and hi, from position i; tlo / thi: the digits so
// far equal lo's / hi's. Each step leaves at most one tight branch per side: linear size.
ExprId Converter::same_length(const std::string& lo, const std::string& hi, size_t i, bool tlo, bool thi) {
  const size_t n = lo.size();
  if (i == n) return b_.empty();
  const auto rest = static_cast<int32_t>(n - i - 1);
  if (!tlo && !thi) return digits(static_cast<int>(n - i));
  const char l = tlo ? lo[i] : '0', h = thi ? hi[i] : '9';
  if (tlo && thi && l == h) return b_.seq({lit(std::string(1, l)), same_length(lo, hi, i + 1, true, true)});
  std::vector<ExprId> alts;
  if (tlo) alts.push_back(b_.seq({lit(std::string(1, l)), same_length(lo, hi, i + 1, true, false)}));
  const char from = static_cast<char>(tlo ? l + 1 : l), to = static_cast<char>(thi ? h - 1 : h);
  if (from <= to) alts.push_back(b_.seq({range(from, to), b_.repeat(digit(), rest, rest)}));
  if (thi) alts.push_back(b_.seq({lit(std::string(1, h)), same_length(lo, hi, i + 1, false, true)}));
  return b_.alt(std::move(alts));
}

// Numbers in the range written without an exponent: a negative part ("-" and a magnitude,
// zero excluded) and a non-negative part.
ExprId Converter::num_range(const std::optional<Bound>& lo, const std::optional<Bound>& hi) {
  if (lo && hi) {
    const int c = compare(lo->value, hi->value);
    if (c > 0 || (c == 0 && (lo->exclusive || hi->exclusive))) return nothing();
  }
  const Decimal zero;
  std::vector<ExprId> alts;
  if (!lo || lo->value.neg) {
    Bound from{zero, true};  // magnitude > 0, or >= -hi for a negative hi ...
    if (hi && hi->value.neg) {
      from = *hi;
      from.value.neg = false;
    }
    std::optional<Bound> to;  // ... and <= -lo
    if (lo) {
      to = *lo;
      to->value.neg = false;
    }
    alts.push_back(b_.seq({lit("-"), magnitude_range(from, to)}));
  }
  const bool nonneg = !hi || (!hi->value.neg && !(compare(hi->value, zero) == 0 && hi->exclusive));
  if (nonneg) alts.push_back(magnitude_range(lo && !lo->value.neg ? *lo : Bound{zero, false}, hi));
  return b_.alt(std::move(alts));
}

// Non-negative decimals between lo and hi: split on the integer part.
ExprId Converter::magnitude_range(const Bound& lo, const std::optional<Bound>& hi) {
  if (hi) {
    const int c = compare(lo.value, hi->value);
    if (c > 0 || (c == 0 && (lo.exclusive || hi->exclusive))) return nothing();
  }
  const std::string& a = lo.value.whole;
  const Bound lo_frac{Decimal{false, "0", lo.value.frac}, lo.exclusive};
  if (hi && hi->value.whole == a) {
    const Bound hi_frac{Decimal{false, "0", hi->value.frac}, hi->exclusive};
    return b_.seq({lit(a), fraction(lo_frac, hi_frac)});
  }
  std::vector<ExprId> alts{b_.seq({lit(a), fraction(lo_frac, std::nullopt)})};
  const std::string from = add_one(a);
  std::optional<std::string> to;
  if (hi) to = sub_one(hi->value.whole);  // hi's whole part > a here, so > 0
  const ExprId any_fraction = b_.opt(b_.seq({lit("."), more_digits(0, true, digit())}));
  if (!to || !(to->size() < from.size() || (to->size() == from.size() && *to < from)))
    alts.push_back(b_.seq({uint_range(from, to), any_fraction}));
  if (hi) {
    const Bound hi_frac{Decimal{false, "0", hi->value.frac}, hi->exclusive};
    alts.push_back(b_.seq({lit(hi->value.whole), fraction(std::nullopt, hi_frac)}));
  }
  return b_.alt(std::move(alts));
}

// An optional ".digits" whose value 0.digits lies within the bounds (their fraction parts).
ExprId Converter::fraction(const std::optional<Bound>& lo, const std::optional<Bound>& hi) {
  const bool zero_ok =
      (!lo || (lo->value.frac.empty() && !lo->exclusive)) && (!hi || !hi->value.frac.empty() || !hi->exclusive);
  const std::string lf = lo ? lo->value.frac : "", hf = hi ? hi->value.frac : "";
  const ExprId digits_part = fraction_digits(lf, lo && lo->exclusive, hf, hi && hi->exclusive, 0, lo.has_value(),
                                             hi.has_value(), true);
  const ExprId dotted = b_.seq({lit("."), digits_part});
  return zero_ok ? b_.alt({b_.empty(), dotted}) : dotted;
}

// Fraction digit strings from position i; tlo / thi: the digits so far equal the bound's
// (missing bound digits count as 0). need_digit: the empty string is not allowed here.
ExprId Converter::fraction_digits(const std::string& lo, bool lo_excl, const std::string& hi, bool hi_excl, size_t i,
                                  bool tlo, bool thi, bool need_digit) {
  // At most 20 digits, or one past the longer bound's own.
  const size_t cap = std::max(kMaxFractionDigits, std::max(lo.size(), hi.size()) + 1);
  if (tlo && i >= lo.size() && !lo_excl) tlo = false;  // already >= lo whatever follows
  if (thi && i >= hi.size()) {                         // equal to hi: only zeros may follow
    if (hi_excl || tlo) return nothing();
    return more_digits(i, need_digit, lit("0"), cap);
  }
  if (tlo && i >= lo.size() && !thi) {  // equal to an exclusive lo: some nonzero digit must follow
    std::vector<ExprId> alts;
    for (size_t zeros = 0; i + zeros < cap; ++zeros)
      alts.push_back(b_.seq({b_.repeat(lit("0"), static_cast<int32_t>(zeros), static_cast<int32_t>(zeros)), range('1', '9'),
                             more_digits(i + zeros + 1, false, digit(), cap)}));
    return b_.alt(std::move(alts));
  }
  if (!tlo && !thi) return more_digits(i, need_digit, digit(), cap);
  std::vector<ExprId> alts;
  // Ending here is fine unless the digits so far equal lo's (then they are below lo, or
  // equal to an exclusive lo); equal to a prefix of hi is below hi (hi has more digits).
  if (!need_digit && !tlo) alts.push_back(b_.empty());
  const char l = tlo && i < lo.size() ? lo[i] : '0';
  const char h = thi ? hi[i] : '9';
  auto next = [&](bool still_lo, bool still_hi) {
    return fraction_digits(lo, lo_excl, hi, hi_excl, i + 1, still_lo, still_hi, false);
  };
  if (tlo && thi && l == h) {
    alts.push_back(b_.seq({lit(std::string(1, l)), next(true, true)}));
    return b_.alt(std::move(alts));
  }
  if (tlo) alts.push_back(b_.seq({lit(std::string(1, l)), next(true, false)}));
  const char from = static_cast<char>(tlo ? l + 1 : '0'), to = static_cast<char>(thi ? h - 1 : '9');
  if (from <= to) alts.push_back(b_.seq({range(from, to), more_digits(i + 1, false, digit(), cap)}));
  if (thi) alts.push_back(b_.seq({lit(std::string(1, h)), next(false, true)}));
  return b_.alt(std::move(alts));
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

ExprId int_part(GrammarBuilder& b) {
  return b.alt({b.literal("0"), b.seq({b.bytes(ByteSet::range('1', '9')), b.star(b.bytes(ByteSet::range('0', '9')))})});
}

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

}  // namespace

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
