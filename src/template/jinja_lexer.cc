#include "template/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "template/jinja_text.h"

namespace zen::jinja {
namespace {

// Longest first, as jinja2 sorts them.
constexpr std::string_view kOperators[] = {
    "//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[", "]", "(",
    ")",  "{",  "}",  "<",  ">",  "=",  ".", ":", "|", ",", ";"};

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

// Code point at s[i] and its byte length (invalid bytes count as one).
char32_t code_point_at(std::string_view s, size_t i, size_t* len) {
  size_t n = 1;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *len = 1;
    return b0;
  }
  if (b0 >= 0xC0) n = b0 >= 0xF0 ? 4 : (b0 >= 0xE0 ? 3 : 2);
  n = std::min(n, s.size() - i);
  const std::u32string cps = decode_utf8(s.substr(i, n));
  // An invalid lead byte decodes to several escaped code points: consume only the first byte.
  *len = cps.size() == 1 ? n : 1;
  return cps.empty() ? 0 : cps[0];
}

// Length of the Python-whitespace run at s[i].
size_t whitespace_run(std::string_view s, size_t i) {
  size_t start = i;
  while (i < s.size()) {
    size_t len = 0;
    if (!is_space(code_point_at(s, i, &len))) break;
    i += len;
  }
  return i - start;
}

bool is_whitespace_only(std::string_view s) {
  return !s.empty() && whitespace_run(s, 0) == s.size();
}

std::string rstrip_whitespace(std::string_view s) {
  return str_strip(s, nullptr, StripSide::kRight);
}

// Digits with optional single underscores between them: (\d+_)*\d+. Returns length or 0.
size_t digit_run(std::string_view s, size_t i) {
  size_t j = i;
  if (j >= s.size() || !is_ascii_digit(s[j])) return 0;
  while (true) {
    while (j < s.size() && is_ascii_digit(s[j])) ++j;
    if (j + 1 < s.size() && s[j] == '_' && is_ascii_digit(s[j + 1])) {
      ++j;
      continue;
    }
    return j - i;
  }
}

// jinja2's float_re at s[i]; returns its length or 0.
size_t match_float(std::string_view s, size_t i) {
  if (i > 0 && s[i - 1] == '.') return 0;
  size_t j = i + digit_run(s, i);
  if (j == i) return 0;
  size_t fraction_end = j;
  if (j < s.size() && s[j] == '.') {
    const size_t frac = digit_run(s, j + 1);
    if (frac > 0) fraction_end = j + 1 + frac;
  }
  // Exponent part (with optional fraction).
  size_t k = fraction_end;
  if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
    size_t m = k + 1;
    if (m < s.size() && (s[m] == '+' || s[m] == '-')) ++m;
    const size_t exp = digit_run(s, m);
    if (exp > 0) return m + exp - i;
  }
  return fraction_end > j ? fraction_end - i : 0;
}

bool is_digit_of_base(char c, int base) {
  if (base == 2) return c == '0' || c == '1';
  if (base == 8) return c >= '0' && c <= '7';
  if (base == 16) return is_ascii_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
  return is_ascii_digit(c);
}

// jinja2's integer_re at s[i]; returns its length or 0 and sets base.
size_t match_integer(std::string_view s, size_t i, int* base) {
  if (i >= s.size() || !is_ascii_digit(s[i])) return 0;
  if (s[i] == '0' && i + 1 < s.size()) {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    const int b = p == 'b' ? 2 : (p == 'o' ? 8 : (p == 'x' ? 16 : 0));
    if (b != 0) {
      size_t j = i + 2;
      size_t digits = 0;
      while (j < s.size()) {
        if (s[j] == '_' && j + 1 < s.size() && is_digit_of_base(s[j + 1], b)) {
          j += 2;
        } else if (is_digit_of_base(s[j], b)) {
          ++j;
        } else {
          break;
        }
        ++digits;
      }
      if (digits > 0) {
        *base = b;
        return j - i;
      }
    }
  }
  *base = 10;
  if (s[i] == '0') {  // 0(_?0)*
    size_t j = i + 1;
    while (j < s.size()) {
      if (s[j] == '0') {
        ++j;
      } else if (s[j] == '_' && j + 1 < s.size() && s[j + 1] == '0') {
        j += 2;
      } else {
        break;
      }
    }
    return j - i;
  }
  return digit_run(s, i);
}

size_t match_name(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    const char c = s[j];
    if (c == '_' || is_ascii_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) {
      ++j;
      continue;
    }
    if (static_cast<unsigned char>(c) < 0x80) break;
    size_t len = 0;
    if (!is_alpha(code_point_at(s, j, &len))) break;
    j += len;
  }
  return j - i;
}

// Length of a quoted string literal at s[i] including quotes, or 0 if unterminated.
size_t match_string(std::string_view s, size_t i) {
  const char quote = s[i];
  for (size_t j = i + 1; j < s.size(); ++j) {
    if (s[j] == '\\') {
      ++j;
    } else if (s[j] == quote) {
      return j + 1 - i;
    }
  }
  return 0;
}

int hex_value(char c) {
  if (is_ascii_digit(c)) return c - '0';
  c = static_cast<char>(c | 0x20);
  return (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
}

// Python's unicode-escape decoding of a string literal body (what jinja2 applies).
std::string unescape(std::string_view body, const SourceMap& map, size_t offset) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    switch (c) {
      case '\n': break;  // line continuation
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const int width = c == 'x' ? 2 : (c == 'u' ? 4 : 8);
        uint32_t cp = 0;
        for (int k = 1; k <= width; ++k) {
          const int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
          if (h < 0) syntax_error(map, offset, std::string("truncated \\") + c + " escape in string");
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (cp > 0x10FFFF) syntax_error(map, offset, "illegal Unicode character in string");
        append_utf8(out, cp);
        i += width;
        break;
      }
      case 'N': syntax_error(map, offset, "\\N{...} escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[i + k] - '0');
          append_utf8(out, cp);
          i += k - 1;
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          // jinja2 backslash-escapes non-ASCII text before decoding, so "\é" reads "\xe9".
          size_t len = 0;
          const char32_t cp = code_point_at(body, i, &len);
          char buf[16];
          const char* fmt = cp < 0x100 ? "\\x%02x" : (cp < 0x10000 ? "\\u%04x" : "\\U%08x");
          std::snprintf(buf, sizeof(buf), fmt, static_cast<unsigned>(cp));
          out += buf;
          i += len - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& source, const SourceMap& map) : src_(source), map_(map) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    push(TokenType::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  void push(TokenType type, std::string value, size_t offset) {
    Token t;
    t.type = type;
    t.value = std::move(value);
    t.offset = offset;
    tokens_.push_back(std::move(t));
  }

  // Data before a tag, with the tag's whitespace control applied.
  void push_data(std::string_view text, size_t offset, char sign, bool is_variable) {
    std::string data(text);
    if (sign == '-') {
      data = rstrip_whitespace(data);
    } else if (sign != '+' && !is_variable) {  // lstrip_blocks
      const size_t line_start = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
      if ((line_start > 0 || line_starting_) && is_whitespace_only(std::string_view(data).substr(line_start)))
        data.resize(line_start);
    }
    if (!data.empty()) push(TokenType::kData, std::move(data), offset);
  }

  // Position just past a block end ("+%}", "-%}\s*", "%}\n?") at i, or npos.
  size_t match_block_end(size_t i) const {
    const std::string_view s(src_);
    if (s.substr(i, 3) == "+%}") return i + 3;
    if (s.substr(i, 3) == "-%}") return i + 3 + whitespace_run(s, i + 3);
    if (s.substr(i, 2) == "%}") return i + 2 + (i + 2 < s.size() && s[i + 2] == '\n' ? 1 : 0);
    return std::string::npos;
  }

  size_t match_variable_end(size_t i) const {
    const std::string_view s(src_);
    if (s.substr(i, 3) == "-}}") return i + 3 + whitespace_run(s, i + 3);
    if (s.substr(i, 2) == "}}") return i + 2;
    return std::string::npos;
  }

  // "{%(-|+|)\s*raw\s*(-%}\s*|%})" at i: returns the end or npos.
  size_t match_raw_begin(size_t i) const {
    const std::string_view s(src_);
    size_t j = i + 2;
    if (j < s.size() && (s[j] == '-' || s[j] == '+')) ++j;
    j += whitespace_run(s, j);
    if (s.substr(j, 3) != "raw") return std::string::npos;
    j += 3;
    j += whitespace_run(s, j);
    if (s.substr(j, 3) == "-%}") return j + 3 + whitespace_run(s, j + 3);
    if (s.substr(j, 2) == "%}") return j + 2;
    return std::string::npos;
  }

  void lex_root() {
    const std::string_view s(src_);
    size_t tag = pos_;
    while (true) {
      tag = s.find('{', tag);
      if (tag == std::string::npos || tag + 1 >= s.size()) {
        push(TokenType::kData, std::string(s.substr(pos_)), pos_);
        pos_ = s.size();
        return;
      }
      const char k = s[tag + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++tag;
    }
    const char kind = s[tag + 1];
    size_t inner = tag + 2;
    char sign = 0;
    if (inner < s.size() && (s[inner] == '-' || s[inner] == '+')) sign = s[inner++];
    push_data(s.substr(pos_, tag - pos_), pos_, sign, kind == '{');
    if (kind == '%') {
      const size_t raw_end = match_raw_begin(tag);
      if (raw_end != std::string::npos) return lex_raw(tag, raw_end);
    }
    if (kind == '#') return lex_comment(tag, inner);
    push(kind == '{' ? TokenType::kVariableBegin : TokenType::kBlockBegin, "", tag);
    lex_tag(inner, kind == '{');
  }

  void lex_comment(size_t tag, size_t inner) {
    const std::string_view s(src_);
    const size_t close = s.find("#}", inner);
    if (close == std::string::npos) syntax_error(map_, tag, "Missing end of comment tag");
    const char sign = close > inner ? s[close - 1] : 0;
    size_t end = close + 2;
    if (sign == '-') {
      end += whitespace_run(s, end);
    } else if (sign != '+' && end < s.size() && s[end] == '\n') {
      ++end;
    }
    finish_tag(end);
  }

  void lex_raw(size_t tag, size_t body_start) {
    const std::string_view s(src_);
    for (size_t i = s.find("{%", body_start); i != std::string::npos; i = s.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = 0;
      if (j < s.size() && (s[j] == '-' || s[j] == '+')) sign = s[j++];
      j += whitespace_run(s, j);
      if (s.substr(j, 6) != "endraw") continue;
      j += 6;
      j += whitespace_run(s, j);
      const size_t end = match_block_end(j);
      if (end == std::string::npos) continue;
      push_data(s.substr(body_start, i - body_start), body_start, sign, false);
      finish_tag(end);
      return;
    }
    syntax_error(map_, tag, "Missing end of raw directive");
  }

  void finish_tag(size_t end) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  void lex_tag(size_t i, bool is_variable) {
    const std::string_view s(src_);
    std::vector<char> balance;
    while (true) {
      if (balance.empty()) {
        const size_t end = is_variable ? match_variable_end(i) : match_block_end(i);
        if (end != std::string::npos) {
          push(is_variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, "", i);
          finish_tag(end);
          return;
        }
      }
      if (i >= s.size()) {  // the parser reports the missing end
        pos_ = s.size();
        return;
      }
      i = lex_one(i, balance);
    }
  }

  // Lexes one expression token at i; returns the position after it.
  size_t lex_one(size_t i, std::vector<char>& balance) {
    const std::string_view s(src_);
    if (const size_t ws = whitespace_run(s, i); ws > 0) return i + ws;
    if (const size_t len = match_float(s, i); len > 0) {
      std::string text(s.substr(i, len));
      text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
      push(TokenType::kFloat, text, i);
      tokens_.back().real = std::strtod(text.c_str(), nullptr);
      return i + len;
    }
    int base = 10;
    if (const size_t len = match_integer(s, i, &base); len > 0) {
      std::string text(s.substr(i, len));
      text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
      const std::string digits = base == 10 ? text : text.substr(2);
      errno = 0;
      const unsigned long long v = std::strtoull(digits.c_str(), nullptr, base);
      if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
        syntax_error(map_, i, "integer literal too large");
      push(TokenType::kInteger, text, i);
      tokens_.back().integer = static_cast<int64_t>(v);
      return i + len;
    }
    if (const size_t len = match_name(s, i); len > 0) {
      push(TokenType::kName, std::string(s.substr(i, len)), i);
      return i + len;
    }
    if (s[i] == '\'' || s[i] == '"') {
      if (const size_t len = match_string(s, i); len > 0) {
        push(TokenType::kString, unescape(s.substr(i + 1, len - 2), map_, i), i);
        return i + len;
      }
    }
    for (std::string_view op : kOperators) {
      if (s.substr(i, op.size()) != op) continue;
      track_balance(op, balance, i);
      push(TokenType::kOperator, std::string(op), i);
      return i + op.size();
    }
    size_t len = 0;
    std::string ch;
    append_utf8(ch, code_point_at(s, i, &len));
    syntax_error(map_, i, "unexpected char '" + ch + "'");
  }

  void track_balance(std::string_view op, std::vector<char>& balance, size_t offset) {
    if (op == "(") balance.push_back(')');
    if (op == "[") balance.push_back(']');
    if (op == "{") balance.push_back('}');
    if (op == ")" || op == "]" || op == "}") {
      if (balance.empty()) syntax_error(map_, offset, "unexpected '" + std::string(op) + "'");
      if (balance.back() != op[0])
        syntax_error(map_, offset, "unexpected '" + std::string(op) + "', expected '" + balance.back() + "'");
      balance.pop_back();
    }
  }

  const std::string& src_;
  const SourceMap& map_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

SourceMap::SourceMap(std::string_view source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i)
    if (source[i] == '\n') line_starts_.push_back(i + 1);
}

std::string SourceMap::describe(size_t offset) const {
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line = static_cast<size_t>(it - line_starts_.begin());
  const size_t column = offset - line_starts_[line - 1] + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(const std::string& source, const SourceMap& map) {
  return Lexer(source, map).run();
}

void syntax_error(const SourceMap& map, size_t offset, const std::string& message) {
  fail("chat template: syntax error at ", map.describe(offset), ": ", message);
}

}  // namespace zen::jinja
