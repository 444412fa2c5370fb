// The JSON Schema converter's insides, shared by the files that implement it by idea:
// json_schema.cc (reading a schema: rules, references, flattening, values, enum / const),
// json_schema_objects.cc, json_schema_strings.cc and json_schema_numbers.cc. Internal to
// grammar/; the interface is json_schema.h.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/json_schema.h"

namespace zen::grammar::json_schema_internal {

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

// ---- helpers used across the files ---------------------------------------------------------

// keyword tables (json_schema.cc)
bool is_annotation(std::string_view k);
bool is_unsupported(std::string_view k);
bool is_constraint(std::string_view k);
bool is_type_name(const Json& t);

// JSON pointers (json_schema.cc)
std::string escape_token(std::string_view token);
std::string child(const std::string& path, std::string_view token);
std::string child(const std::string& path, std::string_view kw, size_t i);

// UTF-8 (json_schema.cc)
std::vector<uint32_t> code_points(std::string_view s);
// The spelling json.dumps(ensure_ascii=False) gives a character inside a string.
std::string canonical_spelling(uint32_t cp);
bool needs_escape(uint32_t cp);
ByteSet chars(std::string_view cs);

// decimal numbers (json_schema_numbers.cc)
// A number as decimal digit strings, so bounds past 64 bits and fractional bounds stay exact.
struct Decimal {
  bool neg = false;
  std::string whole = "0";  // no leading zeros
  std::string frac;         // no trailing zeros
};

struct Bound {
  Decimal value;
  bool exclusive = false;
};

// A string length bound that cannot be pushed into a pattern / format exactly (in budget).
struct TooLarge {};

int compare_magnitude(const Decimal& a, const Decimal& b);
int compare(const Decimal& a, const Decimal& b);
std::optional<Decimal> parse_decimal(std::string_view t);
std::string number_text(const Json& v);
Decimal integer(bool neg, std::string mag);
Decimal succ(const Decimal& d);
Decimal pred(const Decimal& d);
Decimal int_at_least(const Decimal& d, bool exclusive);
Decimal int_at_most(const Decimal& d, bool exclusive);

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

}  // namespace zen::grammar::json_schema_internal

