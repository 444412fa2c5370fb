// Regex front end: a recursive-descent parser over code points builds a small syntax tree,
// which is compiled into builder expressions. The tree step exists because whether ^ and $
// are legal (and what they mean under search semantics) depends on the position of a node
// within its sequence, which is only known once the sequence is parsed.
#include "grammar/regex.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace zen::grammar {

std::string json_escape(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: break;
  }
  if (cp >= 0x20) return {};
  static const char* kHex = "0123456789abcdef";  // json.dumps writes lowercase: \u001f
  return std::string("\\u00") + kHex[cp >> 4] + kHex[cp & 15];
}

namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr int64_t kMaxCount = 100000;  // larger {m,n} counts are refused outright
constexpr int kMaxDepth = 500;         // group nesting: bounds the parser's recursion

// Sorted, merged, non-adjacent ranges.
CodepointRanges normalize(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodepointRanges complement(const CodepointRanges& r) {  // r normalized
  CodepointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return out;
}

CodepointRanges unite(CodepointRanges a, const CodepointRanges& b) {
  a.insert(a.end(), b.begin(), b.end());
  return normalize(std::move(a));
}

bool contains(const CodepointRanges& r, uint32_t cp) {
  return std::any_of(r.begin(), r.end(), [&](const auto& x) { return x.first <= cp && cp <= x.second; });
}

// ECMAScript's \d \w \s (ASCII digits and word characters; Unicode white space and line
// terminators for \s, as JSON Schema's ECMA-262 dialect defines them).
const CodepointRanges kDigit = {{'0', '9'}};
const CodepointRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodepointRanges kSpace = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const CodepointRanges kDot = {{0, '\n' - 1}, {'\n' + 1, kMaxCodepoint}};  // Python's `.`
const CodepointRanges kAll = {{0, kMaxCodepoint}};

struct Node {
  enum Kind : uint8_t { Chars, Seq, Alt, Repeat, Start, End } kind = Seq;
  CodepointRanges chars;  // Chars, normalized
  std::vector<Node> kids;
  int32_t min = 0, max = 0;  // Repeat; max -1 = unbounded
  size_t pos = 0;            // code point offset in the pattern, for messages
};

Node chars_node(CodepointRanges set, size_t pos) {
  Node n{Node::Chars};
  n.chars = normalize(std::move(set));
  n.pos = pos;
  return n;
}

// One element of a character class or escape: a single code point (may start a range) or a
// class escape like \d.
struct ClassItem {
  CodepointRanges set;
  bool single = true;
};

bool is_hex(uint32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint32_t hex_value(uint32_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }
bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
bool is_surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

class Parser {
 public:
  explicit Parser(std::string_view pattern) : pattern_(pattern) {
    for (size_t i = 0; i < pattern.size();) {
      const unicode::Decoded d = unicode::decode_utf8(pattern, i);
      if (unicode::is_invalid(d.cp)) error(cps_.size(), "invalid UTF-8");
      cps_.push_back(d.cp);
      i += d.len;
    }
  }

  Node parse() {
    Node n = alternation(0);
    if (i_ < cps_.size()) error(i_, "unmatched ')'");  // alternation stops only at ')'
    return n;
  }

  template <typename... Args>
  [[noreturn]] void error(size_t pos, Args&&... what) const {
    const std::string_view shown = pattern_.size() > 200 ? pattern_.substr(0, 200) : pattern_;
    fail("regex at position ", pos, ": ", std::forward<Args>(what)..., " (pattern \"", shown,
         pattern_.size() > 200 ? "...\")" : "\")");
  }

 private:
  bool at_end() const { return i_ >= cps_.size(); }
  uint32_t peek(size_t ahead = 0) const { return i_ + ahead < cps_.size() ? cps_[i_ + ahead] : 0xFFFFFFFF; }
  bool eat(uint32_t c) {
    if (peek() != c) return false;
    ++i_;
    return true;
  }

  Node alternation(int depth) {
    Node alt{Node::Alt};
    alt.pos = i_;
    alt.kids.push_back(sequence(depth));
    while (eat('|')) alt.kids.push_back(sequence(depth));
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  Node sequence(int depth) {
    Node seq{Node::Seq};
    seq.pos = i_;
    while (!at_end() && peek() != '|' && peek() != ')') {
      Node atom_node = atom(depth);
      quantifiers(atom_node);
      seq.kids.push_back(std::move(atom_node));
    }
    return seq;
  }

  // Applies a following quantifier, if any, to n.
  void quantifiers(Node& n) {
    const size_t start = i_;
    int64_t min = 0, max = 0;
    if (eat('*')) {
      min = 0, max = -1;
    } else if (eat('+')) {
      min = 1, max = -1;
    } else if (eat('?')) {
      min = 0, max = 1;
    } else if (!braces(min, max)) {
      return;
    }
    eat('?');  // lazy: the same language
    if (peek() == '*' || peek() == '+' || peek() == '?' || (peek() == '{' && brace_quantifier_ahead()))
      error(i_, "multiple repeat (possessive quantifiers are not supported)");
    Node rep{Node::Repeat};
    rep.pos = start;
    rep.min = static_cast<int32_t>(min);
    rep.max = static_cast<int32_t>(max);
    rep.kids.push_back(std::move(n));
    n = std::move(rep);
  }

  // {m} {m,} {m,n} and Python's {,n}. A '{' that starts none of them is a literal (as both
  // ECMAScript's Annex B and Python read it): returns false without consuming anything.
  bool braces(int64_t& min, int64_t& max) {
    if (peek() != '{' || !brace_quantifier_ahead()) return false;
    const size_t start = i_;
    ++i_;  // '{'
    min = is_digit(peek()) ? number(start) : 0;
    max = min;
    if (eat(',')) max = is_digit(peek()) ? number(start) : -1;
    ++i_;  // '}'
    if (max >= 0 && max < min) error(start, "repetition {", min, ",", max, "} has its bounds out of order");
    return true;
  }

  bool brace_quantifier_ahead() const {
    size_t j = i_ + 1, digits = 0;
    auto at = [&](size_t k) { return k < cps_.size() ? cps_[k] : 0u; };
    while (is_digit(at(j))) ++j, ++digits;
    const bool had_min = digits > 0;
    if (at(j) == ',') {
      ++j;
      while (is_digit(at(j))) ++j, ++digits;
    }
    return at(j) == '}' && (had_min || digits > 0);
  }

  int64_t number(size_t start) {
    int64_t v = 0;
    while (is_digit(peek())) {
      v = v * 10 + (cps_[i_++] - '0');
      if (v > kMaxCount) error(start, "repetition count exceeds ", kMaxCount);
    }
    return v;
  }

  Node atom(int depth) {
    const size_t pos = i_;
    const uint32_t c = cps_[i_++];
    switch (c) {
      case '(': return group(pos, depth);
      case '[': return char_class(pos);
      case '.': return chars_node(kDot, pos);
      case '^': return Node{Node::Start, {}, {}, 0, 0, pos};
      case '$': return Node{Node::End, {}, {}, 0, 0, pos};
      case '*':
      case '+':
      case '?': error(pos, "nothing to repeat before '", static_cast<char>(c), "'");
      case '\\': return escape_atom(pos);
      case '{':
        --i_;
        if (brace_quantifier_ahead()) error(pos, "nothing to repeat before '{'");
        ++i_;
        return chars_node({{c, c}}, pos);
      default: return chars_node({{c, c}}, pos);
    }
  }

  Node group(size_t pos, int depth) {
    if (depth >= kMaxDepth) error(pos, "groups nested deeper than ", kMaxDepth);
    if (eat('?') && group_prefix(pos)) return comment(pos);
    Node inner = alternation(depth + 1);
    if (!eat(')')) error(pos, "missing ')' for this '('");
    return inner;
  }

  // After "(?": accepts the non-capturing and named forms, refuses the rest by name. Returns
  // true for a comment (?#...).
  bool group_prefix(size_t pos) {
    const uint32_t c = peek();
    if (c == ':' || c == '#') return ++i_, c == '#';
    if (c == '=' || c == '!') error(pos, "lookahead '(?", static_cast<char>(c), "' is not supported");
    if (c == '<' && (peek(1) == '=' || peek(1) == '!'))
      error(pos, "lookbehind '(?<", static_cast<char>(peek(1)), "' is not supported");
    if (c == 'P' && peek(1) == '=') error(pos, "backreference '(?P=' is not supported");
    if (c == '>') error(pos, "atomic group '(?>' is not supported");
    if (c == '<' || (c == 'P' && peek(1) == '<')) return group_name(pos), false;
    error(pos, "'(?", c < 0x80 ? std::string(1, static_cast<char>(c)) : std::string("..."),
          "' (inline flags or an unknown group kind) is not supported");
  }

  void group_name(size_t pos) {
    i_ += peek() == 'P' ? 2 : 1;
    const size_t start = i_;
    while (!at_end() && peek() != '>') {
      const uint32_t c = peek();
      const bool ok = c == '_' || (c < 0x80 && std::isalpha(static_cast<int>(c))) || (i_ > start && is_digit(c));
      if (!ok) error(i_, "bad character in group name");
      ++i_;
    }
    if (i_ == start || !eat('>')) error(pos, "group name missing or not closed by '>'");
  }

  Node comment(size_t pos) {  // (?#...): no nesting, no escapes (Python)
    while (!at_end() && peek() != ')') ++i_;
    if (!eat(')')) error(pos, "missing ')' for this comment");
    return Node{Node::Seq, {}, {}, 0, 0, pos};
  }

  Node char_class(size_t pos) {
    const bool negate = eat('^');
    // ']' first is an empty class in ECMAScript but a literal in Python: refuse, not guess.
    if (peek() == ']') error(i_, "']' at the start of a class (write \\] for a literal ])");
    CodepointRanges set;
    while (!eat(']')) {
      if (at_end()) error(pos, "missing ']' for this '['");
      ClassItem lo = class_item();
      if (peek() == '-' && peek(1) != ']' && peek(1) != 0xFFFFFFFF) {
        const size_t dash = i_++;
        ClassItem hi = class_item();
        if (lo.single && hi.single) {
          if (lo.set[0].first > hi.set[0].first) error(dash, "class range out of order");
          set.emplace_back(lo.set[0].first, hi.set[0].first);
          continue;
        }
        set.emplace_back('-', '-');  // [\w-.]: '-' is literal next to a class escape (Annex B)
        set.insert(set.end(), hi.set.begin(), hi.set.end());
      }
      set.insert(set.end(), lo.set.begin(), lo.set.end());
    }
    set = normalize(std::move(set));
    return chars_node(negate ? complement(set) : set, pos);
  }

  ClassItem class_item() {
    const size_t pos = i_;
    const uint32_t c = cps_[i_++];
    if (c != '\\') return {{{c, c}}, true};
    if (at_end()) error(pos, "pattern ends with '\\'");
    if (peek() == 'b') return ++i_, ClassItem{{{8, 8}}, true};  // backspace inside a class
    return escape(pos, true);
  }

  Node escape_atom(size_t pos) {
    if (at_end()) error(pos, "pattern ends with '\\'");
    const uint32_t c = peek();
    if (c == 'A') return ++i_, Node{Node::Start, {}, {}, 0, 0, pos};
    if (c == 'Z' || c == 'z') return ++i_, Node{Node::End, {}, {}, 0, 0, pos};
    if (c == 'b' || c == 'B') error(pos, "word boundary '\\", static_cast<char>(c), "' is not supported");
    return chars_node(escape(pos, false).set, pos);
  }

  // The escape after a backslash at pos (i_ is just past the backslash).
  ClassItem escape(size_t pos, bool in_class) {
    const uint32_t c = cps_[i_++];
    switch (c) {
      case 'd': return {kDigit, false};
      case 'D': return {complement(kDigit), false};
      case 'w': return {kWord, false};
      case 'W': return {complement(kWord), false};
      case 's': return {kSpace, false};
      case 'S': return {complement(kSpace), false};
      case 'n': return single('\n');
      case 't': return single('\t');
      case 'r': return single('\r');
      case 'f': return single('\f');
      case 'v': return single('\v');
      case '0':
        if (is_digit(peek())) error(pos, "octal escapes are not supported");
        return single(0);
      case 'x': return single(hex_digits(pos, 2));
      case 'u': return single(unicode_escape(pos));
      case 'c':
        if (peek() < 0x80 && std::isalpha(static_cast<int>(peek()))) return single(cps_[i_++] % 32);
        error(pos, "'\\c' must be followed by a letter");
      case 'k': error(pos, "backreference '\\k' is not supported");
      case 'p':
      case 'P': error(pos, "Unicode property escapes are not supported");
      default: break;
    }
    if (c >= '1' && c <= '9') error(pos, "backreference '\\", static_cast<char>(c), "' is not supported");
    if (c < 0x80 && std::isalnum(static_cast<int>(c)))
      error(pos, "unknown escape '\\", static_cast<char>(c), "'", in_class ? " in a class" : "");
    return single(c);  // escaped punctuation or non-ASCII stands for itself
  }

  static ClassItem single(uint32_t cp) { return {{{cp, cp}}, true}; }

  uint32_t hex_digits(size_t pos, int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (!is_hex(peek())) error(pos, "expected ", n, " hex digits");
      v = v * 16 + hex_value(cps_[i_++]);
    }
    return v;
  }

  // \uHHHH (a UTF-16 surrogate pair written as two escapes is one code point) or \u{H...}.
  uint32_t unicode_escape(size_t pos) {
    if (eat('{')) {
      uint32_t v = 0;
      int n = 0;
      while (is_hex(peek()) && n < 8) v = v * 16 + hex_value(cps_[i_++]), ++n;
      if (n == 0 || !eat('}') || v > kMaxCodepoint) error(pos, "bad \\u{...} escape");
      if (is_surrogate(v)) error(pos, "lone surrogate in \\u{...}");
      return v;
    }
    const uint32_t v = hex_digits(pos, 4);
    if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
      const size_t save = i_;
      i_ += 2;
      const uint32_t lo = hex_digits(pos, 4);
      if (lo >= 0xDC00 && lo <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
      i_ = save;
    }
    if (is_surrogate(v)) error(pos, "lone surrogate in \\u escape");
    return v;
  }

  std::string_view pattern_;
  std::vector<uint32_t> cps_;
  size_t i_ = 0;
};

// Search-mode simplification. With anything allowed before the match, .*X equals .*X' where
// X' leaves out what .* absorbs: a nullable prefix, and all but the minimum count of a
// leading repetition (.*Y{m,n} = .*Y{m}); symmetrically at the end. Without it .*[^"]{1,100}
// determinizes into thousands of states. Subtrees holding anchors are kept, so the anchor
// checks still see them.
bool has_anchor(const Node& n) {
  return n.kind == Node::Start || n.kind == Node::End ||
         std::any_of(n.kids.begin(), n.kids.end(), [](const Node& k) { return has_anchor(k); });
}

bool nullable(const Node& n) {  // matches the empty string; false for anything with an anchor
  switch (n.kind) {
    case Node::Chars:
    case Node::Start:
    case Node::End: return false;
    case Node::Seq: return std::all_of(n.kids.begin(), n.kids.end(), [](const Node& k) { return nullable(k); });
    case Node::Alt: return std::any_of(n.kids.begin(), n.kids.end(), [](const Node& k) { return nullable(k); });
    case Node::Repeat: return !has_anchor(n) && (n.min == 0 || nullable(n.kids[0]));
  }
  return false;
}

// n is not nullable; left: trim the start (else the end).
void absorb(Node& n, bool left) {
  if (n.kind == Node::Repeat) {
    n.max = n.min;
  } else if (n.kind == Node::Alt) {
    for (Node& kid : n.kids) absorb(kid, left);
  } else if (n.kind == Node::Seq) {
    auto& kids = n.kids;
    while (!kids.empty() && nullable(left ? kids.front() : kids.back())) kids.erase(left ? kids.begin() : kids.end() - 1);
    if (!kids.empty()) absorb(left ? kids.front() : kids.back(), left);
  }
}

bool contains_kind(const Node& n, Node::Kind kind) {
  return n.kind == kind || std::any_of(n.kids.begin(), n.kids.end(), [&](const Node& k) { return contains_kind(k, kind); });
}

void simplify_for_search(Node& tree) {
  const bool free_left = !contains_kind(tree, Node::Start), free_right = !contains_kind(tree, Node::End);
  if ((free_left || free_right) && nullable(tree)) tree = Node{Node::Seq};  // .*X = .*
  if (free_left) absorb(tree, true);
  if (free_right) absorb(tree, false);
}


// The spelling of one code point: itself in UTF-8 or, in JSON string mode, its escape.
std::string spelling(uint32_t cp, bool json) {
  std::string s = json ? json_escape(cp) : std::string();
  if (s.empty()) unicode::append_utf8(s, cp);
  return s;
}

// A node's language split by the anchors its paths pass: index 2*start + end, where start
// means the path begins with ^ and end that it finishes with $; -1 where there is no path.
using Variants = std::array<ExprId, 4>;
constexpr Variants kNone = {-1, -1, -1, -1};

class Compiler {
 public:
  Compiler(GrammarBuilder& b, const Parser& parser, const RegexOptions& options)
      : b_(b), parser_(parser), json_(options.json_string) {}

  ExprId chars(const CodepointRanges& set) {
    if (!json_) return set.empty() ? b_.alt({}) : b_.codepoints(set);
    static const CodepointRanges kEscaped = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    std::vector<ExprId> choices;
    const CodepointRanges plain = complement(unite(complement(set), kEscaped));
    if (!plain.empty()) choices.push_back(b_.codepoints(plain));
    for (const auto& [lo, hi] : kEscaped)
      for (uint32_t cp = lo; cp <= hi; ++cp)
        if (contains(set, cp)) choices.push_back(b_.literal(json_escape(cp)));
    return choices.size() == 1 ? choices[0] : b_.alt(std::move(choices));
  }

  // at_start / at_end: whether the node begins / ends its top-level alternative, the only
  // places ^ / $ may appear.
  Variants compile(const Node& n, bool at_start, bool at_end) {
    switch (n.kind) {
      case Node::Chars: return only(chars(n.chars));
      case Node::Start:
        if (!at_start) parser_.error(n.pos, "'^' is only supported at the start of the pattern");
        return {-1, -1, b_.empty(), -1};
      case Node::End:
        if (!at_end) parser_.error(n.pos, "'$' is only supported at the end of the pattern");
        return {-1, b_.empty(), -1, -1};
      case Node::Repeat: return only(b_.repeat(compile(n.kids[0], false, false)[0], n.min, n.max));
      case Node::Alt: return alternatives(n, at_start, at_end);
      case Node::Seq: return sequence(n, at_start, at_end);
    }
    return kNone;
  }

 private:
  static Variants only(ExprId e) { return {e, -1, -1, -1}; }

  Variants alternatives(const Node& n, bool at_start, bool at_end) {
    std::array<std::vector<ExprId>, 4> parts;
    for (const Node& kid : n.kids) {
      const Variants v = compile(kid, at_start, at_end);
      for (int k = 0; k < 4; ++k)
        if (v[k] >= 0) parts[k].push_back(v[k]);
    }
    Variants out = kNone;
    for (int k = 0; k < 4; ++k)
      if (!parts[k].empty()) out[k] = parts[k].size() == 1 ? parts[k][0] : b_.alt(std::move(parts[k]));
    return out;
  }

  // Concatenation. Only the first item can carry ^ and only the last $, so variants join as
  // first[s][0] . middle . last[0][e]. Runs of single characters become one literal.
  Variants sequence(const Node& n, bool at_start, bool at_end) {
    std::optional<Variants> acc;
    std::string run;
    auto flush = [&] {
      if (!run.empty()) acc = join(acc, only(b_.literal(run)));
      run.clear();
    };
    for (size_t k = 0; k < n.kids.size(); ++k) {
      const Node& kid = n.kids[k];
      if (kid.kind == Node::Chars && kid.chars.size() == 1 && kid.chars[0].first == kid.chars[0].second) {
        run += spelling(kid.chars[0].first, json_);
        continue;
      }
      flush();
      acc = join(acc, compile(kid, at_start && k == 0, at_end && k + 1 == n.kids.size()));
    }
    flush();
    return acc ? *acc : only(b_.empty());
  }

  Variants join(const std::optional<Variants>& a, const Variants& b) {
    if (!a) return b;
    Variants out = kNone;
    for (int s = 0; s < 2; ++s)
      for (int e = 0; e < 2; ++e) {
        const ExprId x = (*a)[2 * s], y = b[e];
        if (x >= 0 && y >= 0) out[2 * s + e] = b_.expr(x).kind == Expr::Empty ? y : b_.seq({x, y});
      }
    return out;
  }

  GrammarBuilder& b_;
  const Parser& parser_;
  bool json_;
};

}  // namespace

ExprId parse_regex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options) {
  Parser parser(pattern);
  Node tree = parser.parse();
  if (!options.full_match) simplify_for_search(tree);
  Compiler compiler(b, parser, options);
  const Variants v = compiler.compile(tree, true, true);
  std::vector<ExprId> choices;
  if (options.full_match) {  // ^ and $ hold trivially at the ends of a full match
    for (ExprId e : v)
      if (e >= 0) choices.push_back(e);
  } else {  // search: unanchored sides may have anything around them
    const ExprId any = b.star(compiler.chars(kAll));
    if (v[0] >= 0) choices.push_back(b.seq({any, v[0], any}));
    if (v[1] >= 0) choices.push_back(b.seq({any, v[1]}));
    if (v[2] >= 0) choices.push_back(b.seq({v[2], any}));
    if (v[3] >= 0) choices.push_back(v[3]);
  }
  return choices.size() == 1 ? choices[0] : b.alt(std::move(choices));
}

}  // namespace zen::grammar
