#include "tokenizer/special_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace zen {
namespace {

// The last / first character of s, decoded (0 for none).
uint32_t last_char(std::string_view s) {
  if (s.empty()) return 0;
  size_t pos = s.size() - 1;
  while (pos > 0 && s.size() - pos < 4 && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) --pos;
  const unicode::Decoded d = unicode::decode_utf8(s, pos);
  return pos + d.len == s.size() ? d.cp : unicode::kInvalidBase;
}

uint32_t first_char(std::string_view s) {
  return s.empty() ? 0 : unicode::decode_utf8(s, 0).cp;
}

// Rust's char::is_alphanumeric (approximated by \p{L} and \p{N}) or '_': HF's word character.
bool is_word_char(uint32_t cp) {
  return cp == '_' || (unicode::char_flags(cp) & (unicode::kLetter | unicode::kNumber));
}

bool is_space_at(std::string_view s, size_t pos, size_t* len) {
  const unicode::Decoded d = unicode::decode_utf8(s, pos);
  *len = d.len;
  return (unicode::char_flags(d.cp) & unicode::kWhitespace) != 0;
}

// Start of the run of whitespace that ends s (s.size() if none).
size_t trailing_space_start(std::string_view s) {
  size_t start = s.size();
  while (start > 0) {
    size_t pos = start - 1;
    while (pos > 0 && start - pos < 4 && (static_cast<uint8_t>(s[pos]) & 0xC0) == 0x80) --pos;
    size_t len;
    if (!is_space_at(s, pos, &len) || pos + len != start) break;
    start = pos;
  }
  return start;
}

// Length of the run of whitespace that starts s.
size_t leading_space_length(std::string_view s) {
  size_t pos = 0, len;
  while (pos < s.size() && is_space_at(s, pos, &len)) pos += len;
  return pos;
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken& token) {
  if (token.content.empty()) return;  // can never match
  tokens_.push_back(token);
  auto& bucket = by_first_byte_[static_cast<uint8_t>(token.content[0])];
  bucket.push_back(static_cast<uint32_t>(tokens_.size() - 1));
  std::stable_sort(bucket.begin(), bucket.end(), [&](uint32_t a, uint32_t b) {
    return tokens_[a].content.size() > tokens_[b].content.size();
  });
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special,
                              std::vector<Fragment>& out) const {
  size_t emitted = 0;  // end of what has been emitted (HF's start_offset)
  size_t search = 0;   // where the next match may start
  while (search < text.size()) {
    // Leftmost-longest: the first position with any match, the longest token there.
    const AddedToken* match = nullptr;
    size_t match_pos = 0;
    for (size_t pos = search; pos < text.size() && match == nullptr; ++pos) {
      for (uint32_t index : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
        const AddedToken& t = tokens_[index];
        if (text.compare(pos, t.content.size(), t.content) == 0) {
          match = &t;
          match_pos = pos;
          break;
        }
      }
    }
    if (match == nullptr) break;
    size_t start = match_pos, stop = match_pos + match->content.size();
    search = stop;
    if (match->special && !parse_special) continue;
    if (match->single_word) {
      const bool space_before = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      const bool space_after = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
      if (!space_before || !space_after) continue;
    }
    if (match->lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    if (match->rstrip) stop += leading_space_length(text.substr(stop));
    start = std::max(start, emitted);
    if (emitted < start) out.push_back({-1, emitted, start});
    out.push_back({match->id, start, stop});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({-1, emitted, text.size()});
}

void partition_longest_first(std::string_view text,
                             const std::vector<std::pair<int32_t, std::string>>& tokens,
                             std::vector<Fragment>& out) {
  std::vector<Fragment> current{{-1, 0, text.size()}}, next;
  if (text.empty()) current.clear();
  for (const auto& [id, token] : tokens) {
    if (token.empty()) continue;
    next.clear();
    for (const Fragment& f : current) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t pos = f.begin;
      for (;;) {
        const size_t m = text.substr(0, f.end).find(token, pos);
        if (m == std::string_view::npos) break;
        if (m > pos) next.push_back({-1, pos, m});
        next.push_back({id, m, m + token.size()});
        pos = m + token.size();
      }
      if (pos < f.end) next.push_back({-1, pos, f.end});
    }
    current.swap(next);
  }
  out.insert(out.end(), current.begin(), current.end());
}

}  // namespace zen
