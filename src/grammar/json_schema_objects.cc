// JSON Schema objects and arrays: members in the schema's order, optional ones, extra keys
// that equal no listed key, item lists and counts (the converter is json_schema_converter.h).
#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "grammar/json_schema_converter.h"

namespace zen::grammar::json_schema_internal {

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

}  // namespace zen::grammar::json_schema_internal
