// GBNF front end: a recursive-descent parser over the grammar text that builds rule bodies
// directly (groups and repetitions stay expressions inside the rule; no helper rules).
//
// Layout follows llama.cpp: inside parentheses newlines are plain white space; outside them
// a newline ends the rule. As an extension (a superset: every grammar llama.cpp reads means
// the same here), a newline outside parentheses only ends the rule when what follows is the
// next `name ::=` or the end of the text, so a body may continue on the next line, e.g. with
// a leading `|`.
#include "grammar/gbnf.h"

#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "tokenizer/unicode.h"

namespace zen::grammar {
namespace {

constexpr int64_t kMaxCount = 100000;  // {m,n} bound, as for regexes
constexpr int kMaxDepth = 500;         // parenthesis nesting: bounds the recursion
constexpr uint32_t kMaxCodepoint = 0x10FFFF;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

class Parser {
 public:
  Parser(GrammarBuilder& b, std::string_view text) : b_(b), s_(text) {}

  int32_t parse(const std::string& root) {
    skip_space(true);
    while (!at_end()) {
      rule();
      skip_space(true);
    }
    check_defined();
    const auto it = rules_.find(root);
    if (it == rules_.end()) fail("gbnf: no rule named '", root, "'");
    return it->second.id;
  }

 private:
  struct RuleInfo {
    int32_t id = -1;
    size_t first_use = std::string_view::npos;  // offset of the first reference
    size_t defined_at = std::string_view::npos;
  };

  bool at_end() const { return p_ >= s_.size(); }
  char peek(size_t ahead = 0) const { return p_ + ahead < s_.size() ? s_[p_ + ahead] : '\0'; }

  // "line:column" of a byte offset; columns count characters, not bytes.
  std::string where(size_t pos) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line, col = 1;
      } else if ((static_cast<uint8_t>(s_[i]) & 0xC0) != 0x80) {
        ++col;
      }
    }
    return detail::concat(line, ":", col);
  }

  template <typename... Args>
  [[noreturn]] void error(size_t pos, Args&&... what) const {
    fail("gbnf:", where(pos), ": ", std::forward<Args>(what)...);
  }

  // What is at pos, for messages.
  std::string describe(size_t pos) const {
    if (pos >= s_.size()) return "end of input";
    const auto c = static_cast<uint8_t>(s_[pos]);
    if (c == '\n' || c == '\r') return "end of line";
    if (c >= 0x20 && c < 0x7F) return std::string("'") + static_cast<char>(c) + "'";
    return detail::concat("byte 0x", std::hex, static_cast<int>(c));
  }

  // Spaces, tabs and # comments; newlines too when nested. Outside parentheses a newline is
  // skipped only when the rule continues on the next line (see the top of the file).
  void skip_space(bool nested) {
    skip_inline();
    if (nested || (peek() != '\n' && peek() != '\r')) {
      if (nested) skip_lines();
      return;
    }
    const size_t save = p_;
    skip_lines();
    if (at_end() || rule_start_ahead()) p_ = save;
  }

  void skip_inline() {
    while (peek() == ' ' || peek() == '\t' || peek() == '#') {
      if (peek() == '#') {
        while (!at_end() && peek() != '\n' && peek() != '\r') ++p_;
      } else {
        ++p_;
      }
    }
  }

  void skip_lines() {
    while (peek() == '\n' || peek() == '\r') {
      ++p_;
      skip_inline();
    }
  }

  bool rule_start_ahead() const {
    size_t i = p_;
    while (i < s_.size() && is_name_char(s_[i])) ++i;
    if (i == p_) return false;
    while (i < s_.size() && (s_[i] == ' ' || s_[i] == '\t')) ++i;
    return s_.substr(i, 3) == "::=";
  }

  std::string name() {
    const size_t start = p_;
    while (is_name_char(peek())) ++p_;
    if (p_ == start) error(start, "expected a rule name, found ", describe(start));
    return std::string(s_.substr(start, p_ - start));
  }

  RuleInfo& info(const std::string& rule_name) {
    RuleInfo& r = rules_[rule_name];
    if (r.id < 0) r.id = b_.add_rule(rule_name);
    return r;
  }

  void rule() {
    const size_t start = p_;
    const std::string rule_name = name();
    skip_inline();
    if (s_.substr(p_, 3) != "::=") error(p_, "expected '::=' after rule name '", rule_name, "', found ", describe(p_));
    p_ += 3;
    RuleInfo& r = info(rule_name);
    if (r.defined_at != std::string_view::npos)
      error(start, "rule '", rule_name, "' is defined twice (first at ", where(r.defined_at), ")");
    r.defined_at = start;
    skip_space(false);
    const ExprId body = alternatives(false, 0);
    if (!at_end() && peek() != '\n' && peek() != '\r') error(p_, "unexpected ", describe(p_), " in rule '", rule_name, "'");
    b_.set_body(r.id, body);
  }

  ExprId alternatives(bool nested, int depth) {
    std::vector<ExprId> choices{sequence(nested, depth)};
    while (peek() == '|') {
      ++p_;
      skip_space(nested);
      choices.push_back(sequence(nested, depth));
    }
    return choices.size() == 1 ? choices[0] : b_.alt(std::move(choices));
  }

  ExprId sequence(bool nested, int depth) {
    std::vector<ExprId> items;
    while (!at_end()) {
      const size_t pos = p_;
      const char c = peek();
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (items.empty()) error(pos, "'", c, "' has nothing before it to repeat");
        items.back() = repetition(items.back());
      } else if (c == '"') {
        items.push_back(literal());
      } else if (c == '[') {
        items.push_back(char_class());
      } else if (c == '.') {
        ++p_;
        items.push_back(b_.any_codepoint());
      } else if (c == '(') {
        items.push_back(group(nested, depth));
        continue;  // group() skipped the space after ')'
      } else if (c == '<' || c == '!') {
        error(pos, "token references (<...>, !<...>) are not supported");
      } else if (is_name_char(c)) {
        RuleInfo& r = info(name());
        if (r.first_use == std::string_view::npos) r.first_use = pos;
        items.push_back(b_.ref(r.id));
      } else {
        break;
      }
      skip_space(nested);
    }
    if (items.empty()) return b_.empty();
    return items.size() == 1 ? items[0] : b_.seq(std::move(items));
  }

  ExprId group(bool nested, int depth) {
    const size_t open = p_++;
    if (depth >= kMaxDepth) error(open, "parentheses nested deeper than ", kMaxDepth);
    skip_space(true);
    const ExprId inner = alternatives(true, depth + 1);
    if (peek() != ')') error(p_, "expected ')' to close the '(' at ", where(open), ", found ", describe(p_));
    ++p_;
    skip_space(nested);
    return inner;
  }

  ExprId repetition(ExprId item) {
    const char c = s_[p_++];
    if (c == '*') return b_.star(item);
    if (c == '+') return b_.plus(item);
    if (c == '?') return b_.opt(item);
    const size_t open = p_ - 1;
    skip_space(true);
    const int64_t min = count();
    int64_t max = min;
    skip_space(true);
    if (peek() == ',') {
      ++p_;
      skip_space(true);
      max = is_digit(peek()) ? count() : -1;
      skip_space(true);
    }
    if (peek() != '}') error(p_, "expected '}' to close the '{' at ", where(open), ", found ", describe(p_));
    ++p_;
    if (max >= 0 && max < min) error(open, "repetition {", min, ",", max, "} has its bounds out of order");
    return b_.repeat(item, static_cast<int32_t>(min), static_cast<int32_t>(max));
  }

  int64_t count() {
    const size_t start = p_;
    if (!is_digit(peek())) error(p_, "expected a number, found ", describe(p_));
    int64_t v = 0;
    while (is_digit(peek())) {
      v = v * 10 + (s_[p_++] - '0');
      if (v > kMaxCount) error(start, "repetition count exceeds ", kMaxCount);
    }
    return v;
  }

  ExprId literal() {
    const size_t open = p_++;
    std::string text;
    while (peek() != '"') {
      if (at_end()) error(open, "unterminated string literal");
      const size_t pos = p_;
      const uint32_t cp = character();
      if (is_surrogate(cp)) error(pos, "surrogate code point in a string literal");
      unicode::append_utf8(text, cp);
    }
    ++p_;
    return b_.literal(text);
  }

  // [abc], [a-z], [^...]: one code point. Surrogates are accepted only as range ends (the
  // builder leaves them out of ranges), e.g. [^\uD800-\uDFFF].
  ExprId char_class() {
    const size_t open = p_++;
    const bool negated = peek() == '^';
    if (negated) ++p_;
    CodepointRanges ranges;
    while (peek() != ']') {
      if (at_end()) error(open, "unterminated character class");
      const size_t pos = p_;
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (peek() == '-' && peek(1) != ']' && p_ + 1 < s_.size()) {
        ++p_;
        hi = character();
        if (hi < lo) error(pos, "character range out of order");
      } else if (is_surrogate(lo)) {
        error(pos, "surrogate code point in a character class");
      }
      ranges.emplace_back(lo, hi);
    }
    if (ranges.empty()) error(open, "empty character class");
    ++p_;
    return negated ? b_.codepoints_except(ranges) : b_.codepoints(ranges);
  }

  // One character of a literal or class: a UTF-8 encoded code point or an escape.
  uint32_t character() {
    const size_t pos = p_;
    if (peek() != '\\') {
      const unicode::Decoded d = unicode::decode_utf8(s_, p_);
      if (unicode::is_invalid(d.cp)) error(pos, "invalid UTF-8");
      p_ += d.len;
      return d.cp;
    }
    p_ += 2;
    switch (s_.size() > pos + 1 ? s_[pos + 1] : '\0') {
      case 'x': return hex(pos, 2);
      case 'u': return hex(pos, 4);
      case 'U': return hex(pos, 8);
      case 't': return '\t';
      case 'r': return '\r';
      case 'n': return '\n';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-': return static_cast<uint8_t>(s_[pos + 1]);
      default: break;
    }
    p_ = pos;
    error(pos, "unknown escape ", describe(pos + 1), " after '\\'");
  }

  uint32_t hex(size_t pos, int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      const char c = peek();
      const int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) error(p_, "expected ", digits, " hex digits in the escape at ", where(pos));
      v = v * 16 + static_cast<uint32_t>(d);
      ++p_;
    }
    if (v > kMaxCodepoint) error(pos, "escape is past U+10FFFF");
    return v;
  }

  // Every referenced rule must be defined; the earliest reference to one that is not is
  // reported.
  void check_defined() const {
    const std::string* missing = nullptr;
    size_t at = std::string_view::npos;
    for (const auto& [rule_name, r] : rules_)
      if (r.defined_at == std::string_view::npos && r.first_use < at) missing = &rule_name, at = r.first_use;
    if (missing) error(at, "undefined rule '", *missing, "'");
  }

  GrammarBuilder& b_;
  std::string_view s_;
  size_t p_ = 0;
  std::unordered_map<std::string, RuleInfo> rules_;
};

}  // namespace

int32_t parse_gbnf(GrammarBuilder& b, std::string_view text, const std::string& root) {
  return Parser(b, text).parse(root);
}

}  // namespace zen::grammar
