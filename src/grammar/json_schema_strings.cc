// JSON Schema strings: characters as json.dumps writes them, lengths, formats, patterns, and
// lengths or formats together with a pattern (the converter is json_schema_converter.h).
#include <algorithm>
#include <string>
#include <vector>
#include <cstdint>
#include <optional>
#include <set>

#include "base/error.h"
#include "grammar/json_schema_converter.h"
#include "grammar/regex.h"

namespace zen::grammar::json_schema_internal {

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

namespace {

int64_t add_len(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : std::min<int64_t>(a + b, int64_t{1} << 40); }

int64_t mul_len(int64_t a, int64_t n) {
  if (a == 0 || n == 0) return 0;
  return a < 0 || n < 0 ? -1 : std::min<int64_t>(a * n, int64_t{1} << 40);
}

}  // namespace

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

}  // namespace zen::grammar::json_schema_internal
