#include "tokenizer/pretokenizer.h"

#include "base/scratch.h"
#include "tokenizer/unicode.h"

namespace zen {
namespace {

using unicode::kLetter;
using unicode::kMark;
using unicode::kNumber;
using unicode::kWhitespace;

struct Char {
  uint32_t cp;
  uint32_t offset;  // byte offset of the character in the text
  uint8_t flags;
};

// The text as characters, plus a sentinel at the end (flags 0, offset = text size).
void decode_chars(std::string_view text, std::vector<Char>& chars) {
  chars.clear();
  chars.reserve(text.size() + 1);
  for (size_t pos = 0; pos < text.size();) {
    const uint8_t b = static_cast<uint8_t>(text[pos]);
    if (b < 0x80) {
      chars.push_back({b, static_cast<uint32_t>(pos), unicode::char_flags(b)});
      ++pos;
      continue;
    }
    const unicode::Decoded d = unicode::decode_utf8(text, pos);
    // Ill-formed bytes are kept one by one as "other" characters.
    const uint32_t len = unicode::is_invalid(d.cp) ? 1 : d.len;
    chars.push_back({d.cp, static_cast<uint32_t>(pos), unicode::char_flags(d.cp)});
    pos += len;
  }
  chars.push_back({0xFFFFFFFFu, static_cast<uint32_t>(text.size()), 0});
}

bool is_newline(uint32_t cp) { return cp == '\r' || cp == '\n'; }

uint32_t ascii_lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

// Length (in characters) of a contraction at c[i] ('s 't 're 've 'm 'll 'd), or 0.
size_t match_contraction(const Char* c, size_t i, size_t n, bool case_insensitive,
                         bool fold_long_s) {
  if (c[i].cp != '\'' || i + 1 >= n) return 0;
  auto norm = [&](uint32_t cp) {
    if (!case_insensitive) return cp;
    if (fold_long_s && cp == 0x17F) return uint32_t{'s'};
    return ascii_lower(cp);
  };
  const uint32_t a = norm(c[i + 1].cp);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  const uint32_t b = norm(c[i + 2].cp);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// Whitespace alternatives of the Qwen/Llama-3 pattern: \s*[\r\n]+ | \s+(?!\S) | \s+.
// With allow_newline_rule false, only the GPT-2 ones: \s+(?!\S) | \s+.
size_t match_whitespace(const Char* c, size_t i, size_t n, bool newline_rule) {
  size_t j = i;
  size_t after_last_newline = 0;
  while (j < n && (c[j].flags & kWhitespace)) {
    if (is_newline(c[j].cp)) after_last_newline = j + 1;
    ++j;
  }
  if (newline_rule && after_last_newline != 0) return after_last_newline;
  if (j == n) return j;          // \s+(?!\S) at the end of the text
  if (j - i >= 2) return j - 1;  // \s+(?!\S): leave the last space to the next word
  return j;                      // \s+
}

// One match of the Qwen2 / Qwen3.5 / Llama-3 pattern at c[i] (i < n); returns its end.
size_t match_qwen_family(const Char* c, size_t i, size_t n, size_t max_digits,
                         bool marks_are_letters, bool fold_long_s) {
  const uint8_t word_flags = kLetter | (marks_are_letters ? kMark : 0);
  const auto is_word = [&](size_t k) { return k < n && (c[k].flags & word_flags); };
  const auto is_number = [&](size_t k) { return k < n && (c[k].flags & kNumber); };
  const auto is_other = [&](size_t k) {
    return k < n && !(c[k].flags & (word_flags | kNumber | kWhitespace));
  };

  if (size_t len = match_contraction(c, i, n, /*case_insensitive=*/true, fold_long_s)) {
    return i + len;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  size_t start = i;
  if (!is_word(i) && !is_newline(c[i].cp) && !(c[i].flags & (kLetter | kNumber)) &&
      is_word(i + 1)) {
    start = i + 1;
  }
  if (is_word(start)) {
    size_t j = start + 1;
    while (is_word(j)) ++j;
    return j;
  }
  // \p{N}{1,max_digits}
  if (is_number(i)) {
    size_t j = i + 1;
    while (j - i < max_digits && is_number(j)) ++j;
    return j;
  }
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  start = (c[i].cp == ' ' && is_other(i + 1)) ? i + 1 : i;
  if (is_other(start)) {
    size_t j = start + 1;
    while (is_other(j)) ++j;
    while (j < n && is_newline(c[j].cp)) ++j;
    return j;
  }
  if (c[i].flags & kWhitespace) return match_whitespace(c, i, n, /*newline_rule=*/true);
  return i + 1;  // unreachable: every character is a letter, number, space or other
}

// One match of the GPT-2 pattern at c[i] (i < n); returns its end.
size_t match_gpt2(const Char* c, size_t i, size_t n) {
  if (size_t len = match_contraction(c, i, n, /*case_insensitive=*/false, false)) return i + len;
  const auto run_of = [&](auto&& in_class) -> size_t {
    const size_t start = (c[i].cp == ' ' && i + 1 < n && in_class(c[i + 1])) ? i + 1 : i;
    if (!in_class(c[start])) return 0;
    size_t j = start + 1;
    while (j < n && in_class(c[j])) ++j;
    return j;
  };
  if (size_t j = run_of([](const Char& ch) { return (ch.flags & kLetter) != 0; })) return j;
  if (size_t j = run_of([](const Char& ch) { return (ch.flags & kNumber) != 0; })) return j;
  const auto is_other = [](const Char& ch) {
    return ch.cp != 0xFFFFFFFFu && !(ch.flags & (kLetter | kNumber | kWhitespace));
  };
  if (size_t j = run_of(is_other)) return j;
  if (c[i].flags & kWhitespace) return match_whitespace(c, i, n, /*newline_rule=*/false);
  return i + 1;
}

void split_range(const std::vector<Char>& chars, size_t begin, size_t end,
                 const PreTokenizer& pre, std::vector<PreTokenizer::Piece>& out) {
  // Matchers see c[0..n) with c[n] as the boundary, like a regex run on the range alone.
  const Char* c = chars.data() + begin;
  const size_t n = end - begin;
  for (size_t i = 0; i < n;) {
    size_t j;
    switch (pre.kind) {
      case PreTokenizerKind::kQwen2: j = match_qwen_family(c, i, n, 1, false, pre.fold_long_s); break;
      case PreTokenizerKind::kQwen35: j = match_qwen_family(c, i, n, 1, true, pre.fold_long_s); break;
      case PreTokenizerKind::kLlama3: j = match_qwen_family(c, i, n, 3, false, pre.fold_long_s); break;
      default: j = match_gpt2(c, i, n); break;
    }
    out.push_back({c[i].offset, chars[begin + j].offset});
    i = j;
  }
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<Piece>& out) const {
  thread_local std::vector<Char> chars;
  const ScratchGuard keep_bounded(chars);
  decode_chars(text, chars);
  const size_t n = chars.size() - 1;
  if (kind != PreTokenizerKind::kDigitsThenGpt2) {
    split_range(chars, 0, n, *this, out);
    return;
  }
  // Digits(individual_digits) / llama.cpp's "\p{N}": each number character alone.
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!(chars[i].flags & kNumber)) continue;
    if (start < i) split_range(chars, start, i, *this, out);
    out.push_back({chars[i].offset, chars[i + 1].offset});
    start = i + 1;
  }
  if (start < n) split_range(chars, start, n, *this, out);
}

}  // namespace zen
